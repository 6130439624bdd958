//! The one attention module, written by hand (REFERENCE §1). Every variant is a choice on one
//! of its axes, each a closed enum of [`crate::config::AttentionConfig`]:
//!
//! ```text
//! q, k, v = u W_Q, u W_K, u W_V                      # (B, H, S, d_h); S = N sink tokens + T
//! q, k = RoPE(q), RoPE(k)                            # rope positions only
//! q, k = φ(q), φ(k)                                  # linear kernels only
//! K = [k_slot ; k],  V = [v_slot ; v]                # KV/K bias (1 key), memory K/V (n keys)
//! s = q Kᵀ / sqrt(d_h) + bias                        # (B, H, S, C); bias: ALiBi / T5 buckets
//! s = [z_h ; s]                                      # learned sink logit column (value 0)
//! s = s + Γ_l                                       # U-SPA / E-SPA fixed logit bias
//! A = normalise(s, mask)                             # softmax, softmax_n, sigmoid, elu+1, linear
//! A = D_l A                                          # U-SPA / E-SPA row rescaling
//! A = α_h I + β_h A (− γ_h C)                        # Value-SkipInit / shaped attention
//! out = α · A V  (+ v*)                              # row scale α; V bias adds v* per head
//! out = out ⊙ σ(u W_g)                               # output gate, headwise or elementwise
//! y = concat_h(out) W_O                              # (B, S, d)
//! ```
//!
//! W_V and W_O may be reparameterised (`α W_init + β ΔW`) or absent (the identity: SAS), and
//! W_Q may start at exactly 0 (REFERENCE §3). The probe records A as the normaliser returns it
//! (before D_l, shaping and the row scale), so sink metrics read the learned softmax part.
//!
//! Slot columns (sink logit, KV/K bias, memory keys) come first in the weights, then the S
//! sequence positions (sink tokens, then real tokens). Slots are position-free: added after RoPE,
//! no position bias, never masked. Masked entries are exactly 0 for every normaliser.
//!
//! Conventions where sources differ: RoPE rotates halves (NeoX/HF) of the first
//! `rope_dims(d_h, fraction)` dimensions; ALiBi uses `−m_h |i − j|` (equal to `m_h (j − i)` on
//! causal entries, and defined for a bidirectional prefix); T5 buckets are bidirectional, one
//! table shared by all layers; softmax_n is stabilised with `m = max(row max, 0)`; elu+1 is
//! computed as `x + 1` for x > 0 and `exp(min(x, 0))` otherwise, so no branch overflows.

use crate::config::{
    AttentionKernel, FeatureMap, Gain, GateConfig, KBiasValue, KernelNorm, ModelConfig,
    NormaliserConfig, PositionsConfig, QueryInit, ShapingConfig, SlotConfig, ValueOutputConfig,
    WInit, rope_dims,
};
use crate::model::{Init, Linear};
use crate::signal::SpaLayer;
use burn::module::{Module, Param};
use burn::tensor::activation::{relu, sigmoid, softmax};
use burn::tensor::module::{attention, embedding};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};

/// What the probe path records for one layer (device tensors; real tokens only except `attn`).
#[derive(Default)]
pub struct LayerProbe {
    /// Attention weights before the row scale, (B, H, S, C): C = slot columns + S.
    pub attn: Option<Tensor<4>>,
    /// Queries of the real tokens after positional rotation (B, H, T, d_h).
    pub queries: Option<Tensor<4>>,
    /// Keys of the real tokens after positional rotation (B, H, T, d_h).
    pub keys: Option<Tensor<4>>,
    /// Values of the real tokens (B, H, T, d_h).
    pub values: Option<Tensor<4>>,
    /// Output-gate values (B, S, H) or (B, S, d), if the layer has a gate.
    pub gate: Option<Tensor<3>>,
    /// The block's output for the real tokens (B, T, d).
    pub hidden: Option<Tensor<3>>,
    /// Slot columns at the front of `attn` (sink logit, KV/K bias, memory keys).
    pub slot_cols: usize,
    /// Sink tokens at the front of the sequence.
    pub sink_tokens: usize,
}

/// Fixed tables that depend only on the configuration (not trained, not saved).
#[derive(Debug, Clone)]
pub struct PositionTables {
    /// RoPE cos and sin for positions 0..N+ctx, each (N+ctx, r/2), and r.
    pub rope: Option<(Tensor<2>, Tensor<2>, usize)>,
    /// Sinusoidal absolute positions (ctx, d).
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
    pub fn new(cfg: &ModelConfig, device: &Device) -> Self {
        let len = cfg.sink_tokens + cfg.ctx;
        let rope = match cfg.positions {
            PositionsConfig::Rope { base, fraction } => {
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
            let mut pe = vec![0f32; cfg.ctx * d];
            for p in 0..cfg.ctx {
                for i in 0..d / 2 {
                    let a = p as f64 / 10000f64.powf(2.0 * i as f64 / d as f64);
                    pe[p * d + 2 * i] = a.sin() as f32;
                    pe[p * d + 2 * i + 1] = a.cos() as f32;
                }
            }
            Tensor::from_data(TensorData::new(pe, [cfg.ctx, d]), device)
        });
        let alibi =
            matches!(cfg.positions, PositionsConfig::Alibi {}).then(|| alibi_slopes(cfg.n_heads));
        Self {
            rope,
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
pub struct Ctx {
    /// RoPE cos, sin (1, 1, Q, r/2) of the query rows, the same (1, 1, S, r/2) of the keys, r.
    rope: Option<(Tensor<4>, Tensor<4>, Tensor<4>, Tensor<4>, usize)>,
    /// True where a query may NOT see a key: (1, 1, Q, C) with C = slot columns + S.
    hidden: Tensor<4, Bool>,
    /// Additive logit bias (1, H, Q, C) (ALiBi or T5 buckets; 0 on slot columns).
    bias: Option<Tensor<4>>,
    fused: bool,
    /// Sink tokens at the front of the sequence.
    sink_tokens: usize,
    /// First query row.
    q_start: usize,
    /// Keys kept by a cache: `(front, back)` entries of the sequence (sink tokens included in
    /// `front`) when the cache evicts, applied to each layer's cache after appending.
    pub keep: Option<(usize, usize)>,
    /// Identity I and uniform attention C over the visible keys, (1, 1, Q, S): shaping only.
    shaping: Option<(Tensor<4>, Tensor<4>)>,
}

impl Ctx {
    /// For `t` real tokens (plus the configured sink tokens), every row a query.
    pub fn new(
        cfg: &ModelConfig,
        tables: &PositionTables,
        rel_bias: Option<Tensor<2>>,
        t: usize,
        device: &Device,
    ) -> Self {
        Self::rows(cfg, tables, rel_bias, t, 0, device)
    }

    /// For `t` real tokens (plus the configured sink tokens) as keys and the sequence rows
    /// `q_start..N+t` as queries.
    pub fn rows(
        cfg: &ModelConfig,
        tables: &PositionTables,
        rel_bias: Option<Tensor<2>>,
        t: usize,
        q_start: usize,
        device: &Device,
    ) -> Self {
        let n = cfg.sink_tokens;
        let s = n + t;
        assert!(q_start < s, "at least one query row");
        let nq = s - q_start;
        let a = &cfg.attention;
        let slots = a.slot.slot_columns();
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
                Some(Tensor::<3>::from_data(TensorData::new(b, [h, nq, c]), device).unsqueeze())
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
            hidden,
            bias,
            fused: a.kernel == AttentionKernel::Fused && q_start == 0,
            sink_tokens: n,
            q_start,
            keep: None,
            shaping,
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

impl LayerKv {
    /// Append new keys and values, evict down to `keep = (front, back)` entries if given, and
    /// return the whole cache.
    fn update(
        &mut self,
        k: Tensor<4>,
        v: Tensor<4>,
        keep: Option<(usize, usize)>,
    ) -> (Tensor<4>, Tensor<4>) {
        let join = |old: Option<Tensor<4>>, new: Tensor<4>| {
            let all = match old {
                Some(o) => Tensor::cat(vec![o, new], 2),
                None => new,
            };
            let m = all.dims()[2];
            match keep {
                Some((front, back)) if m > front + back => {
                    let mut parts = Vec::with_capacity(2);
                    if front > 0 {
                        parts.push(all.clone().narrow(2, 0, front));
                    }
                    parts.push(all.narrow(2, m - back, back));
                    Tensor::cat(parts, 2)
                }
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
fn rope(x: Tensor<4>, cos: &Tensor<4>, sin: &Tensor<4>, r: usize) -> Tensor<4> {
    let dh = x.dims()[3];
    let half = r / 2;
    let x1 = x.clone().narrow(3, 0, half);
    let x2 = x.clone().narrow(3, half, half);
    let mut parts = vec![
        x1.clone() * cos.clone() - x2.clone() * sin.clone(),
        x1 * sin.clone() + x2 * cos.clone(),
    ];
    if r < dh {
        parts.push(x.narrow(3, r, dh - r));
    }
    Tensor::cat(parts, 3)
}

/// `elu(x) + 1`: `x + 1` for x > 0, `exp(min(x, 0))` otherwise (no branch overflows).
pub fn elu1<const D: usize>(x: Tensor<D>) -> Tensor<D> {
    let pos = x.clone().greater_elem(0.0);
    x.clone().clamp_max(0.0).exp().mask_where(pos, x + 1.0)
}

/// The linear-kernel feature map φ as a module (only the MLP one has weights).
#[derive(Module, Debug)]
pub struct FeatureMlp {
    /// (d_h, d_h), shared by the heads of the layer.
    pub w1: Param<Tensor<2>>,
    /// (d_h, d_h).
    pub w2: Param<Tensor<2>>,
}

/// Settings of one attention layer (not trained, not saved).
#[derive(Debug, Clone)]
pub struct AttnSpec {
    pub n_heads: usize,
    pub normaliser: NormaliserConfig,
    /// Resolved bias of the unnormalised sigmoid.
    pub sigmoid_bias: f64,
    pub row_scale: f64,
    pub slot: SlotConfig,
    pub gate: GateConfig,
}

/// Causal multi-head attention with every REFERENCE §1 variant.
#[derive(Module, Debug)]
pub struct Attention {
    pub wq: Linear,
    pub wk: Linear,
    /// Absent (the identity) with `value_output = identity`, except in a first layer that
    /// keeps its value matrix.
    pub wv: Option<Linear>,
    /// Absent (the identity) with `value_output = identity`.
    pub wo: Option<Linear>,
    /// Output gate W_g: (d, H) headwise or (d, d) elementwise.
    pub gate: Option<Linear>,
    /// φ of an MLP linear kernel.
    pub phi: Option<FeatureMlp>,
    /// Learned sink logit z_h (H).
    pub sink_logit: Option<Param<Tensor<1>>>,
    /// KV/K bias key (H, d) or shared (1, d); d = d_h, or d_a for a partly learnable K bias.
    pub k_star: Option<Param<Tensor<2>>>,
    /// KV bias value (H, d_h) or (1, d_h); the fixed value of a K bias (never trained).
    pub v_star: Option<Param<Tensor<2>>>,
    /// V bias added to every head's output (H, d_h) or (1, d_h).
    pub v_bias: Option<Param<Tensor<2>>>,
    /// Memory keys and values (H, n, d_h).
    pub mem_k: Option<Param<Tensor<3>>>,
    pub mem_v: Option<Param<Tensor<3>>>,
    /// Shaping gains α_h, β_h, γ_h (H); constants (never trained) when not trainable.
    pub shape_alpha: Option<Param<Tensor<1>>>,
    pub shape_beta: Option<Param<Tensor<1>>>,
    pub shape_gamma: Option<Param<Tensor<1>>>,
    /// U-SPA / E-SPA logit bias Γ_l (ctx, ctx) and row rescaling D_l (ctx); constants.
    pub spa_bias: Option<Param<Tensor<2>>>,
    pub spa_scale: Option<Param<Tensor<1>>>,
    #[module(skip)]
    pub spec: AttnSpec,
}

impl Attention {
    /// Layer `layer` (0-based) of the model; `spa` is its U-SPA / E-SPA realisation.
    pub fn new(cfg: &ModelConfig, init: &mut Init, layer: usize, spa: Option<&SpaLayer>) -> Self {
        let (d, h, b) = (cfg.d_model, cfg.n_heads, cfg.bias);
        let dh = cfg.d_head();
        let a = &cfg.attention;
        // The baseline stream is always drawn for all four, so that every variant shares the
        // rest of its weights with the baseline of the same seed.
        let mut wq = Linear::new(init, d, d, b);
        let wk = Linear::new(init, d, d, b);
        let wv = Linear::new(init, d, d, b);
        let wo = Linear::new(init, d, d, b);
        if a.query_init == QueryInit::Zero {
            wq = Linear::zeros(init, d, d, b);
        }
        let (wv, wo) = match a.value_output {
            ValueOutputConfig::Dense {} => (Some(wv), Some(wo)),
            ValueOutputConfig::Reparam {
                init: w0,
                alpha,
                beta,
            } => (
                Some(Linear::reparam(init, d, w0, alpha, beta, b)),
                Some(Linear::reparam(init, d, w0, alpha, beta, b)),
            ),
            ValueOutputConfig::Identity { first_layer_value } => {
                let fixed_one = Gain {
                    init: 1.0,
                    trainable: false,
                };
                let wv = (layer == 0 && first_layer_value)
                    .then(|| Linear::reparam(init, d, WInit::Identity, fixed_one, fixed_one, b));
                (wv, None)
            }
        };
        let per_head = |init: &Init, x: f64, trainable: bool| {
            let p = init.filled(x as f32, [h]);
            Some(if trainable {
                p
            } else {
                p.set_require_grad(false)
            })
        };
        let (shape_alpha, shape_beta, shape_gamma) = match a.shaping {
            ShapingConfig::None {} => (None, None, None),
            ShapingConfig::ValueSkipinit {
                alpha,
                beta,
                trainable,
            } => (
                per_head(init, alpha, trainable),
                per_head(init, beta, trainable),
                None,
            ),
            ShapingConfig::Shaped {
                alpha,
                beta,
                gamma,
                trainable,
            } => (
                per_head(init, alpha, trainable),
                per_head(init, beta, trainable),
                per_head(init, gamma, trainable),
            ),
        };
        let (spa_bias, spa_scale) = match spa {
            Some(l) => {
                let t = cfg.ctx;
                let bias = l.bias.iter().map(|&x| x as f32).collect();
                let scale = l.scale.iter().map(|&x| x as f32).collect();
                (
                    Some(init.constant(bias, [t, t])),
                    Some(init.constant(scale, [t])),
                )
            }
            None => (None, None),
        };
        let gate = match a.gate {
            GateConfig::None {} => None,
            GateConfig::Headwise {} => Some(Linear::new_extra(init, d, h, b)),
            GateConfig::Elementwise {} => Some(Linear::new_extra(init, d, d, b)),
        };
        let phi = match a.normaliser {
            NormaliserConfig::Linear {
                feature_map: FeatureMap::Mlp,
                ..
            } => {
                let std = (2.0 / dh as f64).sqrt(); // He init: the ReLU halves the variance
                Some(FeatureMlp {
                    w1: init.normal_extra([dh, dh], std),
                    w2: init.normal_extra([dh, dh], (1.0 / dh as f64).sqrt()),
                })
            }
            _ => None,
        };
        let mut attn = Self {
            wq,
            wk,
            wv,
            wo,
            gate,
            phi,
            sink_logit: None,
            k_star: None,
            v_star: None,
            v_bias: None,
            mem_k: None,
            mem_v: None,
            shape_alpha,
            shape_beta,
            shape_gamma,
            spa_bias,
            spa_scale,
            spec: AttnSpec {
                n_heads: h,
                normaliser: a.normaliser.clone(),
                sigmoid_bias: match &a.normaliser {
                    NormaliserConfig::Sigmoid { bias } => bias.resolve(cfg.ctx).unwrap_or(0.0),
                    _ => 0.0,
                },
                row_scale: a.row_scale,
                slot: a.slot.clone(),
                gate: a.gate,
            },
        };
        let rows = |shared: bool| if shared { 1 } else { h };
        match &a.slot {
            SlotConfig::None {} => {}
            SlotConfig::SinkLogit { init: z, trainable } => {
                let p = init.filled(*z as f32, [h]);
                attn.sink_logit = Some(if *trainable {
                    p
                } else {
                    p.set_require_grad(false)
                });
            }
            SlotConfig::KvBias { shared, init_std } => {
                attn.k_star = Some(init.normal_extra([rows(*shared), dh], *init_std));
                attn.v_star = Some(init.normal_extra([rows(*shared), dh], *init_std));
            }
            SlotConfig::KBias {
                shared,
                init_std,
                value,
                learnable_dims,
                trainable,
            } => {
                let r = rows(*shared);
                let da = learnable_dims.unwrap_or(dh);
                attn.k_star = Some(if *trainable {
                    init.normal_extra([r, da], *init_std)
                } else {
                    init.constant(vec![0.0; r * dh], [r, dh])
                });
                let mut v = vec![0f32; r * dh];
                for row in v.chunks_exact_mut(dh) {
                    match value {
                        KBiasValue::Zero {} => {}
                        KBiasValue::E1 { m } => row[0] = *m as f32,
                        KBiasValue::Ones { m } => {
                            row.fill((*m / (dh as f64).sqrt()) as f32);
                        }
                    }
                }
                attn.v_star = Some(init.constant(v, [r, dh]));
            }
            SlotConfig::VBias { shared, init_std } => {
                attn.v_bias = Some(init.normal_extra([rows(*shared), dh], *init_std));
            }
            SlotConfig::MemoryKv { n, init_std } => {
                attn.mem_k = Some(init.normal_extra([h, *n, dh], *init_std));
                attn.mem_v = Some(init.normal_extra([h, *n, dh], *init_std));
            }
        }
        attn
    }

    /// Project (if a projection is given) and split heads: (B, S, d) → (B, H, S, d_h).
    fn heads(&self, x: Tensor<3>, w: Option<&Linear>) -> Tensor<4> {
        let [b, s, d] = x.dims();
        let h = self.spec.n_heads;
        let x = match w {
            Some(w) => w.forward(x),
            None => x,
        };
        x.reshape([b, s, h, d / h]).swap_dims(1, 2)
    }

    /// `α_h I + β_h A − γ_h C` (shaped) or `α_h I + β_h A` (Value-SkipInit) on (B, H, S, S).
    fn shape(&self, w: Tensor<4>, ctx: &Ctx) -> Tensor<4> {
        let Some(alpha) = &self.shape_alpha else {
            return w;
        };
        let (eye, uniform) = ctx.shaping.as_ref().expect("shaping context");
        let h = self.spec.n_heads;
        let per_head = |p: &Param<Tensor<1>>| p.val().reshape([1, h, 1, 1]);
        let beta = self.shape_beta.as_ref().expect("shape beta");
        let mut out = eye.clone() * per_head(alpha) + w * per_head(beta);
        if let Some(gamma) = &self.shape_gamma {
            out = out - uniform.clone() * per_head(gamma);
        }
        out
    }

    /// φ(x) on (B, H, S, d_h) for linear kernels; identity otherwise.
    fn feature_map(&self, x: Tensor<4>) -> Tensor<4> {
        match &self.spec.normaliser {
            NormaliserConfig::Linear { feature_map, .. } => match feature_map {
                FeatureMap::Identity => x,
                FeatureMap::Elu1 => elu1(x),
                FeatureMap::Mlp => {
                    let phi = self.phi.as_ref().expect("MLP feature map");
                    let [b, h, s, dh] = x.dims();
                    let flat = x.reshape([b * h, s, dh]);
                    let y = relu(flat.matmul(phi.w1.val().unsqueeze::<3>()))
                        .matmul(phi.w2.val().unsqueeze::<3>());
                    y.reshape([b, h, s, dh])
                }
            },
            _ => x,
        }
    }

    /// Slot keys and values broadcast to (B, H, M, d_h), if the slot adds keys.
    fn slot_kv(&self, b: usize, dh: usize) -> Option<(Tensor<4>, Tensor<4>)> {
        let h = self.spec.n_heads;
        match &self.spec.slot {
            SlotConfig::KvBias { .. } | SlotConfig::KBias { .. } => {
                let mut k = self.k_star.as_ref().expect("k*").val(); // (H|1, d or d_a)
                let [r, da] = k.dims();
                if da < dh {
                    let zeros = Tensor::zeros([r, dh - da], &k.device());
                    k = Tensor::cat(vec![k, zeros], 1);
                }
                let v = self.v_star.as_ref().expect("v*").val();
                let four = |x: Tensor<2>| {
                    x.unsqueeze_dim::<3>(1)
                        .unsqueeze::<4>()
                        .expand([b, h, 1, dh])
                };
                Some((four(k), four(v))) // (B, H, 1, d_h)
            }
            SlotConfig::MemoryKv { n, .. } => {
                let four = |x: Tensor<3>| x.unsqueeze::<4>().expand([b, h, *n, dh]);
                Some((
                    four(self.mem_k.as_ref().expect("mem k").val()),
                    four(self.mem_v.as_ref().expect("mem v").val()),
                ))
            }
            _ => None,
        }
    }

    /// Attention weights from logits (B, H, S, C); `hidden` is true where a key is masked.
    /// Masked entries are exactly 0. A learned sink logit is a first column here.
    fn normalise(&self, s: Tensor<4>, hidden: Tensor<4, Bool>) -> Tensor<4> {
        let rows = |w: Tensor<4>| w.clone() / w.sum_dim(3); // row-normalise
        match &self.spec.normaliser {
            NormaliserConfig::Softmax {} => softmax(s.mask_fill(hidden, f32::NEG_INFINITY), 3),
            NormaliserConfig::SoftmaxN { n } => {
                // exp(s − m) / (n·exp(−m) + Σ exp(s − m)), m = max(row max, 0)
                let s = s.mask_fill(hidden, f32::NEG_INFINITY);
                let m = s.clone().max_dim(3).clamp_min(0.0).detach(); // (B, H, S, 1)
                let e = (s - m.clone()).exp();
                let denom = e.clone().sum_dim(3) + m.neg().exp() * *n;
                e / denom
            }
            NormaliserConfig::Sigmoid { .. } => {
                sigmoid(s + self.spec.sigmoid_bias).mask_fill(hidden, 0.0)
            }
            NormaliserConfig::SigmoidNormalised {} => rows(sigmoid(s).mask_fill(hidden, 0.0)),
            NormaliserConfig::Elu1 {} => elu1(s).mask_fill(hidden, 0.0),
            NormaliserConfig::Elu1Normalised {} => rows(elu1(s).mask_fill(hidden, 0.0)),
            NormaliserConfig::Linear { normaliser, .. } => {
                let w = s.mask_fill(hidden, 0.0);
                match normaliser {
                    KernelNorm::None => w,
                    KernelNorm::MaxAbsSum => {
                        let d = w.clone().sum_dim(3).abs().clamp_min(1.0);
                        w / d
                    }
                }
            }
        }
    }

    /// (B, Q, d) → (B, Q, d) for the query rows of `ctx`. Without a cache the input is the
    /// whole sequence (Q = S); with one it is the Q new tokens, whose keys and values are
    /// appended to `cache` (evicted per `ctx.keep`) and attended together with the cached ones.
    pub fn forward(
        &self,
        u: Tensor<3>,
        ctx: &Ctx,
        mut probe: Option<&mut LayerProbe>,
        cache: Option<&mut LayerKv>,
    ) -> Tensor<3> {
        let [b, nq, d] = u.dims();
        let h = self.spec.n_heads;
        let dh = d / h;
        let mut q = self.heads(u.clone(), Some(&self.wq)); // (B, H, Q, d_h)
        let k = self.heads(u.clone(), Some(&self.wk));
        let v = self.heads(u.clone(), self.wv.as_ref());
        let (mut k, v) = match cache {
            Some(c) => c.update(k, v, ctx.keep), // (B, H, S, d_h), keys unrotated
            None => (k, v),
        };
        let s = k.dims()[2];
        debug_assert_eq!(s - ctx.q_start, nq, "query rows match the context");
        if let Some((cos_q, sin_q, cos_k, sin_k, r)) = &ctx.rope {
            q = rope(q, cos_q, sin_q, *r);
            k = rope(k, cos_k, sin_k, *r);
        }
        if let Some(p) = probe.as_deref_mut() {
            let t = s - ctx.sink_tokens;
            p.queries = Some(q.clone().narrow(2, ctx.sink_tokens, t)); // (B, H, T, d_h)
            p.keys = Some(k.clone().narrow(2, ctx.sink_tokens, t));
            p.values = Some(v.clone().narrow(2, ctx.sink_tokens, t));
            p.sink_tokens = ctx.sink_tokens;
        }
        let q = self.feature_map(q);
        let k = self.feature_map(k);
        let mut out = if ctx.fused && probe.is_none() {
            let options = AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal: true,
            };
            attention(q, k, v, None, None, options) // (B, H, S, d_h)
        } else {
            let (k_all, v_all) = match self.slot_kv(b, dh) {
                Some((ks, vs)) => (Tensor::cat(vec![ks, k], 2), Tensor::cat(vec![vs, v], 2)),
                None => (k, v),
            }; // (B, H, M+S, d_h)
            // Scale q (B, H, Q, d_h) rather than the (B, H, Q, C) scores: same maths, fewer flops.
            let mut scores = (q / (dh as f64).sqrt()).matmul(k_all.swap_dims(2, 3)); // (B, H, Q, M+S)
            if let Some(z) = &self.sink_logit {
                let z = z.val().reshape([1, h, 1, 1]).expand([b, h, nq, 1]);
                scores = Tensor::cat(vec![z, scores], 3); // (B, H, Q, C): the sink column first
            }
            if let Some(bias) = &ctx.bias {
                scores = scores + bias.clone();
            }
            if let Some(g) = &self.spa_bias {
                // + Γ_l (1, 1, Q, S)
                scores = scores + g.val().slice([ctx.q_start..s, 0..s]).unsqueeze::<4>();
            }
            let c = scores.dims()[3];
            let w = self.normalise(scores, ctx.hidden.clone().expand([b, h, nq, c])); // (B, H, Q, C)
            if let Some(p) = probe.as_deref_mut() {
                p.attn = Some(w.clone());
                p.slot_cols = c - s;
            }
            let w = if self.sink_logit.is_some() {
                w.narrow(3, 1, c - 1) // the sink logit's value is 0
            } else {
                w
            };
            let w = match &self.spa_scale {
                Some(dl) => w * dl.val().slice(ctx.q_start..s).reshape([1, 1, nq, 1]), // D_l A
                None => w,
            };
            let w = self.shape(w, ctx);
            let w = if self.spec.row_scale != 1.0 {
                w * self.spec.row_scale
            } else {
                w
            };
            w.matmul(v_all) // (B, H, Q, d_h)
        };
        if let Some(vb) = &self.v_bias {
            out = out + vb.val().unsqueeze_dim::<3>(1).unsqueeze::<4>(); // + (1, H|1, 1, d_h)
        }
        if let Some(g) = &self.gate {
            let gv = sigmoid(g.forward(u)); // (B, S, H) or (B, S, d)
            let g4 = match self.spec.gate {
                GateConfig::Headwise {} => gv.clone().swap_dims(1, 2).unsqueeze_dim::<4>(3), // (B, H, Q, 1)
                _ => gv.clone().reshape([b, nq, h, dh]).swap_dims(1, 2), // (B, H, Q, d_h)
            };
            out = out * g4;
            if let Some(p) = probe {
                p.gate = Some(gv);
            }
        }
        let out = out.swap_dims(1, 2).reshape([b, nq, d]); // (B, Q, d): heads concatenated
        match &self.wo {
            Some(wo) => wo.forward(out),
            None => out,
        }
    }
}
