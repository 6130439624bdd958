//! The one attention module, written by hand (docs/reference.md §1). Every variant is a choice on one
//! of its axes, each a closed enum of [`crate::config::AttentionConfig`]:
//!
//! ```text
//! q, k, v = u W_Q, u W_K, u W_V                      # (B, H, S, d_h); S = N sink tokens + T
//! q, k = RoPE(q), RoPE(k)                            # rope positions only; hooks q, k, v
//! q, k = φ(q), φ(k)                                  # linear kernels only
//! K = [k_slot ; k],  V = [v_slot ; v]                # KV/K bias (1 key), memory K/V (n keys)
//! s = q Kᵀ / sqrt(d_h) + bias                        # (B, H, S, C); bias: ALiBi / T5 buckets
//! q = q · σ_h ln n_i                                 # Scalable-Softmax only (n_i: keys row i sees)
//! s = [z_h ; s]                                      # learned sink logit column (value 0)
//! s = s + Γ_l                                       # U-SPA / E-SPA fixed logit bias
//! A = normalise(s, mask)                             # softmax, softmax_n, softpick, …; hook pattern
//! A = D_l A                                          # U-SPA / E-SPA row rescaling
//! A = α_h I + β_h A (− γ_h C)                        # Value-SkipInit / shaped attention
//! out = α · A V  (+ v*)                              # row scale α; V bias adds v* per head
//! out = out ⊙ g(u)                                   # output gate (hook gate); hook z = out
//! y = concat_h(out) W_O                              # (B, S, d)
//! ```
//!
//! W_V and W_O may be reparameterised (`α W_init + β ΔW`) or absent (the identity: SAS), and
//! W_Q may start at exactly 0 (docs/reference.md §3). The hook points ([`super::hooks`]) sit at
//! the stage boundaries: k and v before the key/value groups are repeated (one slice per group),
//! `pattern` = A as the normaliser returns it (before D_l, shaping and the row scale, so sink
//! metrics read the learned softmax part; a replaced pattern goes through them), z = each
//! head's output just before W_O.
//!
//! Slot columns (sink logit, KV/K bias, memory keys) come first in the weights, then the S
//! sequence positions (sink tokens, then real tokens). Slots are position-free: added after RoPE,
//! no position bias, never masked. Masked entries are exactly 0 for every normaliser.
//!
//! Conventions where sources differ: RoPE rotates halves (NeoX/HF) of the first
//! `rope_dims(d_h, fraction)` dimensions; ALiBi uses `−m_h |i − j|` (equal to `m_h (j − i)` on
//! causal entries, and defined for a bidirectional prefix); T5 buckets are bidirectional, one
//! table shared by all layers; softmax_n and softpick are stabilised with `m = max(row max, 0)`;
//! elu+1 is computed as `x + 1` for x > 0 and `exp(min(x, 0))` otherwise, so no branch
//! overflows; Scalable-Softmax scales q (the hook `q` is before that scale), so its n counts
//! every key column the row may see and the fused kernels run it unchanged.

use super::context::{Ctx, LayerKv, rope};
use super::hooks::{Frame, HeadSite, Tap, tap_changes, tap_heads, tap_wants};
use super::layers::{Compute, Init, Linear, matmul_in};
use crate::config::{
    FeatureMap, Gain, KBiasValue, KernelNorm, ModelConfig, NormaliserConfig, QueryInit,
    ShapingConfig, SlotConfig, ValueOutputConfig, WInit,
};
use crate::spa::SpaLayer;
use burn::module::{Module, Param};
use burn::tensor::activation::{relu, sigmoid, softmax};
use burn::tensor::{Bool, Tensor};
pub use gate::{Gate, PerToken};

mod gate;
mod timing;
pub use timing::time_attention;

/// (B, KV, S, d_h) → (B, H, S, d_h), each key/value head repeated for the H / KV query heads
/// that read it (Hugging Face's `repeat_kv`); the identity without grouped-query attention.
pub fn repeat_kv(x: Tensor<4>, n_heads: usize) -> Tensor<4> {
    let [b, kv, s, dh] = x.dims();
    if kv == n_heads {
        return x;
    }
    x.unsqueeze_dim::<5>(2) // (B, KV, 1, S, d_h)
        .expand([b, kv, n_heads / kv, s, dh])
        .reshape([b, n_heads, s, dh])
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
    /// Key/value heads (< n_heads with grouped-query attention).
    pub kv_heads: usize,
    pub normaliser: NormaliserConfig,
    /// Resolved bias of the unnormalised sigmoid.
    pub sigmoid_bias: f64,
    pub row_scale: f64,
}

/// A sink slot (docs/reference.md §1.2): the parameters of the configured
/// `model.attention.slot` and what they do. The enum and its field are transparent in
/// parameter names (`blocks.0.attn.k_star`).
#[derive(Module, Debug)]
pub enum Slot {
    /// A learned per-head logit z_h appended as the first column of the scores (not divided
    /// by sqrt(d_h)), value 0, dropped after the normaliser (gpt-oss).
    SinkLogit(SinkLogit),
    /// A key k* and value v* prepended to K and V, position-free and never masked: the KV bias
    /// (both learned) and the K bias (v* a fixed constant; k* fixed or partly learnable).
    KeyValue(KeyValue),
    /// v* added to every head's output, `out = A V + v*` (no extra key).
    ValueBias(ValueBias),
    /// n learned key/value pairs per head, prepended to K and V (x-transformers).
    Memory(Memory),
}

#[derive(Module, Debug)]
pub struct SinkLogit {
    /// z_h (H); a constant when not trainable.
    pub sink_logit: Param<Tensor<1>>,
}

#[derive(Module, Debug)]
pub struct KeyValue {
    /// k* (H, d) or shared (1, d); d = d_h, or the learnable d_a of a partial K bias (the
    /// remaining dimensions are 0).
    pub k_star: Param<Tensor<2>>,
    /// v* (H, d_h) or (1, d_h).
    pub v_star: Param<Tensor<2>>,
}

#[derive(Module, Debug)]
pub struct ValueBias {
    /// (H, d_h) or (1, d_h).
    pub v_bias: Param<Tensor<2>>,
}

#[derive(Module, Debug)]
pub struct Memory {
    /// (H, n, d_h).
    pub mem_k: Param<Tensor<3>>,
    pub mem_v: Param<Tensor<3>>,
}

impl Slot {
    /// Build the configured slot (None for `none`), drawing from the variant stream.
    fn new(cfg: &SlotConfig, init: &mut Init, h: usize, dh: usize) -> Option<Self> {
        let rows = |shared: bool| if shared { 1 } else { h };
        Some(match cfg {
            SlotConfig::None {} => return None,
            SlotConfig::SinkLogit { init: z, trainable } => {
                let p = init.filled(*z as f32, [h]);
                Slot::SinkLogit(SinkLogit {
                    sink_logit: if *trainable {
                        p
                    } else {
                        p.set_require_grad(false)
                    },
                })
            }
            SlotConfig::KvBias { shared, init_std } => Slot::KeyValue(KeyValue {
                k_star: init.normal_extra([rows(*shared), dh], *init_std),
                v_star: init.normal_extra([rows(*shared), dh], *init_std),
            }),
            SlotConfig::KBias {
                shared,
                init_std,
                value,
                learnable_dims,
                trainable,
            } => {
                let r = rows(*shared);
                let da = learnable_dims.unwrap_or(dh);
                let k_star = if *trainable {
                    init.normal_extra([r, da], *init_std)
                } else {
                    init.constant(vec![0.0; r * dh], [r, dh])
                };
                let mut v = vec![0f32; r * dh];
                for row in v.chunks_exact_mut(dh) {
                    match value {
                        KBiasValue::Zero {} => {}
                        KBiasValue::E1 { m } => row[0] = *m as f32,
                        KBiasValue::Ones { m } => row.fill((*m / (dh as f64).sqrt()) as f32),
                    }
                }
                Slot::KeyValue(KeyValue {
                    k_star,
                    v_star: init.constant(v, [r, dh]),
                })
            }
            SlotConfig::VBias { shared, init_std } => Slot::ValueBias(ValueBias {
                v_bias: init.normal_extra([rows(*shared), dh], *init_std),
            }),
            SlotConfig::MemoryKv { n, init_std } => Slot::Memory(Memory {
                mem_k: init.normal_extra([h, *n, dh], *init_std),
                mem_v: init.normal_extra([h, *n, dh], *init_std),
            }),
        })
    }

    /// The slot's keys and values broadcast to (B, H, M, d_h), if it adds keys.
    fn keys_values(&self, b: usize, h: usize, dh: usize) -> Option<(Tensor<4>, Tensor<4>)> {
        match self {
            Slot::KeyValue(kv) => {
                let mut k = kv.k_star.val(); // (H|1, d_h or d_a)
                let [r, da] = k.dims();
                if da < dh {
                    let zeros = Tensor::zeros([r, dh - da], &k.device());
                    k = Tensor::cat(vec![k, zeros], 1);
                }
                let four = |x: Tensor<2>| {
                    x.unsqueeze_dim::<3>(1)
                        .unsqueeze::<4>()
                        .expand([b, h, 1, dh])
                };
                Some((four(k), four(kv.v_star.val()))) // (B, H, 1, d_h)
            }
            Slot::Memory(m) => {
                let n = m.mem_k.dims()[1];
                let four = |x: Tensor<3>| x.unsqueeze::<4>().expand([b, h, n, dh]);
                Some((four(m.mem_k.val()), four(m.mem_v.val())))
            }
            Slot::SinkLogit(_) | Slot::ValueBias(_) => None,
        }
    }

    /// The sink-logit column (B, H, Q, 1), if the slot is one.
    fn logit_column(&self, b: usize, h: usize, nq: usize) -> Option<Tensor<4>> {
        match self {
            Slot::SinkLogit(s) => Some(
                s.sink_logit
                    .val()
                    .reshape([1, h, 1, 1])
                    .expand([b, h, nq, 1]),
            ),
            _ => None,
        }
    }

    /// `out + v*` for a V bias; `out` unchanged otherwise. `out` is (B, H, Q, d_h).
    fn add_value_bias(&self, out: Tensor<4>) -> Tensor<4> {
        match self {
            Slot::ValueBias(v) => out + v.v_bias.val().unsqueeze_dim::<3>(1).unsqueeze::<4>(), // + (1, H|1, 1, d_h)
            _ => out,
        }
    }
}

/// What is done to each head's attention matrix after the normaliser (docs/reference.md §3.1),
/// with its per-head gains (H); constants (never trained) when not trainable. Transparent in
/// parameter names (`blocks.0.attn.shape_alpha`).
#[derive(Module, Debug)]
pub enum Shaping {
    /// Value-SkipInit: `A ← α I + β A`.
    SkipInit(SkipInit),
    /// Shaped attention (Noci et al.): `A ← α I + β A − γ C`, C uniform over the visible keys.
    Shaped(Shaped),
}

#[derive(Module, Debug)]
pub struct SkipInit {
    pub shape_alpha: Param<Tensor<1>>,
    pub shape_beta: Param<Tensor<1>>,
}

#[derive(Module, Debug)]
pub struct Shaped {
    pub shape_alpha: Param<Tensor<1>>,
    pub shape_beta: Param<Tensor<1>>,
    pub shape_gamma: Param<Tensor<1>>,
}

impl Shaping {
    fn new(cfg: &ShapingConfig, init: &Init, h: usize) -> Option<Self> {
        let per_head = |x: f64, trainable: bool| {
            let p = init.filled(x as f32, [h]);
            if trainable {
                p
            } else {
                p.set_require_grad(false)
            }
        };
        Some(match *cfg {
            ShapingConfig::None {} => return None,
            ShapingConfig::ValueSkipinit {
                alpha,
                beta,
                trainable,
            } => Shaping::SkipInit(SkipInit {
                shape_alpha: per_head(alpha, trainable),
                shape_beta: per_head(beta, trainable),
            }),
            ShapingConfig::Shaped {
                alpha,
                beta,
                gamma,
                trainable,
            } => Shaping::Shaped(Shaped {
                shape_alpha: per_head(alpha, trainable),
                shape_beta: per_head(beta, trainable),
                shape_gamma: per_head(gamma, trainable),
            }),
        })
    }

    /// The shaped matrix from A (B, H, Q, S), the identity rows I and the uniform attention C
    /// (1, 1, Q, S) of the context.
    fn apply(&self, a: Tensor<4>, eye: &Tensor<4>, uniform: &Tensor<4>) -> Tensor<4> {
        let per_head = |p: &Param<Tensor<1>>| {
            let h = p.dims()[0];
            p.val().reshape([1, h, 1, 1])
        };
        match self {
            // α I + β A
            Shaping::SkipInit(s) => {
                eye.clone() * per_head(&s.shape_alpha) + a * per_head(&s.shape_beta)
            }
            // α I + β A − γ C
            Shaping::Shaped(s) => {
                eye.clone() * per_head(&s.shape_alpha) + a * per_head(&s.shape_beta)
                    - uniform.clone() * per_head(&s.shape_gamma)
            }
        }
    }
}

/// Causal multi-head attention with every docs/reference.md §1 variant.
#[derive(Module, Debug)]
pub struct Attention {
    pub wq: Linear,
    pub wk: Linear,
    /// Absent (the identity) with `value_output = identity`, except in a first layer that
    /// keeps its value matrix.
    pub wv: Option<Linear>,
    /// Absent (the identity) with `value_output = identity`.
    pub wo: Option<Linear>,
    /// The output gate, if any.
    pub gate: Option<Gate>,
    /// Scalable-Softmax's σ: (H) per head or (1) per layer; a constant when not trainable.
    pub ssmax_scale: Option<Param<Tensor<1>>>,
    /// φ of an MLP linear kernel.
    pub phi: Option<FeatureMlp>,
    /// The sink slot, if any.
    pub slot: Option<Slot>,
    /// Value-SkipInit or shaped attention, if any.
    pub shaping: Option<Shaping>,
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
        let kv = cfg.kv_heads() * dh; // key/value width (d without grouped-query attention)
        let qkv_b = b || cfg.qkv_bias;
        let a = &cfg.attention;
        // The baseline stream is always drawn for all four, so that every variant shares the
        // rest of its weights with the baseline of the same seed.
        let mut wq = Linear::new(init, d, d, qkv_b);
        let wk = Linear::new(init, d, kv, qkv_b);
        let wv = Linear::new(init, d, kv, qkv_b);
        let wo = Linear::new(init, d, d, b);
        if a.query_init == QueryInit::Zero {
            wq = Linear::zeros(init, d, d, qkv_b);
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
        let gate = Gate::new(&a.gate, init, d, h, b);
        let ssmax_scale = match a.normaliser {
            NormaliserConfig::ScalableSoftmax {
                per_head,
                init: s0,
                trainable,
            } => {
                let p = init.filled(s0 as f32, [if per_head { h } else { 1 }]);
                Some(if trainable {
                    p
                } else {
                    p.set_require_grad(false)
                })
            }
            _ => None,
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
        let shaping = Shaping::new(&a.shaping, init, h);
        let slot = Slot::new(&a.slot, init, h, dh);
        Self {
            wq,
            wk,
            wv,
            wo,
            gate,
            ssmax_scale,
            phi,
            slot,
            shaping,
            spa_bias,
            spa_scale,
            spec: AttnSpec {
                n_heads: h,
                kv_heads: cfg.kv_heads(),
                normaliser: a.normaliser.clone(),
                sigmoid_bias: match &a.normaliser {
                    NormaliserConfig::Sigmoid { bias } => bias.resolve(cfg.ctx).unwrap_or(0.0),
                    _ => 0.0,
                },
                row_scale: a.row_scale,
            },
        }
    }

    /// Project (if a projection is given) and split into `h` heads: (B, S, h·d_h) → (B, h, S, d_h).
    fn heads(&self, x: Tensor<3>, w: Option<&Linear>, h: usize, compute: Compute) -> Tensor<4> {
        let x = match w {
            Some(w) => w.forward_in(x, compute),
            None => x,
        };
        let [b, s, width] = x.dims();
        x.reshape([b, s, h, width / h]).swap_dims(1, 2)
    }

    /// (B, KV, S, d_h) → (B, H, S, d_h), each key/value head repeated for the H / KV query
    /// heads that read it (Hugging Face's `repeat_kv`); the identity without grouped-query
    /// attention.
    fn repeat_kv(&self, x: Tensor<4>) -> Tensor<4> {
        repeat_kv(x, self.spec.n_heads)
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

    /// Attention weights from logits (B, H, S, C); `hidden` is true where a key is masked.
    /// Masked entries are exactly 0. A learned sink logit is a first column here.
    fn normalise(&self, s: Tensor<4>, hidden: Tensor<4, Bool>) -> Tensor<4> {
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
            // σ(s_j) / Σ σ(s) = softmax(log σ(s))_j, log σ(s) = min(s, 0) − log(1 + e^−|s|):
            // the quotient form underflows (σ(−90) = 0 in f32) and its backward divides by 0.
            NormaliserConfig::SigmoidNormalised {} => {
                let log_sig = s.clone().clamp_max(0.0) - s.abs().neg().exp().log1p();
                softmax(log_sig.mask_fill(hidden, f32::NEG_INFINITY), 3)
            }
            NormaliserConfig::Elu1 {} => elu1(s).mask_fill(hidden, 0.0),
            // ReLU(s) / (number of visible keys of the row)
            NormaliserConfig::Relu {} => {
                let seen = hidden.clone().bool_not().float().sum_dim(3).clamp_min(1.0);
                relu(s).mask_fill(hidden, 0.0) / seen
            }
            // elu1(s_j) / Σ elu1(s) = softmax(log elu1(s))_j, log elu1(s) = s (s < 0), log(1 + s).
            NormaliserConfig::Elu1Normalised {} => {
                let log_elu1 = s.clone().clamp_max(0.0) + s.clamp_min(0.0).log1p();
                softmax(log_elu1.mask_fill(hidden, f32::NEG_INFINITY), 3)
            }
            // ReLU(e^{s−m} − e^{−m}) / (Σ |e^{s−m} − e^{−m}| + ε e^{−m}), m = max(row max, 0):
            // softpick exactly (numerator and denominator both carry e^{−m}); masked keys add
            // nothing to the sum
            NormaliserConfig::Softpick { eps } => {
                let s = s.mask_fill(hidden.clone(), f32::NEG_INFINITY);
                let m = s.clone().max_dim(3).clamp_min(0.0).detach(); // (B, H, S, 1)
                let em = m.clone().neg().exp(); // e^{−m} ≤ 1
                let x = ((s - m).exp() - em.clone()).mask_fill(hidden, 0.0);
                let denom = x.clone().abs().sum_dim(3) + em * *eps;
                relu(x) / denom
            }
            // clip((ζ − γ) softmax(s) + γ, 0, 1); masked keys stay exactly 0 (γ ≤ 0)
            NormaliserConfig::ClippedSoftmax { gamma, zeta } => {
                let p = softmax(s.mask_fill(hidden.clone(), f32::NEG_INFINITY), 3);
                (p * (zeta - gamma) + *gamma)
                    .clamp(0.0, 1.0)
                    .mask_fill(hidden, 0.0)
            }
            // the scale σ ln n is already in q (Self::mix)
            NormaliserConfig::ScalableSoftmax { .. } => {
                softmax(s.mask_fill(hidden, f32::NEG_INFINITY), 3)
            }
            NormaliserConfig::Linear { normaliser, .. } => {
                let w = s.mask_fill(hidden, 0.0);
                match normaliser {
                    KernelNorm::None => w,
                    KernelNorm::MaxAbsSum => {
                        let d = w.clone().sum_dim(3).abs().clamp_min(1.0);
                        w / d
                    }
                    KernelNorm::Sum => {
                        let d = w.clone().sum_dim(3) + 1e-8;
                        w / d
                    }
                }
            }
        }
    }

    /// (B, Q, d) → (B, Q, d) for the query rows of `ctx`. Without a cache the input is the
    /// whole sequence (Q = S); with one it is the Q new tokens, whose keys and values are
    /// appended to `cache` (evicted per `ctx.keep`) and attended together with the cached ones.
    ///
    /// Three stages, each replaceable on its own by a kernel (`crate::kernels`): [`Self::project`]
    /// (q, k, v per head, cached, rotated, hooked), [`Self::mix`] (the weights and the weighted
    /// sum: the fused kernel where it covers the model and no hook wants the pattern, else
    /// [`Self::mix_explicit`]) and [`Self::output`] (value bias, gate, heads merged, W_O).
    pub(crate) fn forward(
        &self,
        u: Tensor<3>,
        ctx: &Ctx,
        mut tap: Option<&mut Tap<'_>>,
        cache: Option<&mut LayerKv>,
    ) -> Tensor<3> {
        let frame = Frame {
            sink_tokens: ctx.sink_tokens,
            q_start: ctx.q_start,
            slot_cols: 0,
        };
        let (q, k, v) = self.project(u.clone(), ctx, &mut tap, cache, frame);
        let z = self.mix(q, k, v, ctx, &mut tap, frame); // (B, H, Q, d_h)
        self.output(z, u, ctx, &mut tap, frame)
    }

    /// Stage 1: (B, Q, d) → q (B, H, Q, d_h), k and v (B, H, S, d_h): projected per head, keys
    /// and values appended to the cache, RoPE applied, hooked (q, k, v), key/value heads
    /// repeated for grouped-query attention, the kernel feature map applied to q and k.
    fn project(
        &self,
        u: Tensor<3>,
        ctx: &Ctx,
        tap: &mut Option<&mut Tap<'_>>,
        cache: Option<&mut LayerKv>,
        frame: Frame,
    ) -> (Tensor<4>, Tensor<4>, Tensor<4>) {
        let nq = u.dims()[1];
        let h = self.spec.n_heads;
        let kv = self.spec.kv_heads;
        let c = ctx.compute; // the dtype of the matrix products (mixed precision)
        let mut q = self.heads(u.clone(), Some(&self.wq), h, c); // (B, H, Q, d_h)
        let k = self.heads(u.clone(), Some(&self.wk), kv, c); // (B, KV, Q, d_h)
        let v = self.heads(u, self.wv.as_ref(), kv, c);
        let (mut k, v) = match cache {
            Some(c) => c.update(k, v, ctx.keep.as_ref()), // (B, H, S, d_h), keys unrotated
            None => (k, v),
        };
        let s = k.dims()[2];
        debug_assert_eq!(s - ctx.q_start, nq, "query rows match the context");
        if let Some((cos_q, sin_q, cos_k, sin_k, r)) = &ctx.rope {
            q = rope(q, cos_q, sin_q, *r, ctx.rope_pairing);
            k = rope(k, cos_k, sin_k, *r, ctx.rope_pairing);
        }
        let q = tap_heads(tap, HeadSite::Q, q, frame); // hook q (B, H, Q, d_h)
        let k = tap_heads(tap, HeadSite::K, k, frame); // hook k (B, KV, S, d_h)
        let v = tap_heads(tap, HeadSite::V, v, frame); // hook v (B, KV, S, d_h)
        // Grouped-query attention: query head h reads key/value head h / (H / KV).
        let k = self.repeat_kv(k);
        let v = self.repeat_kv(v);
        (self.feature_map(q), self.feature_map(k), v)
    }

    /// Stage 2: q (B, H, Q, d_h), k, v (B, H, S, d_h) → the weighted sum (B, H, Q, d_h).
    fn mix(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        ctx: &Ctx,
        tap: &mut Option<&mut Tap<'_>>,
        frame: Frame,
    ) -> Tensor<4> {
        let q = match &self.ssmax_scale {
            Some(sigma) => q * ssmax_factor(sigma, ctx), // q · σ_h ln n_i
            None => q,
        };
        // ctx.fused: the kernel's decision for these rows (crate::kernels::attention::choose_on)
        match &ctx.fused {
            Some(plan) if !tap_changes(tap, HeadSite::Pattern) => {
                if tap_wants(tap, HeadSite::Pattern) {
                    // hooks that only record the pattern get the explicit weights; the output
                    // is the kernel's either way, so recording changes nothing
                    let _ = self.mix_explicit(q.clone(), k.clone(), v.clone(), ctx, tap, frame);
                }
                self.mix_fused(q, k, v, plan, ctx.compute)
            }
            _ => self.mix_explicit(q, k, v, ctx, tap, frame),
        }
    }

    /// [`Self::mix`] by the fused kernel (`crate::kernels::attention`, which owns what it
    /// covers): slot keys and values in front, the sink logit and softmax_n's n as one extra
    /// logit per head, the row scale on the output. Under mixed precision (`compute`, the
    /// CubeCL half only) q, k and v go in stored in the low precision and the output comes
    /// back to f32; the extra logit stays f32.
    fn mix_fused(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        plan: &crate::kernels::attention::Plan,
        compute: Compute,
    ) -> Tensor<4> {
        let [b, h, _, dh] = q.dims();
        let device = q.device();
        let (k, v) = match self.slot.as_ref().and_then(|sl| sl.keys_values(b, h, dh)) {
            Some((ks, vs)) => (Tensor::cat(vec![ks, k], 2), Tensor::cat(vec![vs, v], 2)),
            None => (k, v),
        }; // (B, H, M+S, d_h)
        // The extra column: z_h (sink logit), ln n (softmax_n: n · e^0 in the denominator), or
        // ln(n + e^z_h) with both; −inf for none.
        let z = match (&self.slot, &self.spec.normaliser) {
            (Some(Slot::SinkLogit(s)), NormaliserConfig::SoftmaxN { n }) if *n > 0.0 => {
                (s.sink_logit.val().exp() + *n).log()
            }
            (Some(Slot::SinkLogit(s)), _) => s.sink_logit.val(),
            (_, NormaliserConfig::SoftmaxN { n }) => {
                Tensor::full([h], (*n as f32).ln(), &device) // ln 0 = −inf: none
            }
            _ => Tensor::full([h], f32::NEG_INFINITY, &device),
        }; // (H)
        let out = match compute {
            None => crate::kernels::attention::forward(q, k, v, z, plan), // (B, H, Q, d_h)
            Some(dt) => {
                crate::kernels::attention::forward(q.cast(dt), k.cast(dt), v.cast(dt), z, plan)
                    .cast(burn::tensor::FloatDType::F32)
            }
        };
        if self.spec.row_scale != 1.0 {
            out * self.spec.row_scale
        } else {
            out
        }
    }

    /// [`Self::mix`] written out: slot keys and values, scores, the sink-logit column, position
    /// and SPA biases, the normaliser, the pattern hook, SPA row scales, shaping, row scale, and
    /// the product with the values.
    fn mix_explicit(
        &self,
        q: Tensor<4>,
        k: Tensor<4>,
        v: Tensor<4>,
        ctx: &Ctx,
        tap: &mut Option<&mut Tap<'_>>,
        frame: Frame,
    ) -> Tensor<4> {
        let [b, h, nq, dh] = q.dims();
        let s = k.dims()[2];
        let c = ctx.compute;
        let slot_kv = self.slot.as_ref().and_then(|sl| sl.keys_values(b, h, dh));
        let (k_all, v_all) = match slot_kv {
            Some((ks, vs)) => (Tensor::cat(vec![ks, k], 2), Tensor::cat(vec![vs, v], 2)),
            None => (k, v),
        }; // (B, H, M+S, d_h)
        // Scale q (B, H, Q, d_h) rather than the (B, H, Q, C) scores: same maths, fewer flops.
        let mut scores = matmul_in(q / (dh as f64).sqrt(), k_all.swap_dims(2, 3), c); // (B, H, Q, M+S)
        let sink_column = self.slot.as_ref().and_then(|sl| sl.logit_column(b, h, nq));
        let has_sink_column = sink_column.is_some();
        if let Some(z) = sink_column {
            scores = Tensor::cat(vec![z, scores], 3); // (B, H, Q, C): the sink column first
        }
        if let Some(bias) = &ctx.bias {
            scores = scores + bias.clone();
        }
        if let Some(g) = &self.spa_bias {
            // + Γ_l (1, 1, Q, S)
            scores = scores + g.val().slice([ctx.q_start..s, 0..s]).unsqueeze::<4>();
        }
        let cols = scores.dims()[3];
        let w = self.normalise(scores, ctx.hidden.clone().expand([b, h, nq, cols])); // (B, H, Q, C)
        let slots = Frame {
            slot_cols: cols - s,
            ..frame
        };
        let w = tap_heads(tap, HeadSite::Pattern, w, slots); // hook pattern
        let w = if has_sink_column {
            w.narrow(3, 1, cols - 1) // the sink logit's value is 0
        } else {
            w
        };
        let w = match &self.spa_scale {
            Some(dl) => w * dl.val().slice(ctx.q_start..s).reshape([1, 1, nq, 1]), // D_l A
            None => w,
        };
        let w = match (&self.shaping, &ctx.shaping) {
            (Some(sh), Some((eye, uniform))) => sh.apply(w, eye, uniform),
            _ => w,
        };
        let w = if self.spec.row_scale != 1.0 {
            w * self.spec.row_scale
        } else {
            w
        };
        matmul_in(w, v_all, c) // (B, H, Q, d_h)
    }

    /// Stage 3: the weighted sum (B, H, Q, d_h) → (B, Q, d): the slot's value bias, the output
    /// gate (computed from the block input `u`), hooked (z), heads concatenated, W_O.
    fn output(
        &self,
        mut out: Tensor<4>,
        u: Tensor<3>,
        ctx: &Ctx,
        tap: &mut Option<&mut Tap<'_>>,
        frame: Frame,
    ) -> Tensor<3> {
        let [b, h, nq, dh] = out.dims();
        let d = h * dh;
        let c = ctx.compute;
        if let Some(sl) = &self.slot {
            out = sl.add_value_bias(out);
        }
        if let Some(g) = &self.gate {
            let g4 = g.values(u, h, c); // (B, H, Q, 1) per head or (B, H, Q, d_h)
            let g4 = tap_heads(tap, HeadSite::Gate, g4, frame); // hook gate
            out = out * g4;
        }
        let out = tap_heads(tap, HeadSite::Z, out, frame); // hook z (B, H, Q, d_h)
        let out = out.swap_dims(1, 2).reshape([b, nq, d]); // (B, Q, d): heads concatenated
        match &self.wo {
            Some(wo) => wo.forward_in(out, c),
            None => out,
        }
    }
}

/// Scalable-Softmax's factor `σ_h ln n_i` (1, H or 1, Q, 1): n_i the key columns query row i
/// may see (`ctx.hidden` false: slot keys, sink tokens and the real keys of its mask, in
/// cache coordinates when decoding), σ (H) or (1).
fn ssmax_factor(sigma: &Param<Tensor<1>>, ctx: &Ctx) -> Tensor<4> {
    let n = ctx.hidden.clone().bool_not().float().sum_dim(3); // (1, 1, Q, 1)
    let heads = sigma.dims()[0];
    sigma.val().reshape([1, heads, 1, 1]) * n.clamp_min(1.0).log()
}
