//! Experiment files: a strict, typed TOML schema.
//!
//! An experiment file is plain data. It may name a `base = "other.toml"` (resolved relative to
//! the file) that it deep-merges over; `--set a.b.c=value` overrides are applied last. Tables
//! that carry a `kind` key (the tagged enums below) are replaced wholesale when an override
//! changes the `kind`, so that switching a variant never inherits the old variant's fields.
//!
//! Parsing never stops at the first problem: [`load`] collects every unknown key, wrong type,
//! out-of-range value and impossible combination, each with the file, the TOML path, what was
//! found and what would be valid ([`ConfigErrors`]). Nothing falls back to a default silently:
//! defaults exist only for keys that are absent, and `resolved.toml` in every run directory
//! records the full resolved configuration.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};

/// One experiment, fully resolved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Experiment {
    #[serde(default)]
    pub run: RunConfig,
    #[serde(default)]
    pub data: DataConfig,
    #[serde(default)]
    pub model: ModelConfig,
    #[serde(default)]
    pub optim: OptimConfig,
    #[serde(default)]
    pub train: TrainConfig,
    #[serde(default)]
    pub metrics: MetricsConfig,
}

/// `[run]`: identity and placement of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Run name; the run directory is `out_dir/name`.
    #[serde(default = "default_name")]
    pub name: String,
    /// Parent directory of run directories (relative to the current directory).
    #[serde(default = "default_out_dir")]
    pub out_dir: PathBuf,
    /// Seed for parameter init, data sampling and probe selection.
    #[serde(default)]
    pub seed: u64,
    /// Backend device: `flex` (CPU), `wgpu`, `cuda` (each needs its cargo feature).
    #[serde(default)]
    pub device: DeviceKind,
    /// Data parallelism over this many GPUs of `device` (cuda: devices 0..N; wgpu: discrete
    /// GPUs 0..N): each takes its share of the micro-batches, gradients are summed on device 0.
    /// The CPU backend already spreads micro-batches over every core, so `flex` needs 1.
    #[serde(default = "default_devices")]
    pub devices: usize,
}

fn default_devices() -> usize {
    1
}

fn default_name() -> String {
    "run".into()
}
fn default_out_dir() -> PathBuf {
    "runs".into()
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            name: default_name(),
            out_dir: default_out_dir(),
            seed: 0,
            device: DeviceKind::default(),
            devices: 1,
        }
    }
}

/// Which Burn backend runs the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// Burn `flex`: pure-Rust CPU backend (cargo feature `flex`, the default).
    #[default]
    Flex,
    /// Burn `wgpu` (cargo feature `wgpu`): any Vulkan/Metal/DX12 device, including Mesa's
    /// software Vulkan (lavapipe).
    Wgpu,
    /// Burn `cuda` (cargo feature `cuda`): NVIDIA GPUs.
    Cuda,
}

impl DeviceKind {
    pub const ALL: [&'static str; 3] = ["flex", "wgpu", "cuda"];
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Flex => "flex",
            DeviceKind::Wgpu => "wgpu",
            DeviceKind::Cuda => "cuda",
        }
    }
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "flex" => Some(Self::Flex),
            "wgpu" => Some(Self::Wgpu),
            "cuda" => Some(Self::Cuda),
            _ => None,
        }
    }
}

/// `[data]`: corpus, tokenizer and the data-distribution controls of Gu et al. (ICLR 2025).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// `"embedded"` (the corpus compiled into sinklab, `datasets/embedded`) or a path to a corpus
    /// directory with a `manifest.json` (see `datasets/README.md`), relative to the current
    /// directory.
    #[serde(default = "default_corpus")]
    pub corpus: String,
    #[serde(default)]
    pub tokenizer: TokenizerConfig,
    /// Prepend a BOS token to every training and probe sequence.
    #[serde(default)]
    pub bos: bool,
    /// Fraction of every domain's token stream (its tail) held out for validation.
    #[serde(default = "default_val_fraction")]
    pub val_fraction: f64,
    /// Use only the first `token_budget` training tokens (split over domains by the mixture
    /// weights), so that data repeats. Absent: the whole training split.
    #[serde(default)]
    pub token_budget: Option<u64>,
    /// Sampling weight per domain (non-negative, need not sum to 1). Absent: every domain with
    /// weight proportional to its size. Domains not named get weight 0.
    #[serde(default)]
    pub mixture: Option<std::collections::BTreeMap<String, f64>>,
    /// Replace the tokens at these 1-based positions of every training sequence by uniformly
    /// random (non-special) tokens; the loss on predicting them is ignored.
    #[serde(default)]
    pub random_tokens: Vec<usize>,
    /// Put a fixed token at a 1-based position of every training sequence.
    #[serde(default)]
    pub fixed_token: Option<FixedToken>,
    /// Where prepared token shards are cached (keyed by a hash of what determines them).
    #[serde(default = "default_cache_dir")]
    pub cache_dir: PathBuf,
}

fn default_corpus() -> String {
    "embedded".into()
}
fn default_val_fraction() -> f64 {
    0.05
}
fn default_cache_dir() -> PathBuf {
    "runs/_cache".into()
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            corpus: default_corpus(),
            tokenizer: TokenizerConfig::default(),
            bos: false,
            val_fraction: default_val_fraction(),
            token_budget: None,
            mixture: None,
            random_tokens: vec![],
            fixed_token: None,
            cache_dir: default_cache_dir(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FixedToken {
    /// 1-based position in the sequence (position 1 is the BOS slot when `bos = true`).
    pub position: usize,
    /// Token id placed there.
    pub token: u32,
}

/// Tokenizer choice. Special tokens `<|bos|>` and `<|endoftext|>` are always added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum TokenizerConfig {
    /// Raw UTF-8 bytes: 256 ids plus the 2 special tokens (vocabulary 258).
    Byte {},
    /// Byte-level BPE trained on the training split with the `tokenizers` crate.
    Bpe { vocab_size: usize },
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig::Bpe { vocab_size: 2048 }
    }
}

/// `[model]`: the causal LM. Every axis of variation is one closed enum (REFERENCE §1–2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    #[serde(default = "default_d_model")]
    pub d_model: usize,
    #[serde(default = "default_n_layers")]
    pub n_layers: usize,
    #[serde(default = "default_n_heads")]
    pub n_heads: usize,
    /// Hidden width of the feed-forward network.
    #[serde(default = "default_d_ff")]
    pub d_ff: usize,
    /// Training context length (tokens per sequence, BOS included; sink tokens not included).
    #[serde(default = "default_ctx")]
    pub ctx: usize,
    #[serde(default)]
    pub norm: NormConfig,
    /// A norm on the embedding output, before the first block (SAS-P "no-norm" keeps only this
    /// LayerNorm, with `norm = { kind = "none" }`).
    #[serde(default)]
    pub input_norm: Option<NormConfig>,
    #[serde(default)]
    pub ffn: FfnConfig,
    #[serde(default)]
    pub positions: PositionsConfig,
    /// How the residual stream, norms and sub-blocks are wired.
    #[serde(default)]
    pub block: BlockConfig,
    #[serde(default)]
    pub attention: AttentionConfig,
    /// Output head: its own matrix, or the transposed token embedding.
    #[serde(default)]
    pub head: HeadKind,
    /// Biases in every linear layer (q, k, v, o, gate, FFN, untied head), initialised to 0.
    #[serde(default)]
    pub bias: bool,
    /// Learnable sink tokens prepended to every sequence (StreamingLLM); their outputs and
    /// losses are dropped.
    #[serde(default)]
    pub sink_tokens: usize,
    /// Std of the normal init of every matrix. Absent: `sqrt(2 / (5 d_model))`.
    #[serde(default)]
    pub init_std: Option<f64>,
}

fn default_d_model() -> usize {
    128
}
fn default_n_layers() -> usize {
    4
}
fn default_n_heads() -> usize {
    4
}
fn default_d_ff() -> usize {
    384
}
fn default_ctx() -> usize {
    128
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            d_model: default_d_model(),
            n_layers: default_n_layers(),
            n_heads: default_n_heads(),
            d_ff: default_d_ff(),
            ctx: default_ctx(),
            norm: NormConfig::default(),
            input_norm: None,
            ffn: FfnConfig::default(),
            positions: PositionsConfig::default(),
            block: BlockConfig::default(),
            attention: AttentionConfig::default(),
            head: HeadKind::default(),
            bias: false,
            sink_tokens: 0,
            init_std: None,
        }
    }
}

impl ModelConfig {
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads
    }
    pub fn resolved_init_std(&self) -> f64 {
        self.init_std
            .unwrap_or_else(|| (2.0 / (5.0 * self.d_model as f64)).sqrt())
    }
}

/// Normalisation layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum NormConfig {
    /// `x / sqrt(mean(x²) + eps) · g`.
    RmsNorm { eps: f64 },
    /// `(x − mean x) / sqrt(var x + eps) · g + b` (biased variance, as PyTorch).
    LayerNorm { eps: f64 },
    /// No normalisation anywhere in the blocks and no final norm (skipless "no-norm" models;
    /// see `input_norm`).
    None {},
}

impl Default for NormConfig {
    fn default() -> Self {
        NormConfig::RmsNorm { eps: 1e-5 }
    }
}

/// Feed-forward network: `W_down(act(x W_up))`, or the gated `W_down(act(x W_gate) ⊙ x W_up)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FfnConfig {
    Relu {},
    /// GeLU, exact (erf) form.
    Gelu {},
    Silu {},
    /// `silu(x W_gate) ⊙ x W_up`.
    Swiglu {},
    /// `gelu(x W_gate) ⊙ x W_up`.
    Geglu {},
    /// `relu(x W_gate) ⊙ x W_up`.
    Reglu {},
    /// No feed-forward sub-block at all (attention-only stacks, e.g. for signal propagation).
    None {},
}

impl Default for FfnConfig {
    fn default() -> Self {
        FfnConfig::Swiglu {}
    }
}

/// Position information.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum PositionsConfig {
    /// No position information (causal masking alone).
    Nope {},
    /// Fixed sinusoids added to the token embedding (Vaswani et al.: sin on even, cos on odd
    /// dimensions, wavelengths 10000^(2i/d)).
    Sinusoidal {},
    /// A learned (ctx, d) table added to the token embedding.
    Learned {},
    /// ALiBi: per-head bias `−m_h |i − j|` on the logits, standard slopes.
    Alibi {},
    /// Rotary embeddings on q and k, NeoX/HF "rotate halves" pair convention: of the first
    /// `r = 2·floor(fraction·d_head/2)` dimensions, dimension i is paired with i + r/2 (Burn's
    /// `RotaryEncoding` pairs adjacent dimensions instead); the rest are not rotated.
    Rope {
        base: f64,
        #[serde(default = "default_rope_fraction")]
        fraction: f64,
    },
    /// T5-style learned relative-position buckets (bidirectional bucketing, one table shared by
    /// all layers). Gu et al.'s "relative" variant added the raw, unlearned bucket index; this
    /// is the learned one.
    Relative {
        #[serde(default = "default_rel_buckets")]
        buckets: usize,
        #[serde(default = "default_rel_max_distance")]
        max_distance: usize,
    },
}

fn default_rope_fraction() -> f64 {
    1.0
}
fn default_rel_buckets() -> usize {
    32
}
fn default_rel_max_distance() -> usize {
    128
}

impl Default for PositionsConfig {
    fn default() -> Self {
        PositionsConfig::Rope {
            base: 10000.0,
            fraction: 1.0,
        }
    }
}

/// A scalar gain: its initial value and whether it is trained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gain {
    #[serde(default = "one")]
    pub init: f64,
    #[serde(default)]
    pub trainable: bool,
}

fn one() -> f64 {
    1.0
}

impl Default for Gain {
    fn default() -> Self {
        Gain {
            init: 1.0,
            trainable: false,
        }
    }
}

/// General gains of a sequential block (He & Hofmann): `x̂ = α_SA x + β_SA Attn(N(x))`,
/// `out = α_FF x̂ + β_FF MLP(N(x̂))`. All 1 and fixed by default (the plain pre-norm block).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BlockGains {
    #[serde(default)]
    pub alpha_sa: Gain,
    #[serde(default)]
    pub beta_sa: Gain,
    #[serde(default)]
    pub alpha_ff: Gain,
    #[serde(default)]
    pub beta_ff: Gain,
}

/// Gains of a parallel block: `out = α x + β_SA Attn(N(x)) + β_FF MLP(N(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ParallelGains {
    #[serde(default)]
    pub alpha: Gain,
    #[serde(default)]
    pub beta_sa: Gain,
    #[serde(default)]
    pub beta_ff: Gain,
}

/// Block wiring (REFERENCE §2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum BlockConfig {
    /// `x = α_SA x + β_SA Attn(N1(x)); x = α_FF x + β_FF MLP(N2(x))`; final norm before the head.
    PreNorm {
        #[serde(default)]
        gains: BlockGains,
    },
    /// `x = N1(x + Attn(x)); x = N2(x + MLP(x))`; no final norm (as in Gu et al.).
    PostNorm {},
    /// `x = α x + β_SA Attn(N1(x)) + β_FF MLP(N1(x))`; final norm before the head.
    Parallel {
        #[serde(default)]
        gains: ParallelGains,
    },
    /// SAS (He & Hofmann): `x̂ = SAS-Attn(N1(x))` (no attention skip: α_SA = 0, β_SA = 1),
    /// `out = x̂ + β_FF MLP(N2(x̂))`. Needs `attention.shaping = shaped` and
    /// `attention.value_output = identity`.
    Sas {
        #[serde(default = "default_sas_beta_ff")]
        beta_ff: Gain,
    },
    /// SAS-P: parallel and skipless, `out = β_SA SAS-Attn(N(x)) + β_FF MLP(N(x))` (α = 0).
    /// Needs `attention.shaping = shaped` and `attention.value_output = identity`.
    SasP {
        #[serde(default = "trained_one")]
        beta_sa: Gain,
        #[serde(default = "default_sas_beta_ff")]
        beta_ff: Gain,
    },
}

fn default_sas_beta_ff() -> Gain {
    Gain {
        init: 0.1,
        trainable: true,
    }
}
fn trained_one() -> Gain {
    Gain {
        init: 1.0,
        trainable: true,
    }
}

impl Default for BlockConfig {
    fn default() -> Self {
        BlockConfig::PreNorm {
            gains: BlockGains::default(),
        }
    }
}

/// Output head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HeadKind {
    /// Its own (d, V) matrix.
    #[default]
    Untied,
    /// The transposed token embedding (GPT-2).
    Tied,
}

/// `[model.attention]`: the one attention module and its axes of variation (REFERENCE §1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttentionConfig {
    /// How weights are computed when they are not needed (training, eval loss).
    #[serde(default)]
    pub kernel: AttentionKernel,
    /// What turns scores into attention weights.
    #[serde(default)]
    pub normaliser: NormaliserConfig,
    /// Multiply every attention row by α after the normaliser (rows then sum to α).
    #[serde(default = "one")]
    pub row_scale: f64,
    /// An extra place where attention mass can go (sink logit, KV/K/V bias, memory K/V).
    #[serde(default)]
    pub slot: SlotConfig,
    /// Sigmoid output gate after attention, before W_O.
    #[serde(default)]
    pub gate: GateConfig,
    #[serde(default)]
    pub mask: MaskConfig,
    /// Init of W_Q: the common normal init, or exactly 0 (shaped attention, U-SPA / E-SPA:
    /// attention then does not depend on the input at init).
    #[serde(default)]
    pub query_init: QueryInit,
    /// What is done to the attention matrix after the normaliser (REFERENCE §3.1).
    #[serde(default)]
    pub shaping: ShapingConfig,
    /// How W_V and W_O are parameterised (dense, reparameterised, or removed).
    #[serde(default)]
    pub value_output: ValueOutputConfig,
    /// U-SPA / E-SPA: a fixed logit bias Γ_l and output rescaling D_l per layer, built at init
    /// so that the token kernel follows a non-collapsing target (REFERENCE §3.3).
    #[serde(default)]
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
    #[default]
    Manual,
    /// Burn's functional `attention` (causal flag; backends may fuse it). Same maths; only for
    /// plain causal softmax attention without slots, position biases or row scale.
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
}

/// What turns scores `s_ij = q_i·k_j/sqrt(d_h) + bias_ij` into attention weights
/// (REFERENCE §1.1). Masked entries are exactly 0 for every normaliser.
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
    /// `φ(q_i)·φ(k_j)/sqrt(d_h)`, optionally divided by `max(|Σ_j|, 1)` (Gu et al. Table 6).
    Linear {
        feature_map: FeatureMap,
        normaliser: KernelNorm,
    },
}

impl Default for NormaliserConfig {
    fn default() -> Self {
        NormaliserConfig::Softmax {}
    }
}

impl NormaliserConfig {
    /// Rows of the weights sum to 1 (before the row scale), possibly with mass on a slot.
    pub fn is_normalised(&self) -> bool {
        matches!(
            self,
            NormaliserConfig::Softmax {}
                | NormaliserConfig::SoftmaxN { .. }
                | NormaliserConfig::SigmoidNormalised {}
                | NormaliserConfig::Elu1Normalised {}
        )
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
/// (REFERENCE §1.2). Slot keys are position-free (added after RoPE, no position bias) and never
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
}

/// Output gate `out_h ← out_h ⊙ σ(x W_g)` after attention, before W_O; W_g reads the same
/// normed input as W_Q (Qwen gated attention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum GateConfig {
    None {},
    /// One gate per head: W_g is (d, H).
    Headwise {},
    /// One gate per output element: W_g is (d, d).
    Elementwise {},
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

/// `[optim]`: AdamW with decoupled weight decay, LR schedule and global-norm clipping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimConfig {
    /// Peak learning rate.
    #[serde(default = "default_lr")]
    pub lr: f64,
    #[serde(default = "default_betas")]
    pub betas: [f64; 2],
    #[serde(default = "default_adam_eps")]
    pub eps: f64,
    #[serde(default = "default_wd")]
    pub weight_decay: f64,
    /// Which parameters weight decay touches.
    #[serde(default)]
    pub decay: DecayPolicy,
    /// Global-norm clipping threshold (over all gradients together). Absent: no clipping.
    #[serde(default = "default_clip")]
    pub grad_clip: Option<f64>,
    #[serde(default)]
    pub schedule: ScheduleConfig,
}

fn default_lr() -> f64 {
    3e-3
}
fn default_betas() -> [f64; 2] {
    [0.9, 0.95]
}
fn default_adam_eps() -> f64 {
    1e-8
}
fn default_wd() -> f64 {
    0.1
}
fn default_clip() -> Option<f64> {
    Some(1.0)
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            lr: default_lr(),
            betas: default_betas(),
            eps: default_adam_eps(),
            weight_decay: default_wd(),
            decay: DecayPolicy::default(),
            grad_clip: default_clip(),
            schedule: ScheduleConfig::default(),
        }
    }
}

/// Weight-decay policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DecayPolicy {
    /// Decay every parameter, norms included (Gu et al.'s code).
    All,
    /// Decay only weight matrices of linear layers (not norms, gains, biases, embeddings or sink
    /// parameters), as in the SAS code.
    #[default]
    MatricesOnly,
}

/// Learning-rate schedule. `warmup` is a number of steps of linear warmup from 0.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScheduleConfig {
    /// Warmup, then constant `lr` (Gu et al.'s "cosine" with min_lr = lr is this).
    Constant { warmup: u64 },
    /// Warmup, then cosine decay from `lr` to `min_lr` at the last step.
    WarmupCosine { warmup: u64, min_lr: f64 },
    /// Warmup, then linear decay from `lr` to `min_lr` at the last step.
    WarmupLinear { warmup: u64, min_lr: f64 },
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig::WarmupCosine {
            warmup: 100,
            min_lr: 3e-4,
        }
    }
}

/// `[train]`: the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Optimizer steps.
    #[serde(default = "default_steps")]
    pub steps: u64,
    /// Tokens per optimizer step (a multiple of `micro_batch × ctx`).
    #[serde(default = "default_batch_tokens")]
    pub batch_tokens: usize,
    /// Sequences per forward/backward pass; gradients are accumulated over
    /// `batch_tokens / (micro_batch × ctx)` passes, which run concurrently on the CPU cores
    /// (one worker per core; the result does not depend on the number of workers).
    #[serde(default = "default_micro_batch")]
    pub micro_batch: usize,
    /// Validation loss every N steps (and at the last step).
    #[serde(default = "default_eval_every")]
    pub eval_every: u64,
    /// Sequences of length ctx used for the validation loss.
    #[serde(default = "default_eval_sequences")]
    pub eval_sequences: usize,
    /// Checkpoint every N steps (and at the last step).
    #[serde(default = "default_ckpt_every")]
    pub checkpoint_every: u64,
    /// Keep only the newest K checkpoints.
    #[serde(default = "default_keep")]
    pub keep_checkpoints: usize,
    /// Write training scalars every N steps.
    #[serde(default = "default_log_every")]
    pub log_every: u64,
}

fn default_steps() -> u64 {
    1000
}
fn default_batch_tokens() -> usize {
    2048
}
fn default_micro_batch() -> usize {
    16
}
fn default_eval_every() -> u64 {
    100
}
fn default_eval_sequences() -> usize {
    64
}
fn default_ckpt_every() -> u64 {
    250
}
fn default_keep() -> usize {
    3
}
fn default_log_every() -> u64 {
    10
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: default_steps(),
            batch_tokens: default_batch_tokens(),
            micro_batch: default_micro_batch(),
            eval_every: default_eval_every(),
            eval_sequences: default_eval_sequences(),
            checkpoint_every: default_ckpt_every(),
            keep_checkpoints: default_keep(),
            log_every: default_log_every(),
        }
    }
}

/// `[metrics]`: sink metrics on a fixed probe set (Gu et al. §3: T = 64, 100 sequences).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Compute the probe metrics every N steps (and at step 0 and the last step).
    #[serde(default = "default_metrics_every")]
    pub every: u64,
    /// Probe sequences drawn from the validation split.
    #[serde(default = "default_probe_sequences")]
    pub probe_sequences: usize,
    /// Probe sequence length T (BOS included when the run uses BOS).
    #[serde(default = "default_probe_len")]
    pub probe_len: usize,
    /// Thresholds ε of Sink_k^ε.
    #[serde(default = "default_eps_grid")]
    pub eps: Vec<f64>,
    /// Report Sink_k for k = 1..=k_max.
    #[serde(default = "default_k_max")]
    pub k_max: usize,
}

fn default_metrics_every() -> u64 {
    50
}
fn default_probe_sequences() -> usize {
    100
}
fn default_probe_len() -> usize {
    64
}
fn default_eps_grid() -> Vec<f64> {
    vec![0.2, 0.3, 0.4, 0.5, 0.8]
}
fn default_k_max() -> usize {
    10
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            every: default_metrics_every(),
            probe_sequences: default_probe_sequences(),
            probe_len: default_probe_len(),
            eps: default_eps_grid(),
            k_max: default_k_max(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// One problem in an experiment file.
#[derive(Debug, Clone, PartialEq)]
pub struct ConfigError {
    pub file: String,
    /// Dotted TOML path, e.g. `model.n_heads`.
    pub path: String,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}: {}", self.file, self.message)
        } else {
            write!(f, "{}: `{}`: {}", self.file, self.path, self.message)
        }
    }
}

/// Every problem found in one or more files.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        writeln!(
            f,
            "{n} error{} in experiment configuration:",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            writeln!(f, "  - {e}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

// ---------------------------------------------------------------------------------------------
// Loading: base inheritance, deep merge, overrides
// ---------------------------------------------------------------------------------------------

/// Read a file and its `base` chain into one merged TOML table.
fn load_merged(path: &Path, chain: &mut Vec<PathBuf>) -> Result<toml::Table, ConfigError> {
    let file = path.display().to_string();
    let err = |path: &str, message: String| ConfigError {
        file: file.clone(),
        path: path.into(),
        message,
    };
    let canonical = path
        .canonicalize()
        .map_err(|e| err("", format!("cannot read file: {e}")))?;
    if chain.contains(&canonical) {
        return Err(err(
            "base",
            "inheritance cycle: this file is its own base".into(),
        ));
    }
    chain.push(canonical);
    let text =
        std::fs::read_to_string(path).map_err(|e| err("", format!("cannot read file: {e}")))?;
    let mut table: toml::Table = toml::from_str(&text)
        .map_err(|e| err("", format!("not valid TOML: {}", e.message().trim())))?;
    match table.remove("base") {
        None => Ok(table),
        Some(toml::Value::String(base)) => {
            let base_path = path.parent().unwrap_or(Path::new(".")).join(&base);
            let mut merged = load_merged(&base_path, chain).map_err(|mut e| {
                if e.path.is_empty() && e.message.starts_with("cannot read") {
                    e = err(
                        "base",
                        format!("base file `{}`: {}", base_path.display(), e.message),
                    );
                }
                e
            })?;
            deep_merge(&mut merged, table);
            Ok(merged)
        }
        Some(other) => Err(err(
            "base",
            format!(
                "found {} `{other}`, expected a string: the path of a base experiment file",
                other.type_str()
            ),
        )),
    }
}

/// Merge `over` into `base`: tables merge key by key, anything else is replaced. A table whose
/// `kind` differs from the base table's `kind` replaces it wholesale.
pub fn deep_merge(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) => {
                let kind_changed = o.get("kind").is_some() && o.get("kind") != b.get("kind");
                if kind_changed {
                    *b = o;
                } else {
                    deep_merge(b, o);
                }
            }
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

/// Apply one `a.b.c=value` override. The value is parsed as a TOML value (`3e-4`, `true`,
/// `[1, 2]`, `{ kind = "nope" }`); anything that is not valid TOML is taken as a string.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> Result<(), String> {
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| format!("--set `{assignment}`: expected KEY=VALUE, e.g. optim.lr=1e-3"))?;
    let key = key.trim();
    let raw = raw.trim();
    if key.is_empty() || key.split('.').any(str::is_empty) {
        return Err(format!(
            "--set `{assignment}`: empty key segment in `{key}`"
        ));
    }
    let value = match toml::from_str::<toml::Table>(&format!("v = {raw}")) {
        Ok(mut t) => t.remove("v").expect("parsed key"),
        Err(_) => toml::Value::String(raw.to_string()),
    };
    let segments: Vec<&str> = key.split('.').collect();
    let mut over = toml::Table::new();
    let mut cursor = &mut over;
    for seg in &segments[..segments.len() - 1] {
        cursor = cursor
            .entry(seg.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("fresh table");
    }
    cursor.insert(segments[segments.len() - 1].to_string(), value);
    deep_merge(table, over);
    Ok(())
}

/// Remove the value at a serde path from a table; returns false when the path does not exist.
fn remove_at(table: &mut toml::Table, path: &[String]) -> bool {
    let Some((last, init)) = path.split_last() else {
        return false;
    };
    let mut cursor = table;
    for seg in init {
        match cursor.get_mut(seg) {
            Some(toml::Value::Table(t)) => cursor = t,
            _ => return false,
        }
    }
    cursor.remove(last).is_some()
}

fn path_segments(path: &serde_path_to_error::Path) -> Vec<String> {
    use serde_path_to_error::Segment;
    path.iter()
        .filter_map(|seg| match seg {
            Segment::Map { key } => Some(key.clone()),
            Segment::Seq { index } => Some(index.to_string()),
            Segment::Enum { .. } | Segment::Unknown => None,
        })
        .collect()
}

/// Rewrite serde's messages in the terms a user of the file needs.
fn explain(message: &str) -> String {
    let m = message.trim();
    if let Some(rest) = m.strip_prefix("unknown variant ") {
        return format!("unknown choice {rest}");
    }
    if let Some(rest) = m.strip_prefix("invalid type: ") {
        let rest = rest
            .replace("expected f64", "expected a number")
            .replace("expected usize", "expected a non-negative integer")
            .replace("expected u64", "expected a non-negative integer")
            .replace("expected u32", "expected a non-negative integer");
        return format!("wrong type: {rest}");
    }
    m.to_string()
}

/// Deserialize a merged table, collecting every structural error: unknown keys, wrong types,
/// unknown enum choices. Each failing key is removed and deserialization retried, so one
/// mistake does not hide the next.
fn deserialize_all(file: &str, mut table: toml::Table) -> Result<Experiment, ConfigErrors> {
    let mut errors = Vec::new();
    let mut removed: Vec<String> = Vec::new();
    for _ in 0..256 {
        let value = toml::Value::Table(table.clone());
        match serde_path_to_error::deserialize::<_, Experiment>(value) {
            Ok(exp) => {
                return if errors.is_empty() {
                    Ok(exp)
                } else {
                    Err(ConfigErrors(errors))
                };
            }
            Err(e) => {
                let mut segs = path_segments(e.path());
                let full_msg = e.inner().to_string();
                let msg = full_msg.lines().next().unwrap_or_default().to_string();
                // serde reports an unknown field at the parent's path; name the field itself.
                if let Some(field) = msg
                    .strip_prefix("unknown field `")
                    .and_then(|r| r.split('`').next())
                {
                    if segs.last().map(String::as_str) != Some(field) {
                        segs.push(field.to_string());
                    }
                    let valid = msg
                        .split_once(", expected ")
                        .map(|(_, v)| v.to_string())
                        .unwrap_or_default();
                    errors.push(ConfigError {
                        file: file.into(),
                        path: segs.join("."),
                        message: format!("unknown key; valid keys here: {valid}"),
                    });
                } else if let Some(field) = msg
                    .strip_prefix("missing field `")
                    .and_then(|r| r.split('`').next())
                {
                    let mut full = segs.clone();
                    full.push(field.to_string());
                    // A required field that was removed because of an earlier error is not a
                    // second mistake. Either way, drop the incomplete table and go on.
                    if !removed.contains(&full.join(".")) {
                        errors.push(ConfigError {
                            file: file.into(),
                            path: full.join("."),
                            message: "missing required key".into(),
                        });
                    }
                } else {
                    errors.push(ConfigError {
                        file: file.into(),
                        path: segs.join("."),
                        message: explain(&msg),
                    });
                }
                removed.push(segs.join("."));
                if !remove_at(&mut table, &segs) {
                    return Err(ConfigErrors(errors));
                }
            }
        }
    }
    Err(ConfigErrors(errors))
}

/// Load an experiment file with its base chain and overrides, and validate it.
pub fn load(path: &Path, overrides: &[String]) -> Result<Experiment, ConfigErrors> {
    let file = path.display().to_string();
    let mut table = load_merged(path, &mut Vec::new()).map_err(|e| ConfigErrors(vec![e]))?;
    let mut errors = Vec::new();
    for o in overrides {
        if let Err(message) = apply_override(&mut table, o) {
            errors.push(ConfigError {
                file: "--set".into(),
                path: String::new(),
                message,
            });
        }
    }
    if !errors.is_empty() {
        return Err(ConfigErrors(errors));
    }
    from_table(&file, table)
}

/// An experiment file merged with its base chain, before deserialization (for sweeps).
pub fn load_table(path: &Path) -> Result<toml::Table, ConfigErrors> {
    load_merged(path, &mut Vec::new()).map_err(|e| ConfigErrors(vec![e]))
}

/// Deserialize and validate a merged experiment table; errors name `file`.
pub fn from_table(file: &str, table: toml::Table) -> Result<Experiment, ConfigErrors> {
    let exp = deserialize_all(file, table)?;
    let problems = exp.validate();
    if problems.is_empty() {
        Ok(exp)
    } else {
        Err(ConfigErrors(
            problems
                .into_iter()
                .map(|(path, message)| ConfigError {
                    file: file.to_string(),
                    path,
                    message,
                })
                .collect(),
        ))
    }
}

/// Parse an experiment from a TOML string (no base, no overrides); used for `resolved.toml`.
pub fn from_str(name: &str, text: &str) -> Result<Experiment, ConfigErrors> {
    let table: toml::Table = toml::from_str(text).map_err(|e| {
        ConfigErrors(vec![ConfigError {
            file: name.into(),
            path: String::new(),
            message: format!("not valid TOML: {}", e.message().trim()),
        }])
    })?;
    let exp = deserialize_all(name, table)?;
    let problems = exp.validate();
    if problems.is_empty() {
        Ok(exp)
    } else {
        Err(ConfigErrors(
            problems
                .into_iter()
                .map(|(path, message)| ConfigError {
                    file: name.into(),
                    path,
                    message,
                })
                .collect(),
        ))
    }
}

/// Rotated dimensions of a head of width `dh` under RoPE with `fraction`: the largest even
/// number ≤ fraction·dh (GPT-NeoX's `rotary_pct`).
pub fn rope_dims(dh: usize, fraction: f64) -> usize {
    let r = (fraction * dh as f64 + 1e-9).floor() as usize;
    (r / 2 * 2).min(dh / 2 * 2)
}

/// The `kind` string of a normaliser, for messages.
pub fn normaliser_name(n: &NormaliserConfig) -> &'static str {
    match n {
        NormaliserConfig::Softmax {} => "softmax",
        NormaliserConfig::SoftmaxN { .. } => "softmax_n",
        NormaliserConfig::Sigmoid { .. } => "sigmoid",
        NormaliserConfig::SigmoidNormalised {} => "sigmoid_normalised",
        NormaliserConfig::Elu1 {} => "elu1",
        NormaliserConfig::Elu1Normalised {} => "elu1_normalised",
        NormaliserConfig::Linear { .. } => "linear",
    }
}

/// The `kind` string of a positions choice, for messages.
pub fn positions_name(p: &PositionsConfig) -> &'static str {
    match p {
        PositionsConfig::Nope {} => "nope",
        PositionsConfig::Sinusoidal {} => "sinusoidal",
        PositionsConfig::Learned {} => "learned",
        PositionsConfig::Alibi {} => "alibi",
        PositionsConfig::Rope { .. } => "rope",
        PositionsConfig::Relative { .. } => "relative",
    }
}

/// `x > bound`, false for NaN (so `!greater(x, b)` also rejects NaN).
fn greater(x: f64, bound: f64) -> bool {
    x > bound
}

impl Experiment {
    /// The fully resolved configuration as TOML (every default written out).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("experiment serialises")
    }

    /// Range and combination checks. Returns (TOML path, message) for every problem.
    pub fn validate(&self) -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> = Vec::new();
        let mut bad = |p: &str, m: String| v.push((p.to_string(), m));
        let m = &self.model;
        let d = &self.data;
        let o = &self.optim;
        let t = &self.train;
        let mt = &self.metrics;

        if self.run.devices == 0 {
            bad("run.devices", "found 0, expected ≥ 1".into());
        } else if self.run.devices > 1 && self.run.device == DeviceKind::Flex {
            bad(
                "run.devices",
                format!(
                    "found {} with device = \"flex\": the CPU backend already runs micro-batches on \
                     every core; use 1, or device = \"cuda\" / \"wgpu\" for several GPUs",
                    self.run.devices
                ),
            );
        }
        if self.run.name.is_empty()
            || self
                .run
                .name
                .chars()
                .any(|c| !(c.is_ascii_alphanumeric() || "-_.".contains(c)))
        {
            bad(
                "run.name",
                format!(
                    "found `{}`, expected a non-empty name of letters, digits, '-', '_' or '.'",
                    self.run.name
                ),
            );
        }
        for (p, val, min) in [
            ("model.d_model", m.d_model, 1),
            ("model.n_layers", m.n_layers, 1),
            ("model.n_heads", m.n_heads, 1),
            ("model.d_ff", m.d_ff, 1),
            ("model.ctx", m.ctx, 2),
            ("train.micro_batch", t.micro_batch, 1),
            ("train.batch_tokens", t.batch_tokens, 1),
            ("train.eval_sequences", t.eval_sequences, 1),
            ("train.keep_checkpoints", t.keep_checkpoints, 1),
            ("metrics.probe_sequences", mt.probe_sequences, 1),
            ("metrics.probe_len", mt.probe_len, 2),
            ("metrics.k_max", mt.k_max, 1),
        ] {
            if val < min {
                bad(p, format!("found {val}, expected an integer ≥ {min}"));
            }
        }
        for (p, val) in [
            ("train.steps", t.steps),
            ("train.eval_every", t.eval_every),
            ("train.checkpoint_every", t.checkpoint_every),
            ("train.log_every", t.log_every),
            ("metrics.every", mt.every),
        ] {
            if val == 0 {
                bad(p, "found 0, expected an integer ≥ 1".into());
            }
        }
        if m.n_heads > 0 && !m.d_model.is_multiple_of(m.n_heads) {
            bad(
                "model.n_heads",
                format!(
                    "d_model = {} is not divisible by n_heads = {}; choose n_heads among the divisors of d_model",
                    m.d_model, m.n_heads
                ),
            );
        }
        let heads_ok = m.n_heads > 0 && m.d_model.is_multiple_of(m.n_heads);
        let dh = if heads_ok { m.d_head() } else { 0 };
        match m.positions {
            PositionsConfig::Rope { base, fraction } => {
                if !greater(base, 1.0) {
                    bad(
                        "model.positions.base",
                        format!("found {base}, expected a number > 1"),
                    );
                }
                if !(fraction > 0.0 && fraction <= 1.0) {
                    bad(
                        "model.positions.fraction",
                        format!("found {fraction}, expected 0 < fraction ≤ 1"),
                    );
                } else if heads_ok && rope_dims(dh, fraction) < 2 {
                    bad(
                        "model.positions.fraction",
                        format!(
                            "fraction {fraction} of d_head = {dh} rotates no pair of dimensions; \
                             raise it to at least {}",
                            2.0 / dh as f64
                        ),
                    );
                }
            }
            PositionsConfig::Relative {
                buckets,
                max_distance,
            } => {
                if buckets < 4 || !buckets.is_multiple_of(2) {
                    bad(
                        "model.positions.buckets",
                        format!("found {buckets}, expected an even number ≥ 4"),
                    );
                } else if max_distance <= buckets / 4 {
                    bad(
                        "model.positions.max_distance",
                        format!(
                            "found {max_distance}, expected > buckets/4 = {} (the exact buckets)",
                            buckets / 4
                        ),
                    );
                }
            }
            PositionsConfig::Nope {}
            | PositionsConfig::Sinusoidal {}
            | PositionsConfig::Learned {}
            | PositionsConfig::Alibi {} => {}
        }
        if let PositionsConfig::Sinusoidal {} = m.positions
            && !m.d_model.is_multiple_of(2)
        {
            bad(
                "model.positions",
                format!(
                    "sinusoidal positions need an even d_model, found {}",
                    m.d_model
                ),
            );
        }
        for (path, norm) in [
            ("model.norm", Some(&m.norm)),
            ("model.input_norm", m.input_norm.as_ref()),
        ] {
            match norm {
                Some(NormConfig::RmsNorm { eps } | NormConfig::LayerNorm { eps })
                    if !greater(*eps, 0.0) =>
                {
                    bad(
                        &format!("{path}.eps"),
                        format!("found {eps}, expected a number > 0"),
                    );
                }
                Some(NormConfig::None {}) if path == "model.input_norm" => bad(
                    "model.input_norm",
                    "kind = \"none\" here means no input norm: omit the table instead".into(),
                ),
                _ => {}
            }
        }
        if let Some(s) = m.init_std
            && !(s > 0.0 && s.is_finite())
        {
            bad(
                "model.init_std",
                format!("found {s}, expected a finite number > 0"),
            );
        }
        let gains: Vec<(&str, Gain)> = match &m.block {
            BlockConfig::PreNorm { gains } => vec![
                ("alpha_sa", gains.alpha_sa),
                ("beta_sa", gains.beta_sa),
                ("alpha_ff", gains.alpha_ff),
                ("beta_ff", gains.beta_ff),
            ],
            BlockConfig::Parallel { gains } => vec![
                ("alpha", gains.alpha),
                ("beta_sa", gains.beta_sa),
                ("beta_ff", gains.beta_ff),
            ],
            BlockConfig::PostNorm {} => vec![],
            BlockConfig::Sas { beta_ff } => vec![("beta_ff", *beta_ff)],
            BlockConfig::SasP { beta_sa, beta_ff } => {
                vec![("beta_sa", *beta_sa), ("beta_ff", *beta_ff)]
            }
        };
        let gains_path = |name: &str| match m.block {
            BlockConfig::Sas { .. } | BlockConfig::SasP { .. } => format!("model.block.{name}"),
            _ => format!("model.block.gains.{name}"),
        };
        for (name, g) in &gains {
            if m.ffn == (FfnConfig::None {}) && name.ends_with("_ff") && g.trainable {
                bad(
                    &format!("{}.trainable", gains_path(name)),
                    "ffn = none leaves no feed-forward sub-block for this gain to scale; \
                     make it a constant (trainable = false)"
                        .into(),
                );
            }
        }
        for (name, g) in gains {
            if !g.init.is_finite() {
                bad(
                    &format!("{}.init", gains_path(name)),
                    format!("found {}, expected a finite number", g.init),
                );
            }
        }
        if m.sink_tokens > 1024 {
            bad(
                "model.sink_tokens",
                format!("found {}, expected 0..=1024", m.sink_tokens),
            );
        }
        self.validate_attention(&mut bad, dh);
        self.validate_skipless(&mut bad);

        // data
        if !(d.val_fraction > 0.0 && d.val_fraction < 0.5) {
            bad(
                "data.val_fraction",
                format!("found {}, expected a number in (0, 0.5)", d.val_fraction),
            );
        }
        if let TokenizerConfig::Bpe { vocab_size } = d.tokenizer
            && !(260..=65535).contains(&vocab_size)
        {
            bad(
                "data.tokenizer.vocab_size",
                format!("found {vocab_size}, expected 260..=65535 (256 bytes + specials + merges)"),
            );
        }
        if d.token_budget == Some(0) {
            bad(
                "data.token_budget",
                "found 0, expected a positive number of tokens".into(),
            );
        }
        if let Some(mix) = &d.mixture {
            for (k, w) in mix {
                if !(*w >= 0.0 && w.is_finite()) {
                    bad(
                        &format!("data.mixture.{k}"),
                        format!("found {w}, expected a finite weight ≥ 0"),
                    );
                }
            }
            if mix.values().all(|w| *w <= 0.0) {
                bad(
                    "data.mixture",
                    "all weights are 0: at least one domain needs weight > 0".into(),
                );
            }
        }
        let seq_positions = m.ctx;
        for (i, p) in d.random_tokens.iter().enumerate() {
            if *p < 1 || *p > seq_positions {
                bad(
                    &format!("data.random_tokens.{i}"),
                    format!(
                        "found position {p}, expected 1..={seq_positions} (1-based, within model.ctx)"
                    ),
                );
            }
            if d.bos && *p == 1 {
                bad(
                    &format!("data.random_tokens.{i}"),
                    "position 1 holds the BOS token when data.bos = true; use a position ≥ 2 or set bos = false".into(),
                );
            }
        }
        if let Some(ft) = &d.fixed_token {
            if ft.position < 1 || ft.position > seq_positions {
                bad(
                    "data.fixed_token.position",
                    format!("found {}, expected 1..={seq_positions}", ft.position),
                );
            }
            if d.bos && ft.position == 1 {
                bad(
                    "data.fixed_token.position",
                    "position 1 holds the BOS token when data.bos = true; use a position ≥ 2 or set bos = false".into(),
                );
            }
            if d.random_tokens.contains(&ft.position) {
                bad(
                    "data.fixed_token.position",
                    format!(
                        "position {} is also listed in data.random_tokens",
                        ft.position
                    ),
                );
            }
        }

        // optim
        if !(o.lr > 0.0 && o.lr.is_finite()) {
            bad(
                "optim.lr",
                format!("found {}, expected a finite number > 0", o.lr),
            );
        }
        for (i, b) in o.betas.iter().enumerate() {
            if !(0.0..1.0).contains(b) {
                bad(
                    &format!("optim.betas.{i}"),
                    format!("found {b}, expected 0 ≤ β < 1"),
                );
            }
        }
        if !greater(o.eps, 0.0) {
            bad(
                "optim.eps",
                format!("found {}, expected a number > 0", o.eps),
            );
        }
        if !(o.weight_decay >= 0.0 && o.weight_decay.is_finite()) {
            bad(
                "optim.weight_decay",
                format!("found {}, expected a finite number ≥ 0", o.weight_decay),
            );
        }
        if let Some(c) = o.grad_clip
            && !greater(c, 0.0)
        {
            bad(
                "optim.grad_clip",
                format!("found {c}, expected a number > 0 (omit the key for no clipping)"),
            );
        }
        let (warmup, min_lr) = match o.schedule {
            ScheduleConfig::Constant { warmup } => (warmup, None),
            ScheduleConfig::WarmupCosine { warmup, min_lr }
            | ScheduleConfig::WarmupLinear { warmup, min_lr } => (warmup, Some(min_lr)),
        };
        if warmup >= t.steps.max(1) && t.steps > 0 {
            bad(
                "optim.schedule.warmup",
                format!(
                    "found {warmup}, expected fewer warmup steps than train.steps = {}",
                    t.steps
                ),
            );
        }
        if let Some(min_lr) = min_lr
            && !(min_lr >= 0.0 && min_lr <= o.lr)
        {
            bad(
                "optim.schedule.min_lr",
                format!("found {min_lr}, expected 0 ≤ min_lr ≤ optim.lr = {}", o.lr),
            );
        }

        // train
        let seq_tokens = t.micro_batch * m.ctx;
        if seq_tokens > 0 && !t.batch_tokens.is_multiple_of(seq_tokens) {
            bad(
                "train.batch_tokens",
                format!(
                    "found {}, expected a multiple of micro_batch × ctx = {} × {} = {seq_tokens}",
                    t.batch_tokens, t.micro_batch, m.ctx
                ),
            );
        }

        // metrics
        if mt.probe_len > m.ctx {
            bad(
                "metrics.probe_len",
                format!("found {}, expected ≤ model.ctx = {}", mt.probe_len, m.ctx),
            );
        }
        if mt.k_max > mt.probe_len {
            bad(
                "metrics.k_max",
                format!(
                    "found {}, expected ≤ metrics.probe_len = {}",
                    mt.k_max, mt.probe_len
                ),
            );
        }
        if mt.eps.is_empty() {
            bad(
                "metrics.eps",
                "empty list: give at least one threshold, e.g. [0.3]".into(),
            );
        }
        for (i, e) in mt.eps.iter().enumerate() {
            if !(*e > 0.0 && *e < 1.0) {
                bad(
                    &format!("metrics.eps.{i}"),
                    format!("found {e}, expected 0 < ε < 1"),
                );
            }
        }
        v
    }

    /// Checks of `[model.attention]` and its combinations with the rest of the model.
    fn validate_attention(&self, bad: &mut dyn FnMut(&str, String), dh: usize) {
        let m = &self.model;
        let a = &m.attention;
        let norm_name = normaliser_name(&a.normaliser);
        if !(a.row_scale > 0.0 && a.row_scale.is_finite()) {
            bad(
                "model.attention.row_scale",
                format!("found {}, expected a finite number > 0", a.row_scale),
            );
        }
        match &a.normaliser {
            NormaliserConfig::SoftmaxN { n } if !(*n >= 0.0 && n.is_finite()) => {
                bad(
                    "model.attention.normaliser.n",
                    format!("found {n}, expected a finite number ≥ 0 (1 = off-by-one)"),
                );
            }
            NormaliserConfig::Sigmoid { bias } => match bias.resolve(m.ctx) {
                Some(b) if b.is_finite() => {}
                _ => bad(
                    "model.attention.normaliser.bias",
                    format!(
                        "found {bias:?}, expected a finite number or the string \"{}\"",
                        SigmoidBias::NEG_LN_T
                    ),
                ),
            },
            _ => {}
        }
        let uses_logits = a.normaliser.uses_logits();
        if !uses_logits
            && matches!(
                m.positions,
                PositionsConfig::Alibi {} | PositionsConfig::Relative { .. }
            )
        {
            bad(
                "model.positions",
                format!(
                    "{} positions add a bias to the attention logits, but a linear-kernel \
                     attention has no logits; use nope, sinusoidal, learned or rope with it, or a \
                     logit-based normaliser (softmax, softmax_n, sigmoid, elu1)",
                    positions_name(&m.positions)
                ),
            );
        }
        let slot_std = |bad: &mut dyn FnMut(&str, String), std: f64| {
            if !(std > 0.0 && std.is_finite()) {
                bad(
                    "model.attention.slot.init_std",
                    format!("found {std}, expected a finite number > 0"),
                );
            }
        };
        match &a.slot {
            SlotConfig::None {} => {}
            SlotConfig::SinkLogit { init, .. } => {
                if !a.normaliser.is_normalised() {
                    bad(
                        "model.attention.slot",
                        format!(
                            "a learned sink logit only takes mass from a normalised attention \
                             (softmax, softmax_n, sigmoid_normalised, elu1_normalised); with the \
                             unnormalised {norm_name} its column would change nothing"
                        ),
                    );
                }
                if !init.is_finite() {
                    bad(
                        "model.attention.slot.init",
                        format!("found {init}, expected a finite number"),
                    );
                }
            }
            SlotConfig::KvBias { init_std, .. } | SlotConfig::VBias { init_std, .. } => {
                slot_std(bad, *init_std)
            }
            SlotConfig::KBias {
                init_std,
                value,
                learnable_dims,
                trainable,
                ..
            } => {
                slot_std(bad, *init_std);
                if let KBiasValue::E1 { m: mm } | KBiasValue::Ones { m: mm } = value
                    && !mm.is_finite()
                {
                    bad(
                        "model.attention.slot.value.m",
                        format!("found {mm}, expected a finite number"),
                    );
                }
                match (learnable_dims, trainable) {
                    (Some(_), false) => bad(
                        "model.attention.slot.learnable_dims",
                        "the K bias is both fixed (trainable = false) and partly learnable \
                         (learnable_dims); drop one of the two"
                            .into(),
                    ),
                    (Some(da), true) if dh > 0 && !(1..=dh).contains(da) => bad(
                        "model.attention.slot.learnable_dims",
                        format!("found {da}, expected 1..={dh} (d_head)"),
                    ),
                    _ => {}
                }
            }
            SlotConfig::MemoryKv { n, init_std } => {
                slot_std(bad, *init_std);
                if !(1..=1024).contains(n) {
                    bad(
                        "model.attention.slot.n",
                        format!("found {n}, expected 1..=1024 memory key/value pairs"),
                    );
                }
            }
        }
        let ctx = m.ctx;
        match a.mask {
            MaskConfig::Causal {} => {}
            MaskConfig::Prefix { p } => {
                if !(1..=ctx).contains(&p) {
                    bad(
                        "model.attention.mask.p",
                        format!("found {p}, expected 1..={ctx} (model.ctx)"),
                    );
                }
            }
            MaskConfig::SlidingWindow { w } => {
                if w < 1 {
                    bad(
                        "model.attention.mask.w",
                        "found 0, expected a window ≥ 1 (the query itself)".into(),
                    );
                }
            }
            MaskConfig::SinksWindow { sinks, w } => {
                if w < 1 {
                    bad(
                        "model.attention.mask.w",
                        "found 0, expected a window ≥ 1 (the query itself)".into(),
                    );
                }
                if sinks < 1 {
                    bad(
                        "model.attention.mask.sinks",
                        "found 0, expected ≥ 1 (with no sinks use sliding_window)".into(),
                    );
                }
            }
        }
        if a.kernel == AttentionKernel::Fused {
            let mut why = Vec::new();
            if !matches!(a.normaliser, NormaliserConfig::Softmax {}) {
                why.push(format!("normaliser is {norm_name}"));
            }
            if a.slot != (SlotConfig::None {}) {
                why.push("a slot is set".to_string());
            }
            if a.mask != (MaskConfig::Causal {}) {
                why.push("the mask is not causal".to_string());
            }
            if matches!(
                m.positions,
                PositionsConfig::Alibi {} | PositionsConfig::Relative { .. }
            ) {
                why.push("positions add a logit bias".to_string());
            }
            if a.row_scale != 1.0 {
                why.push("row_scale ≠ 1".to_string());
            }
            if a.shaping != (ShapingConfig::None {}) {
                why.push("the attention matrix is shaped".to_string());
            }
            if a.spa != (SpaConfig::None {}) {
                why.push("U-SPA / E-SPA add a logit bias and rescale rows".to_string());
            }
            if !why.is_empty() {
                bad(
                    "model.attention.kernel",
                    format!(
                        "\"fused\" covers plain causal softmax attention only, but {}; use \
                         kernel = \"manual\"",
                        why.join(", ")
                    ),
                );
            }
        }
    }

    /// Checks of the skipless-transformer choices (REFERENCE §3) and their combinations.
    fn validate_skipless(&self, bad: &mut dyn FnMut(&str, String)) {
        let m = &self.model;
        let a = &m.attention;
        let norm_name = normaliser_name(&a.normaliser);
        let logit_bias = matches!(
            m.positions,
            PositionsConfig::Alibi {} | PositionsConfig::Relative { .. }
        );
        // Shared requirements of shaping and SPA, reported under `what`'s path.
        let needs = |what: &str, zero_q: bool, causal_only: bool| -> Option<String> {
            let mut why = Vec::new();
            if !matches!(a.normaliser, NormaliserConfig::Softmax {}) {
                why.push(format!(
                    "the normaliser is {norm_name} (the construction assumes softmax)"
                ));
            }
            if zero_q && a.query_init != QueryInit::Zero {
                why.push(
                    "W_Q must start at exactly 0 (set model.attention.query_init = \"zero\")"
                        .to_string(),
                );
            }
            if a.slot != (SlotConfig::None {}) {
                why.push("a slot adds keys outside the T×T attention matrix".to_string());
            }
            if m.sink_tokens > 0 {
                why.push("sink tokens add positions outside the T×T attention matrix".to_string());
            }
            if zero_q && logit_bias {
                why.push(format!(
                    "{} positions add a logit bias, so attention at init is not the intended matrix; \
                     use nope, sinusoidal, learned or rope",
                    positions_name(&m.positions)
                ));
            }
            if causal_only && a.mask != (MaskConfig::Causal {}) {
                why.push("the mask is not causal (A_l is full lower-triangular)".to_string());
            }
            (!why.is_empty()).then(|| format!("{what} cannot be used here: {}", why.join("; ")))
        };
        match a.shaping {
            ShapingConfig::None {} => {}
            ShapingConfig::ValueSkipinit { alpha, beta, .. } => {
                if let Some(m) = needs("value_skipinit", false, false) {
                    bad("model.attention.shaping", m);
                }
                for (k, x) in [("alpha", alpha), ("beta", beta)] {
                    if !x.is_finite() {
                        bad(
                            &format!("model.attention.shaping.{k}"),
                            format!("found {x}, expected a finite number"),
                        );
                    }
                }
            }
            ShapingConfig::Shaped {
                alpha, beta, gamma, ..
            } => {
                if let Some(m) = needs("shaped attention", true, false) {
                    bad("model.attention.shaping", m);
                }
                for (k, x) in [("alpha", alpha), ("beta", beta), ("gamma", gamma)] {
                    if !x.is_finite() {
                        bad(
                            &format!("model.attention.shaping.{k}"),
                            format!("found {x}, expected a finite number"),
                        );
                    }
                }
            }
        }
        if let ValueOutputConfig::Reparam { alpha, beta, .. } = a.value_output {
            for (k, g) in [("alpha", alpha), ("beta", beta)] {
                if !g.init.is_finite() {
                    bad(
                        &format!("model.attention.value_output.{k}.init"),
                        format!("found {}, expected a finite number", g.init),
                    );
                }
            }
            if !beta.trainable && beta.init == 0.0 {
                bad(
                    "model.attention.value_output.beta",
                    "β_W = 0 and fixed would leave ΔW without any effect; make it trainable or \
                     non-zero"
                        .into(),
                );
            }
        }
        if a.spa != (SpaConfig::None {}) {
            if let Some(m) = needs("U-SPA / E-SPA", true, true) {
                bad("model.attention.spa", m);
            }
            if a.shaping != (ShapingConfig::None {}) {
                bad(
                    "model.attention.spa",
                    "U-SPA / E-SPA already fix the attention matrix at init; use them with \
                     shaping = none"
                        .into(),
                );
            }
            let (key, x, ok) = match a.spa {
                SpaConfig::USpa { rho } => ("rho", rho, rho > 0.0 && rho < 1.0),
                SpaConfig::ESpa { gamma } => ("gamma", gamma, gamma > 0.0 && gamma.is_finite()),
                SpaConfig::None {} => unreachable!(),
            };
            if !ok {
                let want = if key == "rho" {
                    "0 < rho < 1 (the final off-diagonal correlation ρ_L)"
                } else {
                    "a finite number > 0 (the final decay rate γ_L)"
                };
                bad(
                    &format!("model.attention.spa.{key}"),
                    format!("found {x}, expected {want}"),
                );
            } else if m.n_layers >= 1
                && m.ctx >= 2
                && let Err(e) = crate::signal::spa_layers(&a.spa, m.n_layers, m.ctx)
            {
                bad("model.attention.spa", e.to_string());
            }
        }
        let sas = matches!(m.block, BlockConfig::Sas { .. } | BlockConfig::SasP { .. });
        if sas {
            let mut why = Vec::new();
            if !matches!(a.shaping, ShapingConfig::Shaped { .. }) {
                why.push("model.attention.shaping = { kind = \"shaped\" }");
            }
            if !matches!(a.value_output, ValueOutputConfig::Identity { .. }) {
                why.push("model.attention.value_output = { kind = \"identity\" }");
            }
            if !why.is_empty() {
                bad(
                    "model.block.kind",
                    format!(
                        "SAS blocks are shaped attention without W_V / W_O; also set {} (or use \
                         pre_norm / parallel with gains for other skipless blocks)",
                        why.join(" and ")
                    ),
                );
            }
        }
        if m.norm == (NormConfig::None {}) && m.block == (BlockConfig::PostNorm {}) {
            bad(
                "model.norm",
                "post_norm with no norm is the pre_norm block with no norm; use block.kind = \
                 \"pre_norm\""
                    .into(),
            );
        }
    }

    /// Sequences per optimizer step and gradient-accumulation passes.
    pub fn accumulation(&self) -> usize {
        self.train.batch_tokens / (self.train.micro_batch * self.model.ctx)
    }

    pub fn run_dir(&self) -> PathBuf {
        self.run.out_dir.join(&self.run.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn defaults_validate_and_roundtrip() {
        let exp = from_str("x.toml", "").unwrap();
        assert_eq!(exp, Experiment::default_for_tests());
        let again = from_str("resolved.toml", &exp.to_toml()).unwrap();
        assert_eq!(exp, again);
    }

    #[test]
    fn collects_every_error_with_paths() {
        let text = r#"
[model]
d_modle = 64
n_heads = "four"
positions = { kind = "rope", base = 10000.0, theta = 0.5 }
[optim]
lr = -1.0
schedule = { kind = "cosine", warmup = 10 }
[train]
stepz = 3
"#;
        let err = from_str("bad.toml", text).unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
        assert!(paths.contains(&"model.d_modle"), "{err}");
        assert!(paths.contains(&"model.n_heads"), "{err}");
        assert!(paths.contains(&"model.positions.theta"), "{err}");
        assert!(paths.contains(&"optim.schedule.kind"), "{err}");
        assert!(paths.contains(&"train.stepz"), "{err}");
        assert_eq!(err.0.len(), 5, "{err}");
        let text = err.to_string();
        assert!(text.contains("bad.toml"), "{text}");
        assert!(text.contains("d_model"), "valid keys are listed: {text}");
        assert!(
            text.contains("warmup_cosine"),
            "valid choices are listed: {text}"
        );
    }

    #[test]
    fn range_and_combination_errors() {
        let text = r#"
[model]
d_model = 100
n_heads = 3
ctx = 32
[data]
random_tokens = [1, 40]
bos = true
[optim]
lr = 0.0
betas = [0.9, 1.0]
[train]
batch_tokens = 1000
micro_batch = 4
"#;
        let err = from_str("r.toml", text).unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
        for want in [
            "model.n_heads",
            "data.random_tokens.0",
            "data.random_tokens.1",
            "optim.lr",
            "optim.betas.1",
            "train.batch_tokens",
            "metrics.probe_len",
        ] {
            assert!(paths.contains(&want), "missing {want}: {err}");
        }
    }

    #[test]
    fn impossible_attention_combinations_are_rejected_with_reasons() {
        let text = r#"
[model]
positions = { kind = "alibi" }
[model.attention]
normaliser = { kind = "linear", feature_map = "mlp", normaliser = "none" }
slot = { kind = "sink_logit" }
kernel = "fused"
"#;
        let err = from_str("combo.toml", text).unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
        for want in [
            "model.positions",
            "model.attention.slot",
            "model.attention.kernel",
        ] {
            assert!(paths.contains(&want), "missing {want}: {err}");
        }
        let msg = err.to_string();
        assert!(msg.contains("no logits"), "{msg}");
        assert!(msg.contains("normalised attention"), "{msg}");
        let text = r#"
[model]
positions = { kind = "relative", buckets = 5, max_distance = 1 }
[model.attention]
normaliser = { kind = "sigmoid", bias = "ln(T)" }
slot = { kind = "k_bias", value = { kind = "zero" }, learnable_dims = 4, trainable = false }
mask = { kind = "prefix", p = 0 }
row_scale = 0.0
"#;
        let err = from_str("combo2.toml", text).unwrap_err();
        let paths: Vec<&str> = err.0.iter().map(|e| e.path.as_str()).collect();
        for want in [
            "model.positions.buckets",
            "model.attention.normaliser.bias",
            "model.attention.slot.learnable_dims",
            "model.attention.mask.p",
            "model.attention.row_scale",
        ] {
            assert!(paths.contains(&want), "missing {want}: {err}");
        }
        assert!(err.to_string().contains("both fixed"), "{err}");
        // the sigmoid bias accepts a number or exactly "-ln(T)"
        let ok = from_str(
            "ok.toml",
            "[model.attention]\nnormaliser = { kind = \"sigmoid\", bias = \"-ln(T)\" }\n",
        )
        .unwrap();
        let NormaliserConfig::Sigmoid { bias } = &ok.model.attention.normaliser else {
            panic!()
        };
        assert!((bias.resolve(128).unwrap() + 128f64.ln()).abs() < 1e-12);
        let err = from_str(
            "r.toml",
            "[model]\npositions = { kind = \"rope\", base = 10000.0, fraction = 0.01 }\n",
        )
        .unwrap_err();
        assert_eq!(err.0[0].path, "model.positions.fraction", "{err}");
    }

    #[test]
    fn base_inheritance_deep_merge_and_kind_switch() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            "base.toml",
            "[model]\nd_model = 64\nn_heads = 2\npositions = { kind = \"rope\", base = 500.0 }\n[optim]\nlr = 1e-3\n",
        );
        let child = write(
            dir.path(),
            "child.toml",
            "base = \"base.toml\"\n[model]\nn_heads = 4\npositions = { kind = \"nope\" }\n",
        );
        let exp = load(&child, &["optim.lr=2e-3".into(), "run.name=abc".into()]).unwrap();
        assert_eq!(exp.model.d_model, 64);
        assert_eq!(exp.model.n_heads, 4);
        assert_eq!(exp.model.positions, PositionsConfig::Nope {});
        assert!((exp.optim.lr - 2e-3).abs() < 1e-15);
        assert_eq!(exp.run.name, "abc");
    }

    #[test]
    fn override_errors_and_cycles() {
        let dir = tempfile::tempdir().unwrap();
        let a = write(dir.path(), "a.toml", "base = \"b.toml\"\n");
        write(dir.path(), "b.toml", "base = \"a.toml\"\n");
        let err = load(&a, &[]).unwrap_err();
        assert!(err.to_string().contains("cycle"), "{err}");
        let ok = write(dir.path(), "ok.toml", "");
        let err = load(&ok, &["optim.lr".into()]).unwrap_err();
        assert!(err.to_string().contains("KEY=VALUE"), "{err}");
        let err = load(&ok, &["optim.lrr=1".into()]).unwrap_err();
        assert_eq!(err.0[0].path, "optim.lrr");
    }

    impl Experiment {
        fn default_for_tests() -> Self {
            Experiment {
                run: RunConfig::default(),
                data: DataConfig::default(),
                model: ModelConfig::default(),
                optim: OptimConfig::default(),
                train: TrainConfig::default(),
                metrics: MetricsConfig::default(),
            }
        }
    }
}
