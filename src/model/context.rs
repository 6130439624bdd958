//! What a forward pass shares across layers: the fixed position tables (RoPE, sinusoids,
//! ALiBi slopes, T5 buckets), the per-forward [`Ctx`] (mask, position terms and shaping
//! matrices for this length, in sequence or cache coordinates) and the per-layer key/value
//! cache of decoding. Conventions where sources differ (docs/reference.md §1.3): RoPE rotates
//! halves (NeoX/HF) of the first `rope_dims(d_h, fraction)` dimensions; ALiBi uses
//! `−m_h |i − j|`; T5 buckets are bidirectional, one table shared by all layers.

use super::layers::Compute;
use crate::config::{ModelConfig, PositionsConfig, RopePairing, ShapingConfig, rope_dims};
use burn::tensor::module::embedding;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

/// Fixed tables that depend only on the configuration (not trained, not saved), built for
/// `len` real positions (`model.ctx`, or more for decoding past the training context).
#[derive(Debug, Clone)]
pub struct PositionTables {
    /// Real positions covered.
    pub len: usize,
    /// RoPE cos and sin for positions 0..N+len, each (N+len, r/2), and r.
    pub rope: Option<(Tensor<2>, Tensor<2>, usize)>,
    /// Which dimensions RoPE pairs.
    pub rope_pairing: RopePairing,
    /// Sinusoidal absolute positions (len, d).
    pub sinusoidal: Option<Tensor<2>>,
    /// ALiBi slopes m_h.
    pub alibi: Option<Vec<f64>>,
}

/// ALiBi slopes for `h` heads (Press et al.): `2^(−8k/n)` for the largest power of two n ≤ h,
/// then every other slope of 2n for the remaining heads.
pub fn alibi_slopes(h: usize) -> Vec<f64> {
    let pow2 = |n: usize| -> Vec<f64> {
        let start = 2f64.powf(-8.0 / n as f64);
        (1..=n).map(|k| start.powi(k as i32)).collect()
    };
    let n = 1usize << (usize::BITS - 1 - h.leading_zeros());
    let mut s = pow2(n);
    if n < h {
        s.extend(pow2(2 * n).into_iter().step_by(2).take(h - n));
    }
    s
}

/// T5 relative-position bucket (bidirectional) of key position j for query position i.
pub fn t5_bucket(i: usize, j: usize, buckets: usize, max_distance: usize) -> usize {
    let rel = j as i64 - i as i64; // memory − query
    let nb = buckets / 2;
    let mut ret = if rel > 0 { nb } else { 0 };
    let n = rel.unsigned_abs() as usize;
    let max_exact = nb / 2;
    if n < max_exact {
        ret += n;
    } else {
        let v = max_exact as f64
            + ((n as f64 / max_exact as f64).ln() / (max_distance as f64 / max_exact as f64).ln()
                * (nb - max_exact) as f64)
                .floor();
        ret += (v as usize).min(nb - 1);
    }
    ret
}

impl PositionTables {
    pub fn new(cfg: &ModelConfig, len: usize, device: &Device) -> Self {
        // Constants, kept off autodiff: `Module::valid` strips autodiff from the parameters but
        // clones skipped fields as they are, so tables on an autodiff device would drag every
        // inference forward (eval, analyses, decoding) back under autodiff; a training forward
        // treats them as constants either way.
        let device = &device.clone().inner();
        let real = len;
        let len = cfg.sink_tokens + real;
        let rope = match cfg.positions {
            PositionsConfig::Rope { base, fraction, .. } => {
                let r = rope_dims(cfg.d_head(), fraction);
                let half = r / 2;
                let mut cos = Vec::with_capacity(len * half);
                let mut sin = Vec::with_capacity(len * half);
                for p in 0..len {
                    for i in 0..half {
                        let a = p as f64 * base.powf(-(2.0 * i as f64) / r as f64);
                        cos.push(a.cos() as f32);
                        sin.push(a.sin() as f32);
                    }
                }
                Some((
                    Tensor::from_data(TensorData::new(cos, [len, half]), device),
                    Tensor::from_data(TensorData::new(sin, [len, half]), device),
                    r,
                ))
            }
            _ => None,
        };
        let sinusoidal = matches!(cfg.positions, PositionsConfig::Sinusoidal {}).then(|| {
            let d = cfg.d_model;
            let mut pe = vec![0f32; real * d];
            for p in 0..real {
                for i in 0..d / 2 {
                    let a = p as f64 / 10000f64.powf(2.0 * i as f64 / d as f64);
                    pe[p * d + 2 * i] = a.sin() as f32;
                    pe[p * d + 2 * i + 1] = a.cos() as f32;
                }
            }
            Tensor::from_data(TensorData::new(pe, [real, d]), device)
        });
        let alibi =
            matches!(cfg.positions, PositionsConfig::Alibi {}).then(|| alibi_slopes(cfg.n_heads));
        let rope_pairing = match cfg.positions {
            PositionsConfig::Rope { pairing, .. } => pairing,
            _ => RopePairing::Halves,
        };
        Self {
            len: real,
            rope,
            rope_pairing,
            sinusoidal,
            alibi,
        }
    }
}

/// Per-forward context shared by all layers: masks and position terms for this length.
///
/// The keys are S = N sink tokens + T real tokens; the queries are the rows `q_start..S` of
/// that sequence (all of them in a full forward, the newly appended tokens when decoding with a
/// [`LayerKv`] cache). Positions are sequence (cache-local) indices.
#[derive(Clone)]
pub struct Ctx {
    /// RoPE cos, sin (1, 1, Q, r/2) of the query rows, the same (1, 1, S, r/2) of the keys, r.
    pub(crate) rope: Option<(Tensor<4>, Tensor<4>, Tensor<4>, Tensor<4>, usize)>,
    pub(crate) rope_pairing: RopePairing,
    /// True where a query may NOT see a key: (1, 1, Q, C) with C = slot columns + S.
    pub(crate) hidden: Tensor<4, Bool>,
    /// Additive logit bias (1, H, Q, C) (ALiBi or T5 buckets; 0 on slot columns).
    pub(crate) bias: Option<Tensor<4>>,
    /// The fused attention kernel's plan for these rows, when the model asks for the kernel
    /// and it covers the model (a full forward; decoding keeps the explicit path).
    pub(crate) fused: Option<crate::kernels::attention::Plan>,
    /// Sink tokens at the front of the sequence.
    pub(crate) sink_tokens: usize,
    /// First query row.
    pub(crate) q_start: usize,
    /// Keys kept by a cache: `(front, back)` entries of the sequence (sink tokens included in
    /// `front`) when the cache evicts, applied to each layer's cache after appending.
    pub keep: Option<Keep>,
    /// Identity I and uniform attention C over the visible keys, (1, 1, Q, S): shaping only.
    pub(crate) shaping: Option<(Tensor<4>, Tensor<4>)>,
    /// The dtype of the forward's matrix products (mixed precision); None: f32.
    pub(crate) compute: Compute,
}

impl Ctx {
    /// For `t` real tokens (plus the configured sink tokens), every row a query, the matrix
    /// products in `compute`.
    pub fn new(
        cfg: &ModelConfig,
        tables: &PositionTables,
        rel_bias: Option<Tensor<2>>,
        t: usize,
        device: &Device,
        compute: Compute,
    ) -> Self {
        Self::rows(cfg, tables, rel_bias, t, 0, device, compute)
    }

    /// For `t` real tokens (plus the configured sink tokens) as keys and the sequence rows
    /// `q_start..N+t` as queries, the matrix products in `compute`.
    pub fn rows(
        cfg: &ModelConfig,
        tables: &PositionTables,
        rel_bias: Option<Tensor<2>>,
        t: usize,
        q_start: usize,
        device: &Device,
        compute: Compute,
    ) -> Self {
        let n = cfg.sink_tokens;
        let s = n + t;
        assert!(q_start < s, "at least one query row");
        let nq = s - q_start;
        let a = &cfg.attention;
        let slots = a.slot.slot_columns();
        let logit_cols = a.slot.logit_columns();
        let c = slots + s;
        let mask = a.mask;
        // Sink-token queries see the sink tokens up to themselves; real queries see every sink
        // token and the real keys their mask allows; slot columns are always visible.
        let visible = |qi: usize, kj: usize| -> bool {
            if kj < slots {
                return true;
            }
            let kj = kj - slots;
            match (qi < n, kj < n) {
                (true, true) => kj <= qi,
                (true, false) => false,
                (false, true) => true,
                (false, false) => mask.allows(qi - n, kj - n),
            }
        };
        let hidden: Vec<bool> = (q_start..s)
            .flat_map(|qi| (0..c).map(move |kj| !visible(qi, kj)))
            .collect();
        let hidden =
            Tensor::<2, Bool>::from_data(TensorData::new(hidden, [nq, c]), device).unsqueeze::<4>(); // (1, 1, Q, C)
        let h = cfg.n_heads;
        let mut alibi_host = None;
        let bias = match (&cfg.positions, &tables.alibi, rel_bias) {
            (_, Some(slopes), _) => {
                let mut b = vec![0f32; h * nq * c];
                for (hi, m) in slopes.iter().enumerate() {
                    for (row, qi) in (q_start..s).enumerate() {
                        for kj in 0..s {
                            let dist = (qi as f64 - kj as f64).abs();
                            b[(hi * nq + row) * c + slots + kj] = (-m * dist) as f32;
                        }
                    }
                }
                let b = std::sync::Arc::new(b);
                let spec = crate::kernels::attention::Alibi {
                    slopes: std::sync::Arc::new(slopes.iter().map(|&m| m as f32).collect()),
                    kv_slots: slots - logit_cols,
                    q_start,
                };
                alibi_host = Some((b.clone(), spec));
                Some(
                    Tensor::<3>::from_data(TensorData::new(b.to_vec(), [h, nq, c]), device)
                        .unsqueeze(),
                )
            }
            (
                PositionsConfig::Relative {
                    buckets,
                    max_distance,
                },
                _,
                Some(table),
            ) => {
                let idx: Vec<i64> = (q_start..s)
                    .flat_map(|qi| {
                        (0..s).map(move |kj| t5_bucket(qi, kj, *buckets, *max_distance) as i64)
                    })
                    .collect();
                let idx = Tensor::<2, Int>::from_data(TensorData::new(idx, [1, nq * s]), device);
                let b = embedding(table, idx) // (1, Q·S, H)
                    .reshape([nq, s, h])
                    .permute([2, 0, 1]); // (H, Q, S)
                let b = if slots > 0 {
                    Tensor::cat(vec![Tensor::zeros([h, nq, slots], device), b], 2)
                } else {
                    b
                };
                Some(b.unsqueeze::<4>()) // (1, H, Q, C)
            }
            _ => None,
        };
        let rope = tables.rope.as_ref().map(|(cos, sin, r)| {
            let four = |x: &Tensor<2>, from: usize| x.clone().slice(from..s).unsqueeze::<4>(); // (1, 1, ·, r/2)
            (
                four(cos, q_start),
                four(sin, q_start),
                four(cos, 0),
                four(sin, 0),
                *r,
            )
        });
        // Shaping is only allowed without slots and sink tokens (validated), so C = S.
        let shaping = (a.shaping != (ShapingConfig::None {})).then(|| {
            let mut eye = vec![0f32; nq * s];
            let mut uniform = vec![0f32; nq * s];
            for (row, qi) in (q_start..s).enumerate() {
                eye[row * s + qi] = 1.0;
                let seen: Vec<usize> = (0..s).filter(|&kj| visible(qi, kj)).collect();
                for kj in &seen {
                    uniform[row * s + kj] = 1.0 / seen.len() as f32;
                }
            }
            let four = |x: Vec<f32>| {
                Tensor::<2>::from_data(TensorData::new(x, [nq, s]), device).unsqueeze::<4>()
            };
            (four(eye), four(uniform))
        });
        Self {
            rope,
            rope_pairing: tables.rope_pairing,
            hidden,
            bias,
            // the kernel's decision (crate::kernels::attention::choose_on); cached decoding
            // (later query rows) keeps the explicit path
            fused: (q_start == 0
                && crate::kernels::attention::choose_on(cfg, device, compute, nq, c - logit_cols)
                    .is_ok())
            .then(|| {
                crate::kernels::attention::Plan::new(
                    nq,
                    c,
                    logit_cols,
                    |row, kj| visible(q_start + row, kj),
                    alibi_host,
                )
            })
            .flatten(),
            sink_tokens: n,
            q_start,
            keep: None,
            shaping,
            compute,
        }
    }
}

/// One layer's key/value cache for decoding: keys before positional rotation (they are
/// rotated with their current cache-local positions at every step) and values, (B, H, M, d_h).
#[derive(Debug, Clone, Default)]
pub struct LayerKv {
    pub keys: Option<Tensor<4>>,
    pub values: Option<Tensor<4>>,
}

/// Which cached entries survive an eviction: batch row r keeps its first `front[r]` entries
/// and its most recent `total − front[r]` (`front` of length 1: every row alike). Rows of one
/// cache may evict differently (the evicting policies of `stream-eval` decoded as one batch)
/// but always keep the same number of entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keep {
    pub front: Vec<usize>,
    pub total: usize,
}

impl LayerKv {
    /// Append new keys and values, evict down to `keep` if given, and return the whole cache.
    pub(crate) fn update(
        &mut self,
        k: Tensor<4>,
        v: Tensor<4>,
        keep: Option<&Keep>,
    ) -> (Tensor<4>, Tensor<4>) {
        // (B, KV, m, d_h) → (B, KV, total, d_h): row r keeps [0, front) and [m − back, m).
        let evict = |x: Tensor<4>, front: usize, total: usize| {
            let m = x.dims()[2];
            let back = total - front;
            let mut parts = Vec::with_capacity(2);
            if front > 0 {
                parts.push(x.clone().narrow(2, 0, front));
            }
            parts.push(x.narrow(2, m - back, back));
            Tensor::cat(parts, 2)
        };
        let join = |old: Option<Tensor<4>>, new: Tensor<4>| {
            let all = match old {
                Some(o) => Tensor::cat(vec![o, new], 2),
                None => new,
            };
            let m = all.dims()[2];
            match keep {
                Some(kp) if m > kp.total => match kp.front[..] {
                    [front] => evict(all, front, kp.total),
                    _ => {
                        let b = all.dims()[0];
                        assert_eq!(kp.front.len(), b, "one front per batch row");
                        let rows = (0..b)
                            .map(|r| evict(all.clone().narrow(0, r, 1), kp.front[r], kp.total))
                            .collect();
                        Tensor::cat(rows, 0)
                    }
                },
                _ => all,
            }
        };
        let k = join(self.keys.take(), k);
        let v = join(self.values.take(), v);
        self.keys = Some(k.clone());
        self.values = Some(v.clone());
        (k, v)
    }
}

/// Rotate (B, H, S, d_h) by positions: of the first r dimensions, `[x1, x2] ↦
/// [x1 cos − x2 sin, x1 sin + x2 cos]` with x1 = dims 0..r/2, x2 = dims r/2..r.
pub(crate) fn rope(
    x: Tensor<4>,
    cos: &Tensor<4>,
    sin: &Tensor<4>,
    r: usize,
    pairing: RopePairing,
) -> Tensor<4> {
    #[cfg(feature = "flex")]
    if crate::kernels::on_device(&x.device()) && x.dtype() == burn::tensor::DType::F32 {
        // one pass each way, bit-identical to rope_explicit (crate::kernels::cpu::rope)
        return crate::kernels::rope(x, cos, sin, r, pairing);
    }
    rope_explicit(x, cos, sin, r, pairing)
}

/// [`rope`] by Burn's element-wise ops.
fn rope_explicit(
    x: Tensor<4>,
    cos: &Tensor<4>,
    sin: &Tensor<4>,
    r: usize,
    pairing: RopePairing,
) -> Tensor<4> {
    let [b, h, s, dh] = x.dims();
    let half = r / 2;
    let rotated = match pairing {
        RopePairing::Halves => {
            // pairs (i, i + r/2)
            let x1 = x.clone().narrow(3, 0, half);
            let x2 = x.clone().narrow(3, half, half);
            Tensor::cat(
                vec![
                    x1.clone() * cos.clone() - x2.clone() * sin.clone(),
                    x1 * sin.clone() + x2 * cos.clone(),
                ],
                3,
            )
        }
        RopePairing::Adjacent => {
            // pairs (2i, 2i + 1): (B, H, S, r) → (B, H, S, r/2, 2)
            let pairs = x.clone().narrow(3, 0, r).reshape([b, h, s, half, 2]);
            let x1 = pairs.clone().narrow(4, 0, 1).reshape([b, h, s, half]);
            let x2 = pairs.narrow(4, 1, 1).reshape([b, h, s, half]);
            let y1 = x1.clone() * cos.clone() - x2.clone() * sin.clone();
            let y2 = x1 * sin.clone() + x2 * cos.clone();
            Tensor::cat(vec![y1.unsqueeze_dim::<5>(4), y2.unsqueeze_dim::<5>(4)], 4)
                .reshape([b, h, s, r])
        }
    };
    if r < dh {
        Tensor::cat(vec![rotated, x.narrow(3, r, dh - r)], 3)
    } else {
        rotated
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;

    /// The RoPE kernel is bit-identical to Burn's element-wise ops, forward and backward, for
    /// both pairings, a partial rotation, a table that starts past position 0 and x stored
    /// heads-major or sequence-major.
    #[test]
    fn the_rope_kernel_is_bit_identical_to_the_explicit_ops() {
        let dev = Device::flex().autodiff();
        let (b, h, s, dh) = (2, 3, 5, 8);
        let n = b * h * s * dh;
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 4.0)
            .collect();
        let g: Vec<f32> = (0..n)
            .map(|i| ((i * 53 % 97) as f32 / 97.0 - 0.5) * 2.0)
            .collect();
        for (pairing, r) in [
            (RopePairing::Halves, 8),
            (RopePairing::Halves, 4),
            (RopePairing::Adjacent, 8),
            (RopePairing::Adjacent, 6),
        ] {
            let half = r / 2;
            let table = |f: fn(f64) -> f64| {
                let v: Vec<f32> = (0..s * half)
                    .map(|k| f((3 + k / half) as f64 * 0.37f64.powi((k % half) as i32)) as f32)
                    .collect();
                Tensor::<2>::from_data(TensorData::new(v, [s, half]), &dev).unsqueeze::<4>()
            };
            let (cos, sin) = (table(f64::cos), table(f64::sin));
            // `seq`: x split into heads off a (B, S, H·d_h) tensor, as the attention's
            // projections are (the kernel rotates it where it lies, sequence-major)
            let run = |kernel: bool, seq: bool| {
                let base = if seq {
                    let mut xs = vec![0f32; n];
                    for (i, v) in x.iter().enumerate() {
                        let (bh, rest) = (i / (s * dh), i % (s * dh));
                        let (bi, hi, p, t) = (bh / h, bh % h, rest / dh, rest % dh);
                        xs[((bi * s + p) * h + hi) * dh + t] = *v;
                    }
                    Tensor::<4>::from_data(TensorData::new(xs, [b, s, h, dh]), &dev)
                } else {
                    Tensor::<4>::from_data(TensorData::new(x.clone(), [b, h, s, dh]), &dev)
                }
                .require_grad();
                let xt = if seq {
                    base.clone().swap_dims(1, 2)
                } else {
                    base.clone()
                };
                let y = if kernel {
                    crate::kernels::rope(xt.clone(), &cos, &sin, r, pairing)
                } else {
                    rope_explicit(xt.clone(), &cos, &sin, r, pairing)
                };
                let gt = Tensor::<4>::from_data(TensorData::new(g.clone(), [b, h, s, dh]), &dev);
                let grads = (y.clone() * gt).sum().backward();
                let dx = base.grad(&grads).unwrap();
                let dx = if seq { dx.swap_dims(1, 2) } else { dx };
                (
                    y.into_data().try_into_vec::<f32>().unwrap(),
                    dx.into_data().try_into_vec::<f32>().unwrap(),
                )
            };
            let want = run(false, false);
            assert_eq!(
                want,
                run(false, true),
                "{pairing:?} r {r}: layouts, explicit"
            );
            let got = run(true, false);
            assert_eq!(
                want,
                run(true, true),
                "{pairing:?} r {r}: sequence-major kernel"
            );
            assert_eq!(want.0, got.0, "{pairing:?} r {r}: values");
            assert_eq!(want.1, got.1, "{pairing:?} r {r}: gradients");
        }
    }
}
