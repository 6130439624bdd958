//! Geometry of a probe pass: the q·k angle / norm decomposition of the first-token logit,
//! attention bars, massive channels and norms by position (definitions in the module docs of
//! [`crate::analysis`]).

use crate::metrics::Array;
use serde::Serialize;

/// q·k geometry of one head (see the module docs).
#[derive(Debug, Clone, Serialize)]
pub struct QkHead {
    pub cos_first: f64,
    pub cos_rest: f64,
    pub norm_first: f64,
    pub norm_rest: f64,
}

/// Row `i` of the (T, d_h) block starting at `base`.
fn row(x: &Array, base: usize, i: usize, dh: usize) -> &[f32] {
    &x.data[base + i * dh..base + (i + 1) * dh]
}

/// q·k geometry of every head of one layer from queries and keys (B, H, T, d_h).
pub fn qk_geometry(q: &Array, k: &Array) -> Vec<QkHead> {
    let [b, h, t, dh] = q.shape[..] else {
        panic!("queries must be (B, H, T, d_h)")
    };
    let norm = |x: &[f32]| x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt();
    let scale = (dh as f64).sqrt();
    (0..h)
        .map(|hi| {
            let (mut cf, mut nf, mut cr, mut nr, mut n1, mut n2) = (0.0, 0.0, 0.0, 0.0, 0, 0);
            for bi in 0..b {
                let base = (bi * h + hi) * t * dh;
                let kn: Vec<f64> = (0..t).map(|j| norm(row(k, base, j, dh))).collect();
                for ti in 1..t {
                    let qt = row(q, base, ti, dh);
                    let qn = norm(qt);
                    for (j, &k_norm) in kn.iter().enumerate().take(ti + 1) {
                        let dot: f64 = qt
                            .iter()
                            .zip(row(k, base, j, dh))
                            .map(|(&a, &c)| a as f64 * c as f64)
                            .sum();
                        let prod = qn * k_norm;
                        let cos = if prod > 0.0 { dot / prod } else { 0.0 };
                        if j == 0 {
                            (cf, nf, n1) = (cf + cos, nf + prod / scale, n1 + 1);
                        } else {
                            (cr, nr, n2) = (cr + cos, nr + prod / scale, n2 + 1);
                        }
                    }
                }
            }
            let (n1, n2) = (n1.max(1) as f64, n2.max(1) as f64);
            QkHead {
                cos_first: cf / n1,
                cos_rest: cr / n2,
                norm_first: nf / n1,
                norm_rest: nr / n2,
            }
        })
        .collect()
}

/// One detected attention bar.
#[derive(Debug, Clone, Serialize)]
pub struct Bar {
    pub sequence: usize,
    pub layer: usize,
    pub head: usize,
    pub position: usize,
    pub token: u32,
    pub mean: f64,
    pub std: f64,
}

/// Mean and standard deviation of the attention key k receives from queries t ∈ (k, T), for
/// every key of one (sequence, head) block `a` (T × T); None where fewer than `min_q` queries.
pub fn received_stats(a: &[f32], t: usize, min_q: usize) -> Vec<Option<(f64, f64)>> {
    (0..t)
        .map(|k| {
            let n = t - k - 1;
            if n < min_q.max(1) {
                return None;
            }
            let xs = (k + 1..t).map(|q| a[q * t + k] as f64);
            let mean = xs.clone().sum::<f64>() / n as f64;
            let var = xs.map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
            Some((mean, var.sqrt()))
        })
        .collect()
}

/// Attention bars of one layer's attention (B, H, T, T) (see the module docs).
pub fn find_bars(
    attn: &Array,
    layer: usize,
    tokens: &[u32],
    mean_min: f64,
    std_max: f64,
    min_q: usize,
) -> Vec<Bar> {
    let [b, h, t, _] = attn.shape[..] else {
        panic!("attention must be (B, H, T, T)")
    };
    let mut out = Vec::new();
    for bi in 0..b {
        for hi in 0..h {
            let block = &attn.data[(bi * h + hi) * t * t..(bi * h + hi + 1) * t * t];
            for (k, s) in received_stats(block, t, min_q).into_iter().enumerate() {
                if let Some((mean, std)) = s
                    && k >= 1
                    && mean > mean_min
                    && std < std_max
                {
                    out.push(Bar {
                        sequence: bi,
                        layer,
                        head: hi,
                        position: k,
                        token: tokens[bi * t + k],
                        mean,
                        std,
                    });
                }
            }
        }
    }
    out
}

/// Per-position mean hidden-state norm `mean_b ‖h_{b,t}‖` of (B, T, D).
pub fn norms_by_position(hidden: &Array) -> Vec<f64> {
    let [b, t, d] = hidden.shape[..] else {
        panic!("hidden must be (B, T, D)")
    };
    (0..t)
        .map(|ti| {
            (0..b)
                .map(|bi| {
                    let x = &hidden.data[(bi * t + ti) * d..(bi * t + ti + 1) * d];
                    x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>().sqrt()
                })
                .sum::<f64>()
                / b as f64
        })
        .collect()
}

/// Massive-activation channel counts and the channels with the largest max |h| (see the
/// module docs): `(massive: [(channel, count)], top: [(channel, max |h|, share at token 1)])`.
#[allow(clippy::type_complexity)]
pub fn channel_stats(hidden: &Array, top: usize) -> (Vec<(usize, usize)>, Vec<(usize, f64, f64)>) {
    let [b, t, d] = hidden.shape[..] else {
        panic!("hidden must be (B, T, D)")
    };
    let mut massive = vec![0usize; d];
    let mut max_abs = vec![0f64; d];
    let mut at_first = vec![0usize; d];
    for seq in hidden.data.chunks_exact(t * d) {
        let mut abs: Vec<f64> = seq.iter().map(|&x| (x as f64).abs()).collect();
        let mut sorted = abs.clone();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let med = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            0.5 * (sorted[n / 2 - 1] + sorted[n / 2])
        };
        for c in 0..d {
            let (mut best, mut pos) = (0.0, 0);
            for ti in 0..t {
                let x = abs[ti * d + c];
                if x > 100.0 && x >= 1000.0 * med {
                    massive[c] += 1;
                }
                if x > best {
                    (best, pos) = (x, ti);
                }
            }
            max_abs[c] = max_abs[c].max(best);
            at_first[c] += usize::from(pos == 0);
        }
        abs.clear();
    }
    let mut m: Vec<(usize, usize)> = massive
        .iter()
        .enumerate()
        .filter(|(_, n)| **n > 0)
        .map(|(c, n)| (c, *n))
        .collect();
    m.sort_by_key(|b| std::cmp::Reverse(b.1));
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&a, &c| max_abs[c].total_cmp(&max_abs[a]));
    let tops = order
        .into_iter()
        .take(top)
        .map(|c| (c, max_abs[c], at_first[c] as f64 / b as f64))
        .collect();
    (m, tops)
}
