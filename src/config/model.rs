//! `[model]`: the causal LM's size and its block-level axes (norms, FFN, positions, block
//! wiring and gains, head), each a closed enum.

use super::attention::AttentionConfig;
use serde::{Deserialize, Serialize};

/// `[model]`: the causal LM. Every axis of variation is one closed enum (docs/reference.md §1–2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// Key/value heads (grouped-query attention): query head h reads key/value head
    /// `h / (n_heads / n_kv_heads)`. Absent: `n_heads` (every head its own keys and values).
    pub n_kv_heads: Option<usize>,
    /// Hidden width of the feed-forward network.
    pub d_ff: usize,
    /// Training context length (tokens per sequence, BOS included; sink tokens not included).
    pub ctx: usize,
    pub norm: NormConfig,
    /// A norm on the embedding output, before the first block (SAS-P "no-norm" keeps only this
    /// LayerNorm, with `norm = { kind = "none" }`).
    pub input_norm: Option<NormConfig>,
    pub ffn: FfnConfig,
    pub positions: PositionsConfig,
    /// How the residual stream, norms and sub-blocks are wired.
    pub block: BlockConfig,
    pub attention: AttentionConfig,
    /// Output head: its own matrix, or the transposed token embedding.
    pub head: HeadKind,
    /// Biases in every linear layer (q, k, v, o, gate, FFN, untied head), initialised to 0.
    pub bias: bool,
    /// Biases on the query, key and value projections only (Qwen2), initialised to 0.
    pub qkv_bias: bool,
    /// Learnable sink tokens prepended to every sequence (StreamingLLM); their outputs and
    /// losses are dropped.
    pub sink_tokens: usize,
    /// Std of the normal init of every matrix. Absent: `sqrt(2 / (5 d_model))` (GPT-NeoX's
    /// "small init", also Gu et al.'s).
    pub init_std: Option<f64>,
    /// Std of the FFN output matrix W_down only (the same draws, scaled). Absent: `init_std`.
    /// Gu et al.'s code (TinyLlama / lit-gpt) uses `1 / sqrt(d_ff) / n_layers` here.
    pub w_down_init_std: Option<f64>,
    /// Rows of the embedding and the head. Absent: the tokenizer's vocabulary. Pretrained
    /// models often pad it past the tokenizer (GPT-NeoX, Qwen).
    pub vocab_size: Option<usize>,
}

impl Default for ModelConfig {
    fn default() -> Self {
        Self {
            d_model: 128,
            n_layers: 4,
            n_heads: 4,
            n_kv_heads: None,
            d_ff: 384,
            ctx: 128,
            norm: NormConfig::default(),
            input_norm: None,
            ffn: FfnConfig::default(),
            positions: PositionsConfig::default(),
            block: BlockConfig::default(),
            attention: AttentionConfig::default(),
            head: HeadKind::default(),
            bias: false,
            qkv_bias: false,
            sink_tokens: 0,
            init_std: None,
            w_down_init_std: None,
            vocab_size: None,
        }
    }
}

impl ModelConfig {
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads
    }
    /// Key/value heads (`n_kv_heads`, or `n_heads` without grouped-query attention).
    pub fn kv_heads(&self) -> usize {
        self.n_kv_heads.unwrap_or(self.n_heads)
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
    /// `x / sqrt(mean(x²) + eps) · g`; eps defaults to 1e-5.
    RmsNorm {
        #[serde(default = "default_norm_eps")]
        eps: f64,
    },
    /// `(x − mean x) / sqrt(var x + eps) · g + b` (biased variance, as PyTorch); eps defaults
    /// to 1e-5 (PyTorch's).
    LayerNorm {
        #[serde(default = "default_norm_eps")]
        eps: f64,
    },
    /// No normalisation anywhere in the blocks and no final norm (skipless "no-norm" models;
    /// see `input_norm`).
    None {},
}

fn default_norm_eps() -> f64 {
    1e-5
}

impl Default for NormConfig {
    fn default() -> Self {
        NormConfig::RmsNorm {
            eps: default_norm_eps(),
        }
    }
}

/// Feed-forward network: `W_down(act(x W_up))`, or the gated `W_down(act(x W_gate) ⊙ x W_up)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum FfnConfig {
    Relu {},
    /// GeLU, exact (erf) form.
    Gelu {},
    /// GeLU, tanh approximation `0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³)))` (GPT-2's
    /// `gelu_new`).
    GeluTanh {},
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
        /// Wavelength base; 10000 by default (Su et al., LLaMA).
        #[serde(default = "default_rope_base")]
        base: f64,
        #[serde(default = "default_rope_fraction")]
        fraction: f64,
        /// Which dimensions form a rotating pair (both rotate by `pos · base^(−2i/r)`).
        #[serde(default)]
        pairing: RopePairing,
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

fn default_rope_base() -> f64 {
    10000.0
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
            base: default_rope_base(),
            fraction: default_rope_fraction(),
            pairing: RopePairing::Halves,
        }
    }
}

/// The dimension pairs RoPE rotates together, of the first r dimensions of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RopePairing {
    /// (i, i + r/2): GPT-NeoX / Hugging Face ("rotate half").
    #[default]
    Halves,
    /// (2i, 2i + 1): GPT-J, Burn's `RotaryEncoding`, and the Q/K layout of GGUF files.
    Adjacent,
}

/// A scalar gain: its initial value and whether it is trained.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Gain {
    pub init: f64,
    pub trainable: bool,
}

pub(super) fn one() -> f64 {
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
#[serde(default, deny_unknown_fields)]
pub struct BlockGains {
    pub alpha_sa: Gain,
    pub beta_sa: Gain,
    pub alpha_ff: Gain,
    pub beta_ff: Gain,
}

/// Gains of a parallel block: `out = α x + β_SA Attn(N(x)) + β_FF MLP(N(x))`.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ParallelGains {
    pub alpha: Gain,
    pub beta_sa: Gain,
    pub beta_ff: Gain,
}

/// Block wiring (docs/reference.md §2).
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
    /// `x = α x + β_SA Attn(N1(x)) + β_FF MLP(N1(x))`; final norm before the head. With
    /// `separate_norms`, the MLP reads its own norm, `MLP(N2(x))` (GPT-NeoX / Pythia).
    Parallel {
        #[serde(default)]
        gains: ParallelGains,
        #[serde(default)]
        separate_norms: bool,
    },
    /// SAS (He & Hofmann): `x̂ = SAS-Attn(N1(x))` (no attention skip: α_SA = 0, β_SA = 1),
    /// `out = x̂ + β_FF MLP(N2(x̂))`. Needs `attention.shaping = shaped` and
    /// `attention.value_output = identity`. `beta_ff` absent: trainable, init
    /// [`sas_beta_ff_init`]`(n_layers)` (written out in `resolved.toml`).
    Sas { beta_ff: Gain },
    /// SAS-P: parallel and skipless, `out = β_SA SAS-Attn(N(x)) + β_FF MLP(N(x))` (α = 0).
    /// Needs `attention.shaping = shaped` and `attention.value_output = identity`. `beta_ff`
    /// absent: as for `sas`.
    SasP {
        #[serde(default = "trained_one")]
        beta_sa: Gain,
        beta_ff: Gain,
    },
}

/// Default init of a SAS / SAS-P β_FF for `n_layers` blocks: He & Hofmann scale it as
/// O(1/√L) and use 0.1 at L = 18, so `0.1 · √(18 / L)` (0.122 at L = 12, 0.3 at L = 2).
pub fn sas_beta_ff_init(n_layers: usize) -> f64 {
    0.1 * (18.0 / n_layers.max(1) as f64).sqrt()
}

pub(super) fn trained_one() -> Gain {
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
