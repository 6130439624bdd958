//! Sink metrics as pure functions on plain arrays (REFERENCE §4; Gu et al., ICLR 2025;
//! Sun et al., 2024). Nothing here touches Burn: the probe path copies tensors to the host and
//! these functions do the maths, so they are tested on hand-built matrices.
//!
//! Positions are 0-based in code; "token 1"/`pos01` in names is index 0.
//!
//! Definitions (per layer l, sequence b, head h; A row-stochastic and causal, T keys):
//! - importance `α_k = 1/(T−k) Σ_{t=k}^{T−1} A[t,k]` (0-based k): the mean attention key k
//!   receives from the queries that can see it;
//! - `Sink_k^ε = 100 · mean_{l,b,h} 1[α_k > ε]` (strict `>`), in percent;
//! - attention entropy: mean over (b, h, t) of `−Σ_j A log A` (nats, 0·log 0 = 0);
//! - norm ratio: `mean_b ‖h_{b,0}‖ / mean_{b,t≥1} ‖h_{b,t}‖` (a ratio of means);
//! - top-3 |h| and median |h|: per sequence, averaged over sequences;
//! - massive activations: entries with |x| > 100 and |x| ≥ 1000 · median|h| of that
//!   sequence's layer output (Sun et al.), counted per sequence and averaged;
//! - key/value norms: `mean_{b,h} ‖k_{b,h,0}‖` against `mean_{b,h,t≥1} ‖k_{b,h,t}‖`.

use std::collections::BTreeMap;

/// A dense row-major array with its shape.
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Array {
    pub fn new(shape: Vec<usize>, data: Vec<f32>) -> Self {
        assert_eq!(
            shape.iter().product::<usize>(),
            data.len(),
            "shape {shape:?}"
        );
        Self { shape, data }
    }
}

/// Importance α[b][h][k] of every key for one layer's attention (B, H, T, T).
pub fn importance(attn: &Array) -> Vec<Vec<Vec<f64>>> {
    let [b, h, t, t2] = attn.shape[..] else {
        panic!("attention must be (B, H, T, T), got {:?}", attn.shape)
    };
    assert_eq!(t, t2);
    let mut out = vec![vec![vec![0.0; t]; h]; b];
    for (bi, seq) in out.iter_mut().enumerate() {
        for (hi, head) in seq.iter_mut().enumerate() {
            let base = (bi * h + hi) * t * t;
            for (k, alpha) in head.iter_mut().enumerate() {
                let s: f64 = (k..t).map(|q| attn.data[base + q * t + k] as f64).sum();
                *alpha = s / (t - k) as f64;
            }
        }
    }
    out
}

/// `Sink_k^ε` in percent for k = 0..k_max (0-based), over all layers, sequences and heads.
pub fn sink_rates(per_layer_importance: &[Vec<Vec<Vec<f64>>>], eps: f64, k_max: usize) -> Vec<f64> {
    let mut hits = vec![0usize; k_max];
    let mut total = 0usize;
    for layer in per_layer_importance {
        for seq in layer {
            for head in seq {
                total += 1;
                for (k, hit) in hits.iter_mut().enumerate() {
                    if head[k] > eps {
                        *hit += 1;
                    }
                }
            }
        }
    }
    hits.iter()
        .map(|&c| 100.0 * c as f64 / total.max(1) as f64)
        .collect()
}

/// Mean importance of the first token per head: `[h] = mean_b α[b][h][0]`.
pub fn importance_first(imp: &[Vec<Vec<f64>>]) -> Vec<f64> {
    let b = imp.len();
    let h = imp[0].len();
    (0..h)
        .map(|hi| imp.iter().map(|seq| seq[hi][0]).sum::<f64>() / b as f64)
        .collect()
}

/// Mean row entropy (nats) of attention (B, H, T, T).
pub fn entropy(attn: &Array) -> f64 {
    let t = *attn.shape.last().expect("rank ≥ 1");
    let rows = attn.data.len() / t;
    let mut total = 0.0;
    for r in attn.data.chunks_exact(t) {
        for &a in r {
            if a > 0.0 {
                total -= a as f64 * (a as f64).ln();
            }
        }
    }
    total / rows as f64
}

fn l2(xs: &[f32]) -> f64 {
    xs.iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt()
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.partial_cmp(b).expect("finite"));
    let n = xs.len();
    if n % 2 == 1 {
        xs[n / 2]
    } else {
        0.5 * (xs[n / 2 - 1] + xs[n / 2])
    }
}

/// Statistics of one layer's residual stream (B, T, D).
#[derive(Debug, Clone, PartialEq)]
pub struct HiddenStats {
    pub norm_first: f64,
    pub norm_rest: f64,
    pub norm_ratio: f64,
    pub top3: [f64; 3],
    pub median_abs: f64,
    pub massive_count: f64,
}

pub fn hidden_stats(hidden: &Array) -> HiddenStats {
    let [b, t, d] = hidden.shape[..] else {
        panic!("hidden states must be (B, T, D), got {:?}", hidden.shape)
    };
    let (mut first, mut rest) = (0.0, 0.0);
    let mut top3 = [0.0; 3];
    let mut med = 0.0;
    let mut massive = 0.0;
    for seq in hidden.data.chunks_exact(t * d) {
        first += l2(&seq[..d]);
        for tok in seq[d..].chunks_exact(d) {
            rest += l2(tok);
        }
        let mut abs: Vec<f64> = seq.iter().map(|&x| (x as f64).abs()).collect();
        abs.sort_by(|a, b| b.partial_cmp(a).expect("finite"));
        for (slot, v) in top3.iter_mut().zip(&abs) {
            *slot += v;
        }
        let m = median(abs.clone());
        med += m;
        massive += abs
            .iter()
            .filter(|&&x| x > 100.0 && x >= 1000.0 * m)
            .count() as f64;
    }
    let norm_first = first / b as f64;
    let norm_rest = if t > 1 {
        rest / (b * (t - 1)) as f64
    } else {
        f64::NAN
    };
    HiddenStats {
        norm_first,
        norm_rest,
        norm_ratio: norm_first / norm_rest,
        top3: top3.map(|v| v / b as f64),
        median_abs: med / b as f64,
        massive_count: massive / b as f64,
    }
}

/// `(mean_{b,h} ‖x_{b,h,0}‖, mean_{b,h,t≥1} ‖x_{b,h,t}‖)` for keys or values (B, H, T, d_h).
pub fn first_vs_rest_norms(x: &Array) -> (f64, f64) {
    let [b, h, t, dh] = x.shape[..] else {
        panic!("keys/values must be (B, H, T, d_h), got {:?}", x.shape)
    };
    let (mut first, mut rest) = (0.0, 0.0);
    for head in x.data.chunks_exact(t * dh) {
        first += l2(&head[..dh]);
        for tok in head[dh..].chunks_exact(dh) {
            rest += l2(tok);
        }
    }
    (
        first / (b * h) as f64,
        rest / (b * h * (t - 1)).max(1) as f64,
    )
}

/// Host copies of what the probe path recorded for one layer.
pub struct LayerArrays {
    pub attn: Array,
    pub keys: Array,
    pub values: Array,
    pub hidden: Array,
}

/// All sink metrics of one probe pass.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkReport {
    /// ε → Sink_k^ε (percent) for k = 1..=k_max.
    pub sink_rate: BTreeMap<String, Vec<f64>>,
    /// [layer][head] mean importance of token 1.
    pub importance_first: Vec<Vec<f64>>,
    pub entropy: Vec<f64>,
    pub hidden: Vec<HiddenStats>,
    /// [layer] (first, rest)
    pub key_norms: Vec<(f64, f64)>,
    pub value_norms: Vec<(f64, f64)>,
}

/// Format an ε for metric names: 0.3 → "0.3".
pub fn eps_name(eps: f64) -> String {
    let s = format!("{eps}");
    if s.contains('.') { s } else { format!("{s}.0") }
}

impl SinkReport {
    pub fn compute(layers: &[LayerArrays], eps_grid: &[f64], k_max: usize) -> Self {
        let imps: Vec<_> = layers.iter().map(|l| importance(&l.attn)).collect();
        let sink_rate = eps_grid
            .iter()
            .map(|&e| (eps_name(e), sink_rates(&imps, e, k_max)))
            .collect();
        SinkReport {
            sink_rate,
            importance_first: imps.iter().map(|i| importance_first(i)).collect(),
            entropy: layers.iter().map(|l| entropy(&l.attn)).collect(),
            hidden: layers.iter().map(|l| hidden_stats(&l.hidden)).collect(),
            key_norms: layers
                .iter()
                .map(|l| first_vs_rest_norms(&l.keys))
                .collect(),
            value_norms: layers
                .iter()
                .map(|l| first_vs_rest_norms(&l.values))
                .collect(),
        }
    }

    /// Sink₁ at ε = 0.3 (the headline number), if 0.3 is in the grid.
    pub fn sink1(&self) -> Option<f64> {
        self.sink_rate.get("0.3").map(|v| v[0])
    }

    /// Scalars under sinklab's metric names (a documented API; zero-padded so they sort):
    /// `sink/rate_eps{ε}/pos{kk}`, `sink/importance_first/layer{ll}_head{hh}`,
    /// `attn/entropy/layer{ll}`, `act/norm_ratio/layer{ll}`, `act/norm_first/layer{ll}`,
    /// `act/norm_rest/layer{ll}`, `act/top{1,2,3}/layer{ll}`, `act/median_abs/layer{ll}`,
    /// `act/massive_count/layer{ll}`, `kv/key_norm_{first,rest}/layer{ll}`,
    /// `kv/value_norm_{first,rest}/layer{ll}`.
    pub fn scalars(&self) -> Vec<(String, f64)> {
        let mut out = Vec::new();
        for (e, rates) in &self.sink_rate {
            for (k, r) in rates.iter().enumerate() {
                out.push((format!("sink/rate_eps{e}/pos{:02}", k + 1), *r));
            }
        }
        for (l, heads) in self.importance_first.iter().enumerate() {
            for (h, v) in heads.iter().enumerate() {
                out.push((format!("sink/importance_first/layer{l:02}_head{h:02}"), *v));
            }
        }
        for (l, e) in self.entropy.iter().enumerate() {
            out.push((format!("attn/entropy/layer{l:02}"), *e));
        }
        for (l, s) in self.hidden.iter().enumerate() {
            out.push((format!("act/norm_ratio/layer{l:02}"), s.norm_ratio));
            out.push((format!("act/norm_first/layer{l:02}"), s.norm_first));
            out.push((format!("act/norm_rest/layer{l:02}"), s.norm_rest));
            for (i, v) in s.top3.iter().enumerate() {
                out.push((format!("act/top{}/layer{l:02}", i + 1), *v));
            }
            out.push((format!("act/median_abs/layer{l:02}"), s.median_abs));
            out.push((format!("act/massive_count/layer{l:02}"), s.massive_count));
        }
        for (l, (f, r)) in self.key_norms.iter().enumerate() {
            out.push((format!("kv/key_norm_first/layer{l:02}"), *f));
            out.push((format!("kv/key_norm_rest/layer{l:02}"), *r));
        }
        for (l, (f, r)) in self.value_norms.iter().enumerate() {
            out.push((format!("kv/value_norm_first/layer{l:02}"), *f));
            out.push((format!("kv/value_norm_rest/layer{l:02}"), *r));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two heads, T = 3, built by hand.
    fn tiny() -> Array {
        #[rustfmt::skip]
        let data = vec![
            // head 0: everything on token 1
            1.0, 0.0, 0.0,
            1.0, 0.0, 0.0,
            1.0, 0.0, 0.0,
            // head 1: attend to self
            1.0, 0.0, 0.0,
            0.0, 1.0, 0.0,
            0.0, 0.0, 1.0,
        ];
        Array::new(vec![1, 2, 3, 3], data)
    }

    #[test]
    fn importance_by_hand() {
        let imp = importance(&tiny());
        assert_eq!(imp[0][0], vec![1.0, 0.0, 0.0]);
        // head 1: key 0 seen by 3 queries, gets 1 of 3; key 1: 1 of 2; key 2: 1 of 1
        assert!((imp[0][1][0] - 1.0 / 3.0).abs() < 1e-12);
        assert!((imp[0][1][1] - 0.5).abs() < 1e-12);
        assert!((imp[0][1][2] - 1.0).abs() < 1e-12);
        let rates = sink_rates(std::slice::from_ref(&imp), 0.3, 3);
        assert_eq!(rates, vec![100.0, 50.0, 50.0]);
        // strict >: α = 0.5 at k=1 is not above 0.5
        let rates = sink_rates(&[imp], 0.5, 3);
        assert_eq!(rates, vec![50.0, 0.0, 50.0]);
    }

    #[test]
    fn entropy_of_one_hot_and_uniform_rows() {
        assert_eq!(entropy(&tiny()), 0.0);
        let u = Array::new(vec![1, 1, 1, 4], vec![0.25; 4]);
        assert!((entropy(&u) - 4f64.ln()).abs() < 1e-9);
    }

    #[test]
    fn hidden_stats_by_hand() {
        // B=1, T=3, D=2; token 0 is large.
        let h = Array::new(vec![1, 3, 2], vec![300.0, 400.0, 0.0, 1.0, 1.0, 0.0]);
        let s = hidden_stats(&h);
        assert!((s.norm_first - 500.0).abs() < 1e-9);
        assert!((s.norm_rest - 1.0).abs() < 1e-9);
        assert!((s.norm_ratio - 500.0).abs() < 1e-9);
        assert_eq!(s.top3, [400.0, 300.0, 1.0]);
        assert!((s.median_abs - 1.0).abs() < 1e-12);
        // 400 > 100 but 400 < 1000 × median (= 1000): not massive
        assert_eq!(s.massive_count, 0.0);
    }

    #[test]
    fn metric_names_are_stable() {
        let layers = vec![LayerArrays {
            attn: tiny(),
            keys: Array::new(vec![1, 2, 3, 1], vec![3.0, 1.0, 1.0, 4.0, 1.0, 1.0]),
            values: Array::new(vec![1, 2, 3, 1], vec![0.0; 6]),
            hidden: Array::new(vec![1, 3, 2], vec![1.0; 6]),
        }];
        let r = SinkReport::compute(&layers, &[0.3], 3);
        let names: Vec<String> = r.scalars().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names[0], "sink/rate_eps0.3/pos01");
        assert!(names.contains(&"sink/importance_first/layer00_head01".to_string()));
        assert!(names.contains(&"act/norm_ratio/layer00".to_string()));
        assert!(names.contains(&"kv/key_norm_first/layer00".to_string()));
        assert_eq!(r.key_norms[0], (3.5, 1.0));
        assert_eq!(r.sink1(), Some(100.0));
    }
}
