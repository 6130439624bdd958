//! `[model.attention]`: the one attention module's axes (normaliser, slot, gate, mask, kernel,
//! shaping, value/output parameterisation, U-SPA / E-SPA), each a closed enum.

use super::model::{Gain, one, trained_one};
use serde::{Deserialize, Serialize};

/// `[model.attention]`: the one attention module and its axes of variation (docs/reference.md §1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AttentionConfig {
    /// How weights are computed when they are not needed (training, eval loss).
    pub kernel: AttentionKernel,
    /// What turns scores into attention weights.
    pub normaliser: NormaliserConfig,
    /// Multiply every attention row by α after the normaliser (rows then sum to α).
    pub row_scale: f64,
    /// An extra place where attention mass can go (sink logit, KV/K/V bias, memory K/V).
    pub slot: SlotConfig,
    /// Sigmoid output gate after attention, before W_O.
    pub gate: GateConfig,
    pub mask: MaskConfig,
    /// Init of W_Q: the common normal init, or exactly 0 (shaped attention, U-SPA / E-SPA:
    /// attention then does not depend on the input at init).
    pub query_init: QueryInit,
    /// What is done to the attention matrix after the normaliser (docs/reference.md §3.1).
    pub shaping: ShapingConfig,
    /// How W_V and W_O are parameterised (dense, reparameterised, or removed).
    pub value_output: ValueOutputConfig,
    /// U-SPA / E-SPA: a fixed logit bias Γ_l and output rescaling D_l per layer, built at init
    /// so that the token kernel follows a non-collapsing target (docs/reference.md §3.3).
    pub spa: SpaConfig,
}

impl Default for AttentionConfig {
    fn default() -> Self {
        Self {
            kernel: AttentionKernel::default(),
            normaliser: NormaliserConfig::default(),
            row_scale: 1.0,
            slot: SlotConfig::default(),
            gate: GateConfig::default(),
            mask: MaskConfig::default(),
            query_init: QueryInit::default(),
            shaping: ShapingConfig::default(),
            value_output: ValueOutputConfig::default(),
            spa: SpaConfig::default(),
        }
    }
}

/// Init of the query projection W_Q.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum QueryInit {
    /// N(0, init_std), like every other matrix.
    #[default]
    Normal,
    /// Exactly 0 (the draw is still taken from the init stream, so the other weights match the
    /// normal-init model of the same seed).
    Zero,
}

/// What is done to each head's attention matrix A (after the normaliser, before the row scale
/// and the values). α, β, γ are per head (parameters `attn.shape_alpha`, `attn.shape_beta`,
/// `attn.shape_gamma`, shape [H]); never weight-decayed by `matrices_only`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ShapingConfig {
    None {},
    /// Value-SkipInit: `A ← α I + β A` (α = 1, β = 0 at init: every token keeps its own value).
    ValueSkipinit {
        #[serde(default = "one")]
        alpha: f64,
        #[serde(default)]
        beta: f64,
        #[serde(default = "yes")]
        trainable: bool,
    },
    /// Shaped attention (Noci et al.): `A ← α I + β A − γ C`, C the uniform attention over the
    /// visible keys (causal: `C_ij = 1/i`). With W_Q = 0 and α = β = γ = 1, A = C at init and
    /// the shaped matrix is the identity.
    Shaped {
        #[serde(default = "one")]
        alpha: f64,
        #[serde(default = "one")]
        beta: f64,
        #[serde(default = "one")]
        gamma: f64,
        #[serde(default = "yes")]
        trainable: bool,
    },
}

impl Default for ShapingConfig {
    fn default() -> Self {
        ShapingConfig::None {}
    }
}

/// The fixed matrix of a reparameterised weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WInit {
    Identity,
    /// A random orthogonal matrix (QR of a Gaussian draw, from the variant init stream).
    Orthogonal,
}

/// How W_V and W_O are parameterised.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ValueOutputConfig {
    /// Ordinary matrices, N(0, init_std).
    Dense {},
    /// `W = α_W W_init + β_W ΔW` for both W_V and W_O: W_init a fixed constant (`wv.w_init`,
    /// saved, never trained), ΔW trainable and zero-initialised (`wv.weight`), α_W and β_W
    /// scalar gains (`wv.alpha`, `wv.beta`).
    Reparam {
        init: WInit,
        #[serde(default = "trained_one")]
        alpha: Gain,
        #[serde(default = "trained_one")]
        beta: Gain,
    },
    /// No W_V and no W_O (both the identity: each head reads and writes its own slice of the
    /// residual stream), except that the first layer keeps `W_V = I + ΔW` with ΔW trainable and
    /// zero-initialised when `first_layer_value` (SAS).
    Identity {
        #[serde(default = "yes")]
        first_layer_value: bool,
    },
}

impl Default for ValueOutputConfig {
    fn default() -> Self {
        ValueOutputConfig::Dense {}
    }
}

/// Signal-propagation-preserving attention (He et al. 2023). Layer l of L gets a fixed logit
/// bias Γ_l (`attn.spa_bias`, [ctx, ctx]) and output rescaling D_l (`attn.spa_scale`, [ctx]),
/// so that at init (W_Q = 0) attention is `A_l = L_l L_{l−1}⁻¹` and the token kernel follows
/// `Σ_l = A_l Σ_{l−1} A_lᵀ` through the targets below (Σ_0 = I).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SpaConfig {
    None {},
    /// `Σ_l = (1 − ρ_l) I + ρ_l 11ᵀ`, schedule `1 − ρ_l = (1 − ρ_L)^{l/L}` (sinklab's choice,
    /// the U-SPA analogue of E-SPA's), `rho` = ρ_L.
    USpa {
        rho: f64,
    },
    /// `(Σ_l)_ij = exp(−γ_l |i − j|)`, schedule `1 − e^{−2γ_l} = (1 − e^{−2γ_L})^{l/L}`,
    /// `gamma` = γ_L.
    ESpa {
        gamma: f64,
    },
}

impl SpaConfig {
    /// The target kernel, None for `none`.
    pub fn target(&self) -> Option<crate::spa::Target> {
        match *self {
            SpaConfig::None {} => None,
            SpaConfig::USpa { rho } => Some(crate::spa::Target::Uniform { rho }),
            SpaConfig::ESpa { gamma } => Some(crate::spa::Target::Exponential { gamma }),
        }
    }
}

impl Default for SpaConfig {
    fn default() -> Self {
        SpaConfig::None {}
    }
}

/// How attention is computed when attention weights are not needed (training, eval loss).
/// The probe path (metrics) always materialises the weights with the hand-written code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttentionKernel {
    /// Hand-written: scores, `-inf` mask, normaliser, weighted sum.
    Manual,
    /// The fused attention kernel (`crate::kernels::attention`: tiles with an online softmax,
    /// forward and backward, without the T × T weights; same maths, different rounding). It
    /// covers softmax, softmax_n and Scalable-Softmax with every slot, mask, gate, ALiBi and
    /// row scale; on any other
    /// model, a backend without the kernel or mixed precision on the CPU the explicit path
    /// runs and `check` / `train` say why.
    #[default]
    Fused,
}

/// Bias of the unnormalised sigmoid: a number, or `"-ln(T)"` (−ln ctx, Apple's default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SigmoidBias {
    Value(f64),
    Named(String),
}

impl Default for SigmoidBias {
    fn default() -> Self {
        SigmoidBias::Value(0.0)
    }
}

impl SigmoidBias {
    pub const NEG_LN_T: &'static str = "-ln(T)";
    /// The bias for training context `ctx`; `None` for an unknown name.
    pub fn resolve(&self, ctx: usize) -> Option<f64> {
        match self {
            SigmoidBias::Value(v) => Some(*v),
            SigmoidBias::Named(s) if s == Self::NEG_LN_T => Some(-(ctx as f64).ln()),
            SigmoidBias::Named(_) => None,
        }
    }
}

/// Feature map φ of a linear-kernel attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FeatureMap {
    /// φ(x) = x.
    Identity,
    /// φ(x) = elu(x) + 1.
    Elu1,
    /// φ(x) = relu(x W1) W2, one (d_h × d_h, d_h × d_h) MLP per layer shared by the heads.
    Mlp,
}

/// Row normaliser of a linear-kernel attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelNorm {
    /// Weights are the kernel values.
    None,
    /// Divide row i by `max(|Σ_j s_ij|, 1)`.
    MaxAbsSum,
    /// Divide row i by `Σ_j s_ij + 1e-8` (Gu et al.'s code; meant for non-negative feature maps
    /// such as elu+1, where the row sum is positive).
    Sum,
}

/// What turns scores `s_ij = q_i·k_j/sqrt(d_h) + bias_ij` into attention weights
/// (docs/reference.md §1.1). Masked entries are exactly 0 for every normaliser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum NormaliserConfig {
    /// `exp(s_ij) / Σ_j exp(s_ij)`.
    Softmax {},
    /// `exp(s_ij) / (n + Σ_j exp(s_ij))`; n = 1 is softmax-off-by-one. Stabilised with
    /// `m = max(row max, 0)`: `exp(s − m) / (n·exp(−m) + Σ exp(s − m))`.
    SoftmaxN { n: f64 },
    /// `σ(s_ij + b)`, no row normalisation.
    Sigmoid {
        #[serde(default)]
        bias: SigmoidBias,
    },
    /// `σ(s_ij) / Σ_j σ(s_ij)`.
    SigmoidNormalised {},
    /// `elu(s_ij) + 1`, no row normalisation.
    Elu1 {},
    /// `(elu(s_ij) + 1) / Σ_j (elu(s_ij) + 1)`.
    Elu1Normalised {},
    /// `ReLU(s_ij) / n_i`, n_i = the keys query i sees (i + 1 under the causal mask): Guo et al.
    /// (2024)'s ReLU attention, which solves Bigram-Backcopy without a sink. Rows do not sum to 1.
    Relu {},
    /// `φ(q_i)·φ(k_j)/sqrt(d_h)`, optionally divided by `max(|Σ_j|, 1)` or by `Σ_j + 1e-8`
    /// (Gu et al. Table 6 and their code).
    Linear {
        feature_map: FeatureMap,
        normaliser: KernelNorm,
    },
    /// Softpick (Zuhri, Fuadi and Aji 2025): `ReLU(e^{s_ij} − 1) / (Σ_j |e^{s_ij} − 1| + ε)`
    /// over the visible keys, computed with `m = max(row max, 0)` as
    /// `ReLU(e^{s−m} − e^{−m}) / (Σ |e^{s−m} − e^{−m}| + ε e^{−m})`, which is the formula
    /// exactly and never overflows (docs/reference.md §1.1). Rows sum to at most 1 and can be
    /// all zero (a head that does nothing).
    Softpick {
        #[serde(default = "softpick_eps")]
        eps: f64,
    },
    /// Clipped softmax (Bondarenko, Nagel and Blankevoort 2023):
    /// `clip((ζ − γ) softmax(s) + γ, 0, 1)`; γ < 0 lets a weight be exactly 0 and ζ > 1
    /// exactly 1; the gradient is 0 where a weight is clipped.
    ClippedSoftmax {
        #[serde(default = "clipped_gamma")]
        gamma: f64,
        #[serde(default = "one")]
        zeta: f64,
    },
    /// Scalable-Softmax, SSMax (Nakanishi 2025): `softmax((σ ln n_i) s_ij)` with n_i the keys
    /// query i sees (real tokens, sink tokens and slot keys it may attend to) and σ a learned
    /// scale per layer (`per_head = false`) or per layer and head (parameter
    /// `attn.ssmax_scale`, never weight-decayed by `matrices_only`). Computed as a per-row,
    /// per-head scale of q before the scores, so the fused kernels run it unchanged. `init`
    /// defaults to `1 / ln(model.ctx)` (sinklab's choice: softmax at the training length).
    ScalableSoftmax {
        #[serde(default = "yes")]
        per_head: bool,
        init: f64,
        #[serde(default = "yes")]
        trainable: bool,
    },
}

/// Softpick's ε: the naive reference code's 1e-8 (the FA2-style kernel uses 1e-6).
fn softpick_eps() -> f64 {
    1e-8
}

/// Clipped softmax's γ: −0.025 (Bondarenko et al.'s BERT setting; their OPT runs use
/// γ = −α/T with α = 12, T = 512, i.e. −0.0234).
fn clipped_gamma() -> f64 {
    -0.025
}

/// SSMax's default initial scale for a training context of `ctx` tokens: `1 / ln ctx`, so that
/// a query that sees the whole context starts as plain softmax.
pub fn ssmax_init(ctx: usize) -> f64 {
    1.0 / (ctx.max(2) as f64).ln()
}

impl Default for NormaliserConfig {
    fn default() -> Self {
        NormaliserConfig::Softmax {}
    }
}

impl NormaliserConfig {
    /// Each row is divided by a sum over the row (the softmax family, softpick, clipped
    /// softmax, normalised sigmoid and elu+1), so an extra logit column takes mass from the
    /// real keys.
    pub fn is_normalised(&self) -> bool {
        match self {
            NormaliserConfig::Softmax {}
            | NormaliserConfig::SoftmaxN { .. }
            | NormaliserConfig::SigmoidNormalised {}
            | NormaliserConfig::Elu1Normalised {}
            | NormaliserConfig::Softpick { .. }
            | NormaliserConfig::ClippedSoftmax { .. }
            | NormaliserConfig::ScalableSoftmax { .. } => true,
            NormaliserConfig::Sigmoid { .. }
            | NormaliserConfig::Elu1 {}
            | NormaliserConfig::Relu {}
            | NormaliserConfig::Linear { .. } => false,
        }
    }
    /// Works on logits `s_ij` (so position biases and a sink logit apply).
    pub fn uses_logits(&self) -> bool {
        !matches!(self, NormaliserConfig::Linear { .. })
    }
}

/// The fixed value vector of a K bias.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum KBiasValue {
    /// v* = 0.
    Zero {},
    /// v* = m·e1.
    E1 { m: f64 },
    /// v* = m/sqrt(d_h)·1.
    Ones { m: f64 },
}

/// An extra key (and value) every query can attend to, besides the real tokens
/// (docs/reference.md §1.2). Slot keys are position-free (added after RoPE, no position bias) and never
/// masked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SlotConfig {
    None {},
    /// A learned per-head logit z_h appended as an extra column of the scores (not divided by
    /// sqrt(d_h)), value 0, dropped after the normaliser (gpt-oss).
    SinkLogit {
        #[serde(default)]
        init: f64,
        #[serde(default = "yes")]
        trainable: bool,
    },
    /// Learnable k*, v* prepended to K and V (Gu et al. Table 4); per head `[H, d_h]` or shared
    /// `[d_h]`; init N(0, init_std).
    KvBias {
        #[serde(default)]
        shared: bool,
        #[serde(default = "default_slot_std")]
        init_std: f64,
    },
    /// Learnable k* with a fixed v* (Gu et al. Tables 5, 13). With `learnable_dims = d_a`, only
    /// the first d_a dimensions of k* are parameters, the rest are 0.
    KBias {
        #[serde(default)]
        shared: bool,
        #[serde(default = "default_slot_std")]
        init_std: f64,
        value: KBiasValue,
        #[serde(default)]
        learnable_dims: Option<usize>,
        /// A fixed k* (all zero) is what softmax_n with n = 1 computes; `trainable = false`
        /// expresses that and cannot be combined with `learnable_dims`.
        #[serde(default = "yes")]
        trainable: bool,
    },
    /// `out = A V + v*` per head (no extra key): does not move the sink (Gu et al.).
    VBias {
        #[serde(default)]
        shared: bool,
        #[serde(default = "default_slot_std")]
        init_std: f64,
    },
    /// N learned key/value pairs per head (x-transformers `num_mem_kv`), init N(0, init_std).
    MemoryKv {
        n: usize,
        #[serde(default = "default_slot_std")]
        init_std: f64,
    },
}

fn yes() -> bool {
    true
}
fn default_slot_std() -> f64 {
    0.02
}

impl Default for SlotConfig {
    fn default() -> Self {
        SlotConfig::None {}
    }
}

impl SlotConfig {
    /// Columns the slot adds in front of the attention weights (the sink logit, a KV/K-bias
    /// key, memory keys).
    pub fn slot_columns(&self) -> usize {
        match self {
            SlotConfig::None {} | SlotConfig::VBias { .. } => 0,
            SlotConfig::SinkLogit { .. } | SlotConfig::KvBias { .. } | SlotConfig::KBias { .. } => {
                1
            }
            SlotConfig::MemoryKv { n, .. } => *n,
        }
    }

    /// Of [`Self::slot_columns`], those that are an extra logit (the sink logit's column, value
    /// 0) rather than a key.
    pub fn logit_columns(&self) -> usize {
        match self {
            SlotConfig::SinkLogit { .. } => 1,
            SlotConfig::None {}
            | SlotConfig::VBias { .. }
            | SlotConfig::KvBias { .. }
            | SlotConfig::KBias { .. }
            | SlotConfig::MemoryKv { .. } => 0,
        }
    }
}

/// Output gate `out_h ← out_h ⊙ g` after attention, before W_O; every gate reads the block's
/// attention input u, the same (normed) input as W_Q (docs/reference.md §1.2).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GateConfig {
    None {},
    /// Qwen gated attention, one gate per head: `g = σ(u W_g)`, W_g (d, H).
    Headwise {},
    /// Qwen gated attention, one gate per output element: W_g (d, d).
    Elementwise {},
    /// Bondarenko et al.'s conditional per-token gate: head h reads its own slice of u,
    /// `g_h = σ(u[h·d_h .. (h+1)·d_h] · w_h + b_h)`, w (H, d_h) from the variant stream, b_h
    /// = logit(`init`) so that every gate starts at `init` (their 0.25).
    PerToken {
        #[serde(default = "quarter")]
        init: f64,
    },
    /// The sparse head gate of modded-nanogpt's record of 2025-08-23: `g_h = σ(u[:k] · w_h)` on
    /// the first k = `dims` dimensions of u, W (k, H) zero-initialised (every gate 0.5), no bias.
    Sparse {
        #[serde(default = "twelve")]
        dims: usize,
    },
}

fn quarter() -> f64 {
    0.25
}
fn twelve() -> usize {
    12
}

impl Default for GateConfig {
    fn default() -> Self {
        GateConfig::None {}
    }
}

/// Which keys a query sees (1-based prose; query i, key j, both real tokens). Sink tokens and
/// slots are always visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum MaskConfig {
    /// j ≤ i.
    Causal {},
    /// Prefix-LM: j ≤ i or j ≤ p (the first p tokens are seen bidirectionally); the loss on the
    /// first p − 1 targets is ignored.
    Prefix { p: usize },
    /// i − w < j ≤ i: each query sees w keys including itself.
    SlidingWindow { w: usize },
    /// j ≤ i and (i − w < j or j ≤ sinks): the window plus the first `sinks` tokens
    /// (StreamingLLM's train-time form).
    SinksWindow { sinks: usize, w: usize },
}

impl Default for MaskConfig {
    fn default() -> Self {
        MaskConfig::Causal {}
    }
}

impl MaskConfig {
    /// May query `i` see key `j` (0-based real-token positions)?
    pub fn allows(&self, i: usize, j: usize) -> bool {
        match *self {
            MaskConfig::Causal {} => j <= i,
            MaskConfig::Prefix { p } => j <= i || j < p,
            MaskConfig::SlidingWindow { w } => j <= i && i < j + w,
            MaskConfig::SinksWindow { sinks, w } => j <= i && (i < j + w || j < sinks),
        }
    }
    /// Targets (0-based, target t predicts token t + 1) whose loss is ignored.
    pub fn ignored_targets(&self) -> usize {
        match *self {
            MaskConfig::Prefix { p } => p.saturating_sub(1),
            _ => 0,
        }
    }
}
