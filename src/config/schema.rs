//! The experiment schema: every table and choice of an experiment file as a typed struct or
//! closed enum, with its documentation. Defaults live in one place: each struct's `Default`
//! impl (the structs are `#[serde(default)]`, so an absent key takes the value `Default` gives);
//! a variant's own fields carry theirs in `#[serde(default = ...)]`. Defaults that depend on
//! other keys (SAS β_FF) are filled by `load` before deserialization.

pub use super::attention::*;
pub use super::model::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The headline threshold of Sink₁ (Gu et al.: ε = 0.3 on T = 64 probes): the ε of the logged
/// Sink₁, of summaries, of `sinklab report`'s default and of the analysis plots.
pub const HEADLINE_EPS: f64 = 0.3;

/// The default ε grid of `metrics.eps` and `sinklab analyze --eps` (it holds [`HEADLINE_EPS`]).
pub const EPS_GRID: [f64; 5] = [0.2, HEADLINE_EPS, 0.4, 0.5, 0.8];

/// One experiment, fully resolved.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Experiment {
    pub run: RunConfig,
    pub data: DataConfig,
    pub model: ModelConfig,
    pub optim: OptimConfig,
    pub train: TrainConfig,
    pub metrics: MetricsConfig,
}

/// `[run]`: identity and placement of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunConfig {
    /// Run name; the run directory is `out_dir/name`.
    pub name: String,
    /// Parent directory of run directories (relative to the current directory).
    pub out_dir: PathBuf,
    /// Seed for parameter init, data sampling and probe selection.
    pub seed: u64,
    /// Backend device: `flex` (CPU), `wgpu`, `cuda` (each needs its cargo feature).
    pub device: DeviceKind,
    /// Devices per process: 1. Several GPUs or machines train one run as MPI ranks, one
    /// process per GPU (`mpirun -np N sinklab train`, docs/distributed.md); the key stays so
    /// that every run directory's resolved.toml still reads (and resumes with the same digest).
    pub devices: usize,
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            name: "run".into(),
            out_dir: "runs".into(),
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
#[serde(default, deny_unknown_fields)]
pub struct DataConfig {
    /// `"embedded"` (the corpus compiled into sinklab, `datasets/embedded`) or a path to a corpus
    /// directory with a `manifest.json` (see `datasets/README.md`), relative to the current
    /// directory.
    pub corpus: String,
    pub tokenizer: TokenizerConfig,
    /// Prepend a BOS token to every training and probe sequence.
    pub bos: bool,
    /// Fraction of every domain's token stream (its tail) held out for validation.
    pub val_fraction: f64,
    /// Use only the first `token_budget` training tokens (split over domains by the mixture
    /// weights), so that data repeats. Absent: the whole training split.
    pub token_budget: Option<u64>,
    /// Sampling weight per domain (non-negative, need not sum to 1). Absent: every domain with
    /// weight proportional to its size. Domains not named get weight 0.
    pub mixture: Option<std::collections::BTreeMap<String, f64>>,
    /// Replace the tokens at these 1-based positions of every training sequence by uniformly
    /// random (non-special) tokens; the loss on predicting them is ignored.
    pub random_tokens: Vec<usize>,
    /// Put a fixed token at a 1-based position of every training sequence.
    pub fixed_token: Option<FixedToken>,
    /// Where prepared token shards are cached (keyed by a hash of what determines them).
    pub cache_dir: PathBuf,
    /// A generated task instead of the text corpus (then `corpus` and `tokenizer` are not
    /// used and must stay at their defaults): `{ kind = "bigram_backcopy", ... }`.
    pub synthetic: Option<SyntheticConfig>,
    /// A corpus on disk given as files, one table per domain (`[data.sources.web]`,
    /// `[data.sources.code]`): text, JSONL or Parquet, compressed or not, streamed into
    /// memory-mapped token shards. Replaces `corpus` (which must then stay unset).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub sources: BTreeMap<String, SourceConfig>,
    /// What preparation does with bad input (a malformed JSON line, a missing text field,
    /// invalid UTF-8, an empty file, a truncated compressed file, a Parquet file without the
    /// column): "error" (default) stops with the file and line; "skip" counts it, reports it
    /// and records it in the manifest.
    pub bad_input: BadInput,
}

/// `data.bad_input`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BadInput {
    #[default]
    Error,
    Skip,
}

/// `data.sources.NAME.format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceFormat {
    /// By extension: .txt, .jsonl/.json/.ndjson, .parquet; text and JSONL may end in .gz/.zst.
    #[default]
    Auto,
    /// Plain text, documents separated by a line `<|doc|>`.
    Text,
    /// One JSON object per line, the document in `text_field`.
    Jsonl,
    /// A Parquet file, the document in column `text_field`.
    Parquet,
}

/// `[data.sources.NAME]`: the files of one domain.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SourceConfig {
    /// Files, directories (every file under them, recursively, in name order) or glob
    /// patterns ("data/web/*.jsonl.zst"), relative to the current directory. Read in the
    /// order given, each pattern's matches in name order.
    pub files: Vec<String>,
    pub format: SourceFormat,
    /// JSONL: the field holding the document; Parquet: the column.
    pub text_field: String,
}

impl Default for SourceConfig {
    fn default() -> Self {
        Self {
            files: vec![],
            format: SourceFormat::Auto,
            text_field: "text".into(),
        }
    }
}

/// `data.synthetic`: a generated task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SyntheticConfig {
    /// Guo et al. (2024)'s Bigram-Backcopy task (`src/data/synthetic.rs`).
    BigramBackcopy(BigramBackcopy),
    /// Random segments repeated within each sequence, the in-context task on which induction
    /// heads form (Olsson et al. 2022; `src/data/synthetic.rs`).
    Repeat(RepeatTask),
}

impl SyntheticConfig {
    /// The `kind` string.
    pub fn kind(&self) -> &'static str {
        match self {
            SyntheticConfig::BigramBackcopy(_) => "bigram_backcopy",
            SyntheticConfig::Repeat(_) => "repeat",
        }
    }

    /// Ordinary tokens of the task (the two special tokens come on top).
    pub fn task_vocab(&self) -> usize {
        match self {
            SyntheticConfig::BigramBackcopy(bb) => bb.chain_vocab(),
            SyntheticConfig::Repeat(r) => r.vocab,
        }
    }

    /// Tokens per generated record (`length`; filled with model.ctx + 1 when loading).
    pub fn length(&self) -> Option<usize> {
        match self {
            SyntheticConfig::BigramBackcopy(bb) => bb.length,
            SyntheticConfig::Repeat(r) => r.length,
        }
    }

    /// Training records generated.
    pub fn sequences(&self) -> usize {
        match self {
            SyntheticConfig::BigramBackcopy(bb) => bb.sequences,
            SyntheticConfig::Repeat(r) => r.sequences,
        }
    }
}

/// The repeat task: every record is a run of segments of n ~ U{min_segment..=max_segment}
/// tokens; each is, with probability `copy_probability`, a copy of a uniformly chosen earlier
/// fresh segment of the record (so copies sit at every distance, and only content-based
/// copying, an induction head, predicts them), else a fresh segment of tokens drawn uniformly
/// from the `vocab` ordinary tokens; the last is cut at the record's end. Token ids:
/// `<|bos|>` = 0, `<|endoftext|>` = 1, then t0 … t{vocab−1}.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RepeatTask {
    /// Ordinary tokens.
    pub vocab: usize,
    /// Shortest segment.
    pub min_segment: usize,
    /// Longest segment.
    pub max_segment: usize,
    /// Probability that a segment after the first copies an earlier one.
    pub copy_probability: f64,
    /// Probability that a fresh token (from a segment's third on) is σ(the token two before),
    /// σ a fixed random permutation of the vocabulary, instead of uniform: a skip-bigram that
    /// only a model that moves the previous token forward (a previous-token head) can use, as
    /// natural text rewards it (0: fresh tokens are pure noise).
    pub skip_bigram: f64,
    /// Seed of the generated records.
    pub task_seed: u64,
    /// Training sequences generated; validation gets `val_fraction` as many more.
    pub sequences: usize,
    /// Tokens per generated sequence, BOS not included (at least model.ctx + 1). Absent:
    /// model.ctx + 1, written out in resolved.toml.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<usize>,
}

impl Default for RepeatTask {
    fn default() -> Self {
        Self {
            vocab: 64,
            min_segment: 4,
            max_segment: 16,
            copy_probability: 0.5,
            skip_bigram: 0.0,
            task_seed: 0,
            sequences: 65536,
            length: None,
        }
    }
}

/// The bigram chain Bigram-Backcopy copies through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BbChain {
    /// A Zipf unigram with Dirichlet bigram rows (`vocab`, `zipf`, `concentration`,
    /// `task_seed`): self-contained, any vocabulary size.
    #[default]
    Zipf,
    /// The paper's kind of chain: the character bigram of a Shakespeare text, here the
    /// embedded corpus's complete works ([`SHAKESPEARE_CHARS`] characters, most frequent first,
    /// so the triggers are ' ', 'e', 't', … as in the paper); `vocab`, `zipf` and
    /// `concentration` are not used.
    ShakespeareChars,
}

/// Distinct characters of the embedded Shakespeare text (checked by a test in `data`).
pub const SHAKESPEARE_CHARS: usize = 88;

/// Bigram-Backcopy over a bigram chain (`chain`). Token ids: `<|bos|>` = 0,
/// `<|endoftext|>` = 1, then the chain's tokens, most frequent first (the triggers are the
/// first `triggers` of them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BigramBackcopy {
    /// The bigram chain: "zipf" (default) or "shakespeare_chars".
    pub chain: BbChain,
    /// Ordinary tokens (chain "zipf").
    pub vocab: usize,
    /// The most frequent tokens `0..triggers` are triggers.
    pub triggers: usize,
    /// Copy offsets: trigger i copies the token `offsets[i mod len]` positions before it
    /// (`[1]`: the paper's task).
    pub offsets: Vec<usize>,
    /// Exponent of the Zipf unigram π_r ∝ r^−zipf.
    pub zipf: f64,
    /// Every bigram row is drawn from Dirichlet(concentration · π).
    pub concentration: f64,
    /// Seed of the bigram matrix (the task itself, not the data order).
    pub task_seed: u64,
    /// Training sequences generated (each an independent draw); validation gets
    /// `val_fraction` as many more.
    pub sequences: usize,
    /// Tokens per generated sequence, BOS not included (at least model.ctx + 1). Absent:
    /// model.ctx + 1, written out in resolved.toml.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub length: Option<usize>,
}

/// The copy offset of trigger `i`: `offsets[i mod len]` (the one place this rule is written).
pub fn trigger_offset(offsets: &[usize], i: usize) -> usize {
    offsets[i % offsets.len()]
}

impl BigramBackcopy {
    /// Ordinary tokens of the chain: `vocab` for "zipf", the text's characters otherwise.
    pub fn chain_vocab(&self) -> usize {
        match self.chain {
            BbChain::Zipf => self.vocab,
            BbChain::ShakespeareChars => SHAKESPEARE_CHARS,
        }
    }
}

impl Default for BigramBackcopy {
    fn default() -> Self {
        Self {
            chain: BbChain::Zipf,
            vocab: 64,
            triggers: 3,
            offsets: vec![1],
            zipf: 1.0,
            concentration: 16.0,
            task_seed: 0,
            sequences: 65536,
            length: None,
        }
    }
}

impl Default for DataConfig {
    fn default() -> Self {
        Self {
            corpus: "embedded".into(),
            tokenizer: TokenizerConfig::default(),
            bos: false,
            val_fraction: 0.05,
            token_budget: None,
            mixture: None,
            random_tokens: vec![],
            fixed_token: None,
            cache_dir: "runs/_cache".into(),
            synthetic: None,
            sources: BTreeMap::new(),
            bad_input: BadInput::Error,
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
    /// Byte-level BPE trained with the `tokenizers` crate on the training split, or on a
    /// sample of it: the first `sample_bytes` bytes of text or the first `sample_documents`
    /// documents, split evenly over the domains (each domain's share taken from its start,
    /// which must lie in its training split).
    Bpe {
        #[serde(default = "default_bpe_vocab")]
        vocab_size: usize,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sample_bytes: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        sample_documents: Option<u64>,
    },
    /// A `tokenizer.json` used as it is (a pretrained model's; `sinklab import` writes it into
    /// the run directory). `bos` and `eot` name its begin-of-sequence and end-of-document
    /// tokens; every special token of the file is kept out of random probes.
    File {
        path: PathBuf,
        bos: String,
        eot: String,
    },
}

impl TokenizerConfig {
    /// The vocabulary size this choice asks for (a BPE trained on a small corpus may end up
    /// smaller; the prepared tokenizer is the truth).
    pub fn requested_vocab(&self) -> anyhow::Result<usize> {
        Ok(match self {
            TokenizerConfig::Byte {} => crate::tokenizer::BYTE_VOCAB,
            TokenizerConfig::Bpe { vocab_size, .. } => *vocab_size,
            TokenizerConfig::File { path, bos, eot } => {
                crate::tokenizer::Tokenizer::load_named(path, bos, eot)?.vocab_size()
            }
        })
    }
}

fn default_bpe_vocab() -> usize {
    2048
}

impl Default for TokenizerConfig {
    fn default() -> Self {
        TokenizerConfig::Bpe {
            vocab_size: default_bpe_vocab(),
            sample_bytes: None,
            sample_documents: None,
        }
    }
}

/// `[optim]`: AdamW with decoupled weight decay (or SGD with momentum), LR schedule and
/// global-norm clipping.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OptimConfig {
    /// The update rule: AdamW (default) or SGD with momentum (Guo et al. 2024: SGD keeps the
    /// residual-state peak from forming).
    pub algorithm: Algorithm,
    /// Peak learning rate.
    pub lr: f64,
    /// AdamW's β₁, β₂ (not used by SGD).
    pub betas: [f64; 2],
    /// AdamW's ε (not used by SGD).
    pub eps: f64,
    pub weight_decay: f64,
    /// Which parameters weight decay touches.
    pub decay: DecayPolicy,
    /// Global-norm clipping threshold (over all gradients together). Absent: no clipping.
    pub grad_clip: Option<f64>,
    pub schedule: ScheduleConfig,
}

impl Default for OptimConfig {
    fn default() -> Self {
        Self {
            algorithm: Algorithm::default(),
            lr: 3e-3,
            betas: [0.9, 0.95],
            eps: 1e-8,
            weight_decay: 0.1,
            decay: DecayPolicy::default(),
            grad_clip: Some(1.0),
            schedule: ScheduleConfig::default(),
        }
    }
}

/// The optimiser's update rule.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum Algorithm {
    /// Adam with decoupled weight decay: `p ← p(1 − lr·wd) − lr·m̂/(√v̂ + ε)`.
    Adamw {},
    /// SGD with momentum μ and weight decay as an L2 term in the gradient (PyTorch's `SGD`):
    /// `g ← g + wd·p; b ← μ b + g` (b = g at the first step); `p ← p − lr·b`. μ defaults to
    /// 0.9.
    Sgd {
        #[serde(default = "default_momentum")]
        momentum: f64,
    },
}

fn default_momentum() -> f64 {
    0.9
}

impl Default for Algorithm {
    fn default() -> Self {
        Algorithm::Adamw {}
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

/// Learning-rate schedule. `warmup` is a number of steps of linear warmup from 0 (default
/// 100 in every schedule); `min_lr` defaults to 3e-4.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum ScheduleConfig {
    /// Warmup, then constant `lr` (Gu et al.'s "cosine" with min_lr = lr is this).
    Constant {
        #[serde(default = "default_warmup")]
        warmup: u64,
    },
    /// Warmup, then cosine decay from `lr` to `min_lr` at the last step.
    WarmupCosine {
        #[serde(default = "default_warmup")]
        warmup: u64,
        #[serde(default = "default_min_lr")]
        min_lr: f64,
    },
    /// Warmup, then linear decay from `lr` to `min_lr` at the last step.
    WarmupLinear {
        #[serde(default = "default_warmup")]
        warmup: u64,
        #[serde(default = "default_min_lr")]
        min_lr: f64,
    },
}

fn default_warmup() -> u64 {
    100
}
fn default_min_lr() -> f64 {
    3e-4
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig::WarmupCosine {
            warmup: default_warmup(),
            min_lr: default_min_lr(),
        }
    }
}

/// `[train]`: the loop.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TrainConfig {
    /// Optimizer steps.
    pub steps: u64,
    /// Tokens per optimizer step (a multiple of `micro_batch × ctx`).
    pub batch_tokens: usize,
    /// Sequences per forward/backward pass; gradients are accumulated over
    /// `batch_tokens / (micro_batch × ctx)` passes, which run concurrently on the CPU cores
    /// (one worker per core; the result does not depend on the number of workers).
    pub micro_batch: usize,
    /// Validation loss every N steps (and at the last step).
    pub eval_every: u64,
    /// Sequences of length ctx used for the validation loss.
    pub eval_sequences: usize,
    /// Checkpoint every N steps (and at the last step).
    pub checkpoint_every: u64,
    /// Keep only the newest K checkpoints.
    pub keep_checkpoints: usize,
    /// Write training scalars every N steps.
    pub log_every: u64,
    /// Start from these weights: a run directory (its newest checkpoint), a checkpoint
    /// directory or an imported pretrained model (`sinklab import`). Every parameter of this
    /// model found there with the same shape is loaded; the ones it lacks (a sink logit, KV
    /// bias, gate or sink tokens a variant adds) keep their fresh initialisation and are named
    /// in the log; a parameter there with no place here, or another shape, is an error. The
    /// optimiser and the step count start fresh. Ignored when resuming (the run's own
    /// checkpoint is newer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub init_from: Option<std::path::PathBuf>,
    /// Train only these parameters: patterns over parameter names (module paths as in
    /// checkpoints, `*` any run of characters: `["blocks.*.attn.sink_logit"]`,
    /// `["blocks.*.attn.wq.*", "blocks.*.attn.wk.*"]`). Every other parameter is frozen: it gets
    /// no gradient, no optimizer state and no weight decay, and keeps its value (in every
    /// checkpoint too). Absent: every parameter trains. A pattern that matches no parameter is
    /// an error. Meant with `init_from` (give a pretrained model a new part and train that).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trainable: Option<Vec<String>>,
    /// The precision of the training forward and backward (mixed precision): `"f32"`, or
    /// `"bf16"` / `"f16"` for every matrix product (linear layers, q·kᵀ, A·V, the head), whose
    /// inputs are cast down and outputs back to f32; master weights, gradients, optimizer
    /// state, norms, softmax, the residual stream and the loss stay f32. `"f16"` adds dynamic
    /// loss scaling. Probes, evaluation and checkpoints are f32.
    pub precision: Precision,
}

/// The dtype of the matrix products in a forward (`train.precision`, `eval --precision`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    #[default]
    F32,
    Bf16,
    F16,
}

impl Precision {
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::F16 => "f16",
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "f32" => Ok(Precision::F32),
            "bf16" => Ok(Precision::Bf16),
            "f16" => Ok(Precision::F16),
            _ => Err(format!("precision {s:?}: expected f32, bf16 or f16")),
        }
    }
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            steps: 1000,
            batch_tokens: 2048,
            micro_batch: 16,
            eval_every: 100,
            eval_sequences: 64,
            checkpoint_every: 250,
            keep_checkpoints: 3,
            log_every: 10,
            init_from: None,
            trainable: None,
            precision: Precision::F32,
        }
    }
}

/// `[metrics]`: sink metrics on a fixed probe set (Gu et al. §3: T = 64, 100 sequences).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Compute the probe metrics every N steps (and at step 0 and the last step).
    pub every: u64,
    /// Probe sequences drawn from the validation split.
    pub probe_sequences: usize,
    /// Probe sequence length T (BOS included when the run uses BOS).
    pub probe_len: usize,
    /// Thresholds ε of Sink_k^ε.
    pub eps: Vec<f64>,
    /// Report Sink_k for k = 1..=k_max.
    pub k_max: usize,
    /// The live head scores (`[metrics.heads]`).
    pub heads: HeadMetricsConfig,
}

/// `metrics.heads`: the head scores of docs/reference.md §11 (previous-token, induction, α₁,
/// AHON-LN; shares of the whole row) as live metrics, every `metrics.every` steps, on a seeded
/// repeat probe [first, R, R] (R: `n` distinct random ordinary tokens; first: BOS when the
/// run uses BOS, else one more random token), fixed for the whole run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HeadMetricsConfig {
    /// Log them: one scalar per (score, layer, head) `heads/{score}/layer{ll}_head{hh}`, and a
    /// (layer × head) map image per score.
    pub enabled: bool,
    /// Segment length n of the probe (T = 2n + 1 ≤ model.ctx). Absent: (min(model.ctx,
    /// metrics.probe_len) − 1) / 2 (at most a synthetic task's vocabulary − 1; 31 with the
    /// default ctx and probe_len), written out in resolved.toml.
    pub n: usize,
    /// Probe sequences.
    pub sequences: usize,
    /// Seed of the probe.
    pub seed: u64,
}

impl HeadMetricsConfig {
    /// The live probe that fits `ctx` and `probe_len` and, on a synthetic task, its
    /// `task_vocab` ordinary tokens (n distinct ones and a first): n = (min(ctx, probe_len) − 1)
    /// / 2, at most task_vocab − 1; off where that is below 2. Loading an experiment fills
    /// `metrics.heads` in with it.
    pub fn fitting(ctx: usize, probe_len: usize, task_vocab: Option<usize>) -> Self {
        let n = ((ctx.min(probe_len).max(1) - 1) / 2)
            .min(task_vocab.map_or(usize::MAX, |v| v.max(1) - 1));
        Self {
            enabled: n >= 2,
            n: n.max(2),
            ..Self::default()
        }
    }
}

impl Default for HeadMetricsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            n: 31,
            sequences: 8,
            seed: 0,
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        Self {
            every: 50,
            probe_sequences: 100,
            probe_len: 64,
            eps: EPS_GRID.to_vec(),
            k_max: 10,
            heads: HeadMetricsConfig::default(),
        }
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
        NormaliserConfig::Relu {} => "relu",
        NormaliserConfig::Elu1 {} => "elu1",
        NormaliserConfig::Elu1Normalised {} => "elu1_normalised",
        NormaliserConfig::Linear { .. } => "linear",
        NormaliserConfig::Softpick { .. } => "softpick",
        NormaliserConfig::ClippedSoftmax { .. } => "clipped_softmax",
        NormaliserConfig::ScalableSoftmax { .. } => "scalable_softmax",
    }
}

/// The `kind` string of an output gate, for messages.
pub fn gate_name(g: &GateConfig) -> &'static str {
    match g {
        GateConfig::None {} => "none",
        GateConfig::Headwise {} => "headwise",
        GateConfig::Elementwise {} => "elementwise",
        GateConfig::PerToken { .. } => "per_token",
        GateConfig::Sparse { .. } => "sparse",
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

impl Experiment {
    /// The fully resolved configuration as TOML (every default written out).
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).expect("experiment serialises")
    }

    /// Sequences per optimizer step and gradient-accumulation passes.
    pub fn accumulation(&self) -> usize {
        self.train.batch_tokens / (self.train.micro_batch * self.model.ctx)
    }

    /// `out_dir/name`.
    pub fn run_dir(&self) -> PathBuf {
        self.run.out_dir.join(&self.run.name)
    }
}
