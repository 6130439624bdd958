//! Sink metrics as pure functions on plain arrays (docs/reference.md §4; Gu et al., ICLR 2025;
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
//! - key/value norms: `mean_{b,h} ‖k_{b,h,0}‖` against `mean_{b,h,t≥1} ‖k_{b,h,t}‖`;
//! - slots (docs/reference.md §1.2, §4): a layer's weights have slot columns (sink logit, KV/K bias,
//!   memory keys) and sink-token columns in front of the real tokens. [`split_attention`] turns
//!   them into real-token attention (B, H, T, T) and the mass each real query puts on the slots
//!   (B, H, T), through a [`Proxy`] for non-softmax normalisers; `Sink₁*` on the slot is
//!   `100 · mean_{l,b,h} 1[mean_t mass > ε]` (every query sees the slot);
//! - F-Attn: mean attention on the first real token, `mean_{b,h,t} A[t,0]`; M-Act: the largest
//!   per-layer mean top-1 |h|;
//! - outliers (Bondarenko et al. 2023, [`outliers`]): the kurtosis and ∞-norm of each
//!   sequence's block output and attention output (after W_O), averaged over sequences (the
//!   residual stream's ∞-norm is top-1 |h| above);
//! - secondary sinks (Wong et al. 2025, [`secondary`]): keys after the first with α_k > ε;
//! - the matrix entropy of each sequence's block output (Queipo-de-Llano et al. 2025,
//!   [`spectrum`]) beside Sink₁ per layer.

use crate::config::{FeatureMap, NormaliserConfig};
use crate::tags::{Group, HeadMetric, LayerMetric, Scalar, Tag};
use std::collections::BTreeMap;

pub mod eigen;
mod outliers;
mod secondary;
mod spectrum;

pub use outliers::{KURTOSIS_EPS, Outliers, kurtosis, outliers};
pub use secondary::{MIN_QUERY_SHARE, Secondary, eligible_keys, secondary_sinks};
pub use spectrum::{Entropy, matrix_entropy, representation_entropy};

pub use crate::config::{EPS_GRID, HEADLINE_EPS};

/// F-Attn of uniform causal attention over `t` keys: query i (1-based) gives 1/i to token 1,
/// so the mean over the queries is `H_t / t` (H_t the harmonic number): 0.0741 at t = 64. A
/// model's F-Attn means something only relative to this floor.
pub fn uniform_first_mass(t: usize) -> f64 {
    if t == 0 {
        return 0.0;
    }
    (1..=t).map(|i| 1.0 / i as f64).sum::<f64>() / t as f64
}

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

/// How a layer's attention rows become the weights the metrics see (docs/reference.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proxy {
    /// Rows already sum to 1 (softmax, normalised sigmoid / elu+1): used as they are.
    Weights,
    /// Rows sum to at most 1 and the rest is mass on an implicit zero key (softmax_n), or on
    /// nothing (softpick, clipped softmax: the output is a partial update `Σ_j A_ij v_j` with
    /// `Σ_j A_ij ≤ 1`, as if the rest sat on a zero value): used as they are, `1 − Σ` added to
    /// the slot mass.
    ImplicitSlot,
    /// Non-negative unnormalised weights (sigmoid, elu+1, linear elu+1 kernel):
    /// `w / (Σ w + 1e-8)`.
    NonNegative,
    /// Weights of either sign (linear identity / MLP kernels): `|w| / Σ |w|`.
    Signed,
}

impl Proxy {
    /// The proxy for a normaliser's weights.
    pub fn for_normaliser(n: &NormaliserConfig) -> Self {
        match n {
            NormaliserConfig::Softmax {}
            | NormaliserConfig::ScalableSoftmax { .. }
            | NormaliserConfig::SigmoidNormalised {}
            | NormaliserConfig::Elu1Normalised {} => Proxy::Weights,
            NormaliserConfig::SoftmaxN { .. }
            | NormaliserConfig::Softpick { .. }
            | NormaliserConfig::ClippedSoftmax { .. } => Proxy::ImplicitSlot,
            NormaliserConfig::Sigmoid { .. }
            | NormaliserConfig::Elu1 {}
            | NormaliserConfig::Relu {} => Proxy::NonNegative,
            NormaliserConfig::Linear { feature_map, .. } => match feature_map {
                FeatureMap::Elu1 => Proxy::NonNegative,
                FeatureMap::Identity | FeatureMap::Mlp => Proxy::Signed,
            },
        }
    }
}

/// Split a layer's weights `w` (B, H, S, C) — `slot_cols` slot columns, then S = N + T sequence
/// positions of which the first N are sink tokens — into the real queries' attention on real
/// keys (B, H, T, T) and their mass on the slots and sink tokens (B, H, T), after `proxy`.
pub fn split_attention(
    w: &Array,
    slot_cols: usize,
    sink_tokens: usize,
    proxy: Proxy,
) -> (Array, Array) {
    let [b, h, s, c] = w.shape[..] else {
        panic!("attention must be (B, H, S, C), got {:?}", w.shape)
    };
    assert_eq!(c, slot_cols + s, "columns = slot columns + sequence");
    let n = sink_tokens;
    let t = s - n;
    let front = slot_cols + n;
    let mut attn = Vec::with_capacity(b * h * t * t);
    let mut mass = Vec::with_capacity(b * h * t);
    for bh in 0..b * h {
        for i in 0..t {
            let row = &w.data[(bh * s + n + i) * c..(bh * s + n + i + 1) * c];
            let (scale, implicit) = match proxy {
                Proxy::Weights => (1.0, 0.0),
                Proxy::ImplicitSlot => (1.0, 1.0 - row.iter().map(|&x| x as f64).sum::<f64>()),
                Proxy::NonNegative => (
                    1.0 / (row.iter().map(|&x| x as f64).sum::<f64>() + 1e-8),
                    0.0,
                ),
                Proxy::Signed => {
                    let z: f64 = row.iter().map(|&x| (x as f64).abs()).sum();
                    (if z > 0.0 { 1.0 / z } else { 0.0 }, 0.0)
                }
            };
            let val = |x: f32| -> f64 {
                let x = x as f64;
                if proxy == Proxy::Signed {
                    x.abs() * scale
                } else {
                    x * scale
                }
            };
            attn.extend(row[front..].iter().map(|&x| val(x) as f32));
            mass.push((row[..front].iter().map(|&x| val(x)).sum::<f64>() + implicit) as f32);
        }
    }
    (
        Array::new(vec![b, h, t, t], attn),
        Array::new(vec![b, h, t], mass),
    )
}

/// Mean slot mass per (b, h): `α_slot = mean_t mass[b,h,t]`.
pub fn slot_importance(mass: &Array) -> Vec<f64> {
    let t = *mass.shape.last().expect("rank 3");
    mass.data
        .chunks_exact(t)
        .map(|r| r.iter().map(|&x| x as f64).sum::<f64>() / t as f64)
        .collect()
}

/// F-Attn of one layer: mean attention on the first real token, `mean_{b,h,t} A[t,0]`.
pub fn first_token_mass(attn: &Array) -> f64 {
    let t = *attn.shape.last().expect("rank 4");
    let rows = attn.data.len() / t;
    attn.data.chunks_exact(t).map(|r| r[0] as f64).sum::<f64>() / rows as f64
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

/// `[layer][head]` Sink₁^ε in percent: the share of sequences in which the head's first-token
/// importance α₁ exceeds ε. Averaged over layers and heads it is Sink₁^ε of [`sink_rates`].
pub fn sink1_by_head(per_layer_importance: &[Vec<Vec<Vec<f64>>>], eps: f64) -> Vec<Vec<f64>> {
    per_layer_importance
        .iter()
        .map(|layer| {
            let h = layer.first().map_or(0, Vec::len);
            (0..h)
                .map(|hi| {
                    let hits = layer.iter().filter(|seq| seq[hi][0] > eps).count();
                    100.0 * hits as f64 / layer.len().max(1) as f64
                })
                .collect()
        })
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

/// The median: the middle value, or the mean of the two middle values of an even count
/// (NumPy's `median`). Panics on an empty list or a NaN.
pub fn median(mut xs: Vec<f64>) -> f64 {
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

/// Value-state drain per head (Guo et al. 2024): `mean_b ‖v_{b,h,1}‖ / mean_{b,t≥2} ‖v_{b,h,t}‖`
/// for values (B, H, T, d_h), as `[head]`. A sink head drives the value of the token it parks
/// on towards 0, so the ratio falls well below 1 as the sink forms.
pub fn value_drain(x: &Array) -> Vec<f64> {
    let [b, h, t, dh] = x.shape[..] else {
        panic!("values must be (B, H, T, d_h), got {:?}", x.shape)
    };
    let (mut first, mut rest) = (vec![0.0; h], vec![0.0; h]);
    for (i, seq) in x.data.chunks_exact(t * dh).enumerate() {
        first[i % h] += l2(&seq[..dh]);
        rest[i % h] += seq[dh..].chunks_exact(dh).map(l2).sum::<f64>();
    }
    first
        .iter()
        .zip(&rest)
        .map(|(f, r)| (f / b as f64) / (r / (b * (t - 1)).max(1) as f64))
        .collect()
}

/// Attention to the first token split by query group (Guo et al.'s dormant vs active heads):
/// `[head][g]` = mean of `α_{t,1}` over queries t ≥ 2 in group g, for attention (B, H, T, T)
/// and `groups` (B, T) row-major with values < `n_groups`; NaN where a group is empty. On
/// Bigram-Backcopy group 0 is the non-trigger queries (where a copying head is dormant) and
/// group 1 + i the queries whose input is trigger i (where the head that copies for it is active).
pub fn first_by_query(attn: &Array, groups: &[usize], n_groups: usize) -> Vec<Vec<f64>> {
    let [b, h, t, _] = attn.shape[..] else {
        panic!("attention must be (B, H, T, T), got {:?}", attn.shape)
    };
    assert_eq!(groups.len(), b * t, "query groups must be (B, T)");
    let mut sums = vec![vec![0.0f64; n_groups]; h];
    let mut counts = vec![vec![0usize; n_groups]; h];
    for (i, rows) in attn.data.chunks_exact(t * t).enumerate() {
        let (bi, hi) = (i / h, i % h);
        for q in 1..t {
            let g = groups[bi * t + q];
            sums[hi][g] += rows[q * t] as f64;
            counts[hi][g] += 1;
        }
    }
    sums.iter()
        .zip(&counts)
        .map(|(s, c)| {
            s.iter()
                .zip(c)
                .map(|(s, &c)| if c == 0 { f64::NAN } else { s / c as f64 })
                .collect()
        })
        .collect()
}

/// Host copies of what the probe path recorded for one layer.
pub struct LayerArrays {
    /// Real queries on real keys (B, H, T, T), after the proxy.
    pub attn: Array,
    /// Mass on slots and sink tokens (B, H, T), if the model has any.
    pub slot_mass: Option<Array>,
    /// Queries (B, H, T, d_h) after positional rotation, when recorded.
    pub queries: Option<Array>,
    pub keys: Array,
    pub values: Array,
    pub hidden: Array,
    /// The attention sub-block's output after W_O, (B, T, d) (`attn_out`).
    pub attn_out: Array,
    /// Mean output-gate value, if the layer has a gate.
    pub gate_mean: Option<f64>,
}

/// All sink metrics of one probe pass.
#[derive(Debug, Clone, PartialEq)]
pub struct SinkReport {
    /// ε → Sink_k^ε (percent) for k = 1..=k_max.
    pub sink_rate: BTreeMap<String, Vec<f64>>,
    /// [layer][head] mean importance of token 1.
    pub importance_first: Vec<Vec<f64>>,
    /// ε → [layer][head] Sink₁^ε (percent of sequences where the head's α₁ > ε).
    pub sink1_by_head: BTreeMap<String, Vec<Vec<f64>>>,
    pub entropy: Vec<f64>,
    pub hidden: Vec<HiddenStats>,
    /// [layer] (first, rest)
    pub key_norms: Vec<(f64, f64)>,
    pub value_norms: Vec<(f64, f64)>,
    /// ε → Sink₁* on the slot (percent), when the model has slots or sink tokens.
    pub slot_rate: BTreeMap<String, f64>,
    /// [layer] mean mass on slots and sink tokens.
    pub slot_mass: Vec<Option<f64>>,
    /// [layer] F-Attn.
    pub first_mass: Vec<f64>,
    /// [layer] mean output gate.
    pub gate_mean: Vec<Option<f64>>,
    /// [layer][head] value-state drain ‖v₁‖ / mean ‖v_{t≥2}‖.
    pub value_drain: Vec<Vec<f64>>,
    /// [layer][head][group] mean α to token 1 by query group ([`first_by_query`]), when the
    /// probe batch has query groups (a synthetic task: 0 = no trigger, 1 + i = trigger i).
    pub first_by_query: Option<Vec<Vec<Vec<f64>>>>,
    /// Probe length T (the keys per query row), for F-Attn's uniform floor.
    pub probe_len: usize,
    /// [layer] kurtosis and ∞-norm of the block output (Bondarenko et al.).
    pub outliers: Vec<Outliers>,
    /// [layer] the same of the attention output after W_O.
    pub attn_out: Vec<Outliers>,
    /// [layer] secondary sinks at the headline ε.
    pub secondary: Vec<Secondary>,
    /// [layer] matrix entropy of the block output's token representations.
    pub repr_entropy: Vec<Entropy>,
}

/// The mean of some numbers; 0 for none.
fn mean(xs: impl Iterator<Item = f64>) -> f64 {
    let (s, n) = xs.fold((0.0, 0usize), |(s, n), x| (s + x, n + 1));
    if n == 0 { 0.0 } else { s / n as f64 }
}

/// Format an ε for metric names: 0.3 → "0.3".
pub fn eps_name(eps: f64) -> String {
    let s = format!("{eps}");
    if s.contains('.') { s } else { format!("{s}.0") }
}

/// What the sink report keeps of one layer: a few numbers per (sequence, head), computed as
/// the layer's arrays arrive so that no probe holds every layer's attention at once.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerSummary {
    /// α[b][h][k] ([`importance`]).
    pub importance: Vec<Vec<Vec<f64>>>,
    /// Mean slot mass per (b, h), when the layer has slots ([`slot_importance`]).
    pub slot_importance: Option<Vec<f64>>,
    /// Mean mass on slots and sink tokens, when the layer has slots.
    pub slot_mass: Option<f64>,
    pub first_mass: f64,
    pub entropy: f64,
    pub hidden: HiddenStats,
    pub key_norms: (f64, f64),
    pub value_norms: (f64, f64),
    pub value_drain: Vec<f64>,
    pub first_by_query: Option<Vec<Vec<f64>>>,
    pub gate_mean: Option<f64>,
    /// Kurtosis and ∞-norm of the block output and of the attention output.
    pub outliers: Outliers,
    pub attn_out: Outliers,
    /// Secondary sinks at the headline ε.
    pub secondary: Secondary,
    pub repr_entropy: Entropy,
}

impl LayerSummary {
    /// The summary of one layer's probe arrays, with the queries in groups if given ((B, T)
    /// group ids, number of groups).
    pub fn of(l: &LayerArrays, groups: Option<(&[usize], usize)>) -> Self {
        let importance = importance(&l.attn);
        LayerSummary {
            secondary: secondary_sinks(&importance, HEADLINE_EPS),
            importance,
            slot_importance: l.slot_mass.as_ref().map(slot_importance),
            slot_mass: l
                .slot_mass
                .as_ref()
                .map(|m| m.data.iter().map(|&x| x as f64).sum::<f64>() / m.data.len() as f64),
            first_mass: first_token_mass(&l.attn),
            entropy: entropy(&l.attn),
            hidden: hidden_stats(&l.hidden),
            key_norms: first_vs_rest_norms(&l.keys),
            value_norms: first_vs_rest_norms(&l.values),
            value_drain: value_drain(&l.values),
            first_by_query: groups.map(|(g, n)| first_by_query(&l.attn, g, n)),
            gate_mean: l.gate_mean,
            outliers: outliers(&l.hidden),
            attn_out: outliers(&l.attn_out),
            repr_entropy: representation_entropy(&l.hidden),
        }
    }
}

impl SinkReport {
    pub fn compute(layers: &[LayerArrays], eps_grid: &[f64], k_max: usize) -> Self {
        Self::compute_split(layers, eps_grid, k_max, None)
    }

    /// [`SinkReport::compute`] with the queries in groups ((B, T) group ids, number of groups;
    /// the synthetic task's triggers): adds [`SinkReport::first_by_query`].
    pub fn compute_split(
        layers: &[LayerArrays],
        eps_grid: &[f64],
        k_max: usize,
        groups: Option<(&[usize], usize)>,
    ) -> Self {
        let summaries: Vec<LayerSummary> =
            layers.iter().map(|l| LayerSummary::of(l, groups)).collect();
        Self::from_summaries(&summaries, eps_grid, k_max)
    }

    /// The report from every layer's summary (the streaming form of [`SinkReport::compute`]).
    pub fn from_summaries(layers: &[LayerSummary], eps_grid: &[f64], k_max: usize) -> Self {
        let imps: Vec<Vec<Vec<Vec<f64>>>> = layers.iter().map(|l| l.importance.clone()).collect();
        let sink_rate = eps_grid
            .iter()
            .map(|&e| (eps_name(e), sink_rates(&imps, e, k_max)))
            .collect();
        let slot_imps: Vec<&Vec<f64>> = layers
            .iter()
            .filter_map(|l| l.slot_importance.as_ref())
            .collect();
        let slot_rate = if slot_imps.is_empty() {
            BTreeMap::new()
        } else {
            let total: usize = slot_imps.iter().map(|v| v.len()).sum();
            eps_grid
                .iter()
                .map(|&e| {
                    let hits = slot_imps
                        .iter()
                        .copied()
                        .flatten()
                        .filter(|&&a| a > e)
                        .count();
                    (eps_name(e), 100.0 * hits as f64 / total as f64)
                })
                .collect()
        };
        let sink1_by_head = eps_grid
            .iter()
            .map(|&e| (eps_name(e), sink1_by_head(&imps, e)))
            .collect();
        SinkReport {
            sink1_by_head,
            slot_rate,
            slot_mass: layers.iter().map(|l| l.slot_mass).collect(),
            first_mass: layers.iter().map(|l| l.first_mass).collect(),
            gate_mean: layers.iter().map(|l| l.gate_mean).collect(),
            sink_rate,
            importance_first: imps.iter().map(|i| importance_first(i)).collect(),
            entropy: layers.iter().map(|l| l.entropy).collect(),
            hidden: layers.iter().map(|l| l.hidden.clone()).collect(),
            key_norms: layers.iter().map(|l| l.key_norms).collect(),
            value_norms: layers.iter().map(|l| l.value_norms).collect(),
            value_drain: layers.iter().map(|l| l.value_drain.clone()).collect(),
            first_by_query: layers
                .iter()
                .map(|l| l.first_by_query.clone())
                .collect::<Option<Vec<_>>>(),
            probe_len: imps
                .first()
                .and_then(|l| l.first())
                .and_then(|s| s.first())
                .map_or(0, Vec::len),
            outliers: layers.iter().map(|l| l.outliers).collect(),
            attn_out: layers.iter().map(|l| l.attn_out).collect(),
            secondary: layers.iter().map(|l| l.secondary.clone()).collect(),
            repr_entropy: layers.iter().map(|l| l.repr_entropy).collect(),
        }
    }

    /// Sink₁ at the headline ε ([`HEADLINE_EPS`]), if it is in the grid.
    pub fn sink1(&self) -> Option<f64> {
        self.sink_rate.get(&eps_name(HEADLINE_EPS)).map(|v| v[0])
    }

    /// Sink₁* on the slot at the headline ε, if the model has a slot and ε is in the grid.
    pub fn slot_sink1(&self) -> Option<f64> {
        self.slot_rate.get(&eps_name(HEADLINE_EPS)).copied()
    }

    /// F-Attn: mean first-token attention over layers.
    pub fn f_attn(&self) -> f64 {
        self.first_mass.iter().sum::<f64>() / self.first_mass.len().max(1) as f64
    }

    /// M-Act: the largest per-layer mean top-1 |h| (Bondarenko et al.'s "max ∞-norm" of the
    /// residual stream).
    pub fn m_act(&self) -> f64 {
        self.hidden.iter().map(|h| h.top3[0]).fold(0.0, f64::max)
    }

    /// The block output's kurtosis averaged over layers (Bondarenko et al.'s "avg. kurtosis",
    /// over the residual stream).
    pub fn kurtosis(&self) -> f64 {
        mean(self.outliers.iter().map(|o| o.kurtosis))
    }

    /// Secondary sinks per (layer, sequence, head), and the share (%) of (layer, sequence,
    /// head) with at least one, at the headline ε.
    pub fn secondary_sinks(&self) -> (f64, f64) {
        (
            mean(self.secondary.iter().map(|s| s.count)),
            mean(self.secondary.iter().map(|s| s.heads)),
        )
    }

    /// [layer] Sink₁ at the headline ε (%): the layer's heads' mean of [`sink1_by_head`].
    pub fn sink1_by_layer(&self) -> Option<Vec<f64>> {
        self.sink1_by_head
            .get(&eps_name(HEADLINE_EPS))
            .map(|layers| layers.iter().map(|h| mean(h.iter().copied())).collect())
    }

    /// Every metric of the report under its [`Tag`] (a documented API: `crate::tags` lists the
    /// names): Sink_k at every ε, α₁ and the value drain per head, the per-layer activation,
    /// key/value, entropy, slot, gate, outlier and secondary-sink statistics, F-Attn (and its
    /// uniform floor), M-Act, the mean kurtosis, and Sink₁ per layer at the headline ε.
    pub fn scalars(&self) -> Vec<(Tag, f64)> {
        use LayerMetric as M;
        let mut out = Vec::new();
        for (e, rates) in &self.sink_rate {
            for (k, r) in rates.iter().enumerate() {
                out.push((Tag::sink_rate(e, k + 1), *r));
            }
        }
        for (l, heads) in self.importance_first.iter().enumerate() {
            for (h, v) in heads.iter().enumerate() {
                out.push((Tag::Head(HeadMetric::ImportanceFirst, l, h), *v));
            }
        }
        for (l, e) in self.entropy.iter().enumerate() {
            out.push((Tag::Layer(M::AttnEntropy, l), *e));
        }
        for (l, s) in self.hidden.iter().enumerate() {
            out.push((Tag::Layer(M::NormRatio, l), s.norm_ratio));
            out.push((Tag::Layer(M::NormFirst, l), s.norm_first));
            out.push((Tag::Layer(M::NormRest, l), s.norm_rest));
            for (m, v) in M::TOP.iter().zip(&s.top3) {
                out.push((Tag::Layer(*m, l), *v));
            }
            out.push((Tag::Layer(M::MedianAbs, l), s.median_abs));
            out.push((Tag::Layer(M::MassiveCount, l), s.massive_count));
        }
        for (l, (f, r)) in self.key_norms.iter().enumerate() {
            out.push((Tag::Layer(M::KeyNormFirst, l), *f));
            out.push((Tag::Layer(M::KeyNormRest, l), *r));
        }
        for (l, (f, r)) in self.value_norms.iter().enumerate() {
            out.push((Tag::Layer(M::ValueNormFirst, l), *f));
            out.push((Tag::Layer(M::ValueNormRest, l), *r));
        }
        for (e, r) in &self.slot_rate {
            out.push((Tag::slot_rate(e), *r));
        }
        for (l, m) in self.slot_mass.iter().enumerate() {
            if let Some(m) = m {
                out.push((Tag::Layer(M::SlotMass, l), *m));
            }
        }
        for (l, m) in self.first_mass.iter().enumerate() {
            out.push((Tag::Layer(M::FirstTokenMass, l), *m));
        }
        for (l, heads) in self.value_drain.iter().enumerate() {
            for (h, v) in heads.iter().enumerate() {
                out.push((Tag::Head(HeadMetric::ValueDrain, l, h), *v));
            }
        }
        for (l, heads) in self.first_by_query.iter().flatten().enumerate() {
            for (h, by_group) in heads.iter().enumerate() {
                for (g, v) in by_group.iter().enumerate() {
                    let group = match g {
                        0 => Group::Dormant,
                        _ => Group::Trigger(g - 1),
                    };
                    out.push((Tag::Head(HeadMetric::BbAttnFirst(group), l, h), *v));
                }
            }
        }
        out.push((Scalar::FAttn.into(), self.f_attn()));
        out.push((
            Scalar::FAttnUniform.into(),
            uniform_first_mass(self.probe_len),
        ));
        out.push((Scalar::MAct.into(), self.m_act()));
        for (l, g) in self.gate_mean.iter().enumerate() {
            if let Some(g) = g {
                out.push((Tag::Layer(M::GateMean, l), *g));
            }
        }
        for (l, (h, a)) in self.outliers.iter().zip(&self.attn_out).enumerate() {
            out.push((Tag::Layer(M::Kurtosis, l), h.kurtosis));
            out.push((Tag::Layer(M::AttnOutKurtosis, l), a.kurtosis));
            out.push((Tag::Layer(M::AttnOutMaxAbs, l), a.max_abs));
        }
        out.push((Scalar::Kurtosis.into(), self.kurtosis()));
        for (l, s) in self.secondary.iter().enumerate() {
            out.push((Tag::Layer(M::SecondaryHeads, l), s.heads));
            out.push((Tag::Layer(M::SecondaryCount, l), s.count));
        }
        let (count, heads) = self.secondary_sinks();
        out.push((Scalar::SecondaryCount.into(), count));
        out.push((Scalar::SecondaryHeads.into(), heads));
        for (l, e) in self.repr_entropy.iter().enumerate() {
            out.push((Tag::Layer(M::ReprEntropy, l), e.nats));
            out.push((Tag::Layer(M::ReprEntropyNorm, l), e.normalised));
        }
        let eps = eps_name(HEADLINE_EPS);
        for (layer, r) in self.sink1_by_layer().iter().flatten().enumerate() {
            out.push((
                Tag::LayerRate {
                    eps: eps.clone(),
                    layer,
                },
                *r,
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests;
