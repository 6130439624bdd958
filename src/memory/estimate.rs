//! The memory one run needs, from its configuration alone: pure arithmetic, no model is built
//! and nothing touches Burn. Every figure is bytes of f32 tensors (4 bytes an element) plus the
//! runtime's own overhead.
//!
//! Notation (one micro-batch): B = `train.micro_batch`, T = `model.ctx`, N = `model.sink_tokens`,
//! S = N + T rows of the residual stream, C = slot columns + S columns of the attention weights,
//! H = `n_heads`, d = `d_model`, d_kv = key/value width (`n_kv_heads · d/H`), f = `d_ff`,
//! V = vocabulary, L = `n_layers`; A = micro-batches per optimizer step
//! (`batch_tokens / (micro_batch · ctx)`), W = micro-batches in flight at once (the workers:
//! one per core on the CPU, up to A; one per device on a GPU); P = trainable parameter
//! elements, P_c = constant ones (fixed W_init, U-SPA/E-SPA tables, untrained gains).
//!
//! ```text
//! weights      4 (P + P_c)
//! optimizer    4 k P                      # k = 2 AdamW (m, v); 1 SGD with momentum; 0 without
//! gradients    4 A P                      # every micro-batch's gradients are held until they are
//!                                         # summed in micro-batch order (crate::train::gradients)
//! activations  4 [L (B S a + B H S C m) + 3 B T d + backward]   per micro-batch in flight
//!   a          floats kept per row and layer for the backward pass (norms 3d each, q/k/v, the
//!              head outputs, the FFN's hidden tensors): see [`row_floats`]
//!   m          (B, H, S, C) attention matrices kept per layer by the normaliser (softmax: its
//!              exp and its output; see [`kept_matrices`]); the fused kernel keeps the same under
//!              autodiff (Burn's fallback backward)
//!   backward   the gradients of one layer alive at once: 6 (B, H, S, C) + 3 (B, S, f) + 4 (B, S, d)
//! logits       4 · 4 B T V                # log-softmax's exp kept, and three (B, T, V) gradients
//! step         gradients + W (activations + logits)
//! update       4 (P + 4 · largest parameter)   # merged gradient; new p, m, v of one tensor
//! evaluation   one micro-batch per worker without autograd; logits in blocks of ≤ 4M elements
//! probe pass   the probe set's residual streams, one layer's host copies (attention,
//!              keys, values, hidden states, inputs) and one chunk's device tensors
//! checkpoint   4 (P + P_c + k P) host copies of the weights and optimizer state (CPU only:
//!              on a GPU they are in RAM, not device memory)
//! peak         weights + optimizer + max(step, update, evaluation, probe pass, checkpoint)
//!              + runtime + allocator slack
//! ```
//!
//! Runtime: the binary, thread stacks and the allocator's arenas (mimalloc backed by 2 MiB
//! transparent huge pages; measured ≈ 120 MiB for a 62k-parameter model on 2 cores), plus
//! allocator slack: a quarter of the step's transient tensors, because freed buffers of
//! changing sizes are not always reused and the resident set grows over the first steps
//! (measured: a 2-worker natural-text run at ctx 512 held about 1 GB during its first step,
//! 2.3 GB by its fourth and 2.6 GB at step 200).
//! On a GPU the runtime term is the driver context and CubeCL's memory pools, not measured.
//!
//! Not counted: the data (shards are memory-mapped files the kernel can drop; the synthetic
//! task's sequences and the validation and probe batches are a few MB), the tokenizer, a BPE
//! training run before the first step (`data prepare` does it once, cached; 224 MB peak for the
//! natural-text corpus), TensorBoard buffers, and a resume's checkpoint read.
//!
//! Measured on the 2-core CPU machine (flex, peak RSS from `/usr/bin/time`, 20 runs: the
//! shipped quickstart, natural-text, Bigram-Backcopy-Shakespeare and four zoo experiments,
//! full length and short; the natural-text model at micro_batch 4 and 16, at ctx 128 to 1024
//! on one and two workers, at d 512 × 8 layers (36M parameters); the SmolLM2-135M shape):
//! peak RSS / estimate from 0.77 to 1.11. `tests/suite/memory.rs` asserts [0.5, 2] on three of
//! them.

use crate::config::{
    Algorithm, BlockConfig, FeatureMap, FfnConfig, GateConfig, KernelNorm, ModelConfig, NormConfig,
    NormaliserConfig, PositionsConfig, ShapingConfig, SlotConfig, SpaConfig, ValueOutputConfig,
};
use crate::config::{DeviceKind, Experiment};
use serde::Serialize;

/// Bytes of an f32 element.
pub const F32: u64 = 4;

/// The most logits an evaluation forms at once (`crate::eval::MAX_EVAL_LOGITS`, which sits in a
/// higher layer; `tests/suite/memory.rs` checks that the two agree).
pub const EVAL_LOGITS_BLOCK: u64 = 1 << 22;

/// Runtime overhead on the CPU: the binary, thread stacks, the allocator's arenas.
pub const CPU_RUNTIME: u64 = 120 << 20;

/// Runtime overhead on a GPU: driver context and memory pools (a guess: not measured here).
pub const GPU_RUNTIME: u64 = 512 << 20;

/// Allocator slack as a fraction of the step's transient tensors (gradients excluded).
pub const ALLOCATOR_SLACK: f64 = 0.25;

/// (B, H, S, C) gradient matrices alive at once in the backward pass of one attention layer.
const BACKWARD_MATRICES: u64 = 6;

/// (B, T, V) tensors of the log-softmax cross-entropy alive at once (its kept exp and three
/// gradients in the backward pass).
const LOGIT_TENSORS: u64 = 4;

/// The same with the fused cross-entropy kernel: the logits and their gradient.
const KERNEL_LOGIT_TENSORS: u64 = 2;

/// Parameter elements of a model, split by whether the optimizer updates them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct ParamCount {
    /// Parameters with a gradient (and optimizer moments).
    pub trainable: u64,
    /// Parameters that are saved but never trained (W_init, SPA tables, fixed slots and gains).
    pub constant: u64,
    /// Elements of the largest single parameter (the optimizer's update of it is transient).
    pub largest: u64,
}

impl ParamCount {
    fn add(&mut self, elements: usize, trainable: bool) {
        let n = elements as u64;
        if trainable {
            self.trainable += n;
        } else {
            self.constant += n;
        }
        self.largest = self.largest.max(n);
    }
    /// A linear layer `[d_in, d_out]` with an optional bias.
    fn linear(&mut self, d_in: usize, d_out: usize, bias: bool) {
        self.add(d_in * d_out, true);
        if bias {
            self.add(d_out, true);
        }
    }
    /// A reparameterised d×d layer: ΔW (and bias) trained, W_init constant, trained gains.
    fn reparam(&mut self, d: usize, bias: bool, gains: [crate::config::Gain; 2]) {
        self.linear(d, d, bias);
        self.add(d * d, false);
        for g in gains {
            if g.trainable {
                self.add(1, true);
            }
        }
    }
    fn norm(&mut self, n: &NormConfig, d: usize) {
        match n {
            NormConfig::RmsNorm { .. } => self.add(d, true),
            NormConfig::LayerNorm { .. } => {
                self.add(d, true);
                self.add(d, true);
            }
            NormConfig::None {} => {}
        }
    }
    /// All parameters.
    pub fn total(&self) -> u64 {
        self.trainable + self.constant
    }
}

/// Does the block have a feed-forward network?
fn has_ffn(m: &ModelConfig) -> bool {
    m.ffn != (FfnConfig::None {})
}

/// Norms per block, as `crate::model::Block::new` builds them.
fn norms_per_block(m: &ModelConfig) -> usize {
    if m.norm == (NormConfig::None {}) {
        return 0;
    }
    let second = match &m.block {
        BlockConfig::PreNorm { .. } | BlockConfig::PostNorm {} | BlockConfig::Sas { .. } => {
            has_ffn(m)
        }
        BlockConfig::Parallel { separate_norms, .. } => *separate_norms && has_ffn(m),
        BlockConfig::SasP { .. } => false,
    };
    1 + usize::from(second)
}

/// The four block gains (α_SA, β_SA, α_FF, β_FF) that are trained parameters of shape [1].
fn trained_block_gains(m: &ModelConfig) -> usize {
    let gains = match &m.block {
        BlockConfig::PreNorm { gains } => {
            vec![gains.alpha_sa, gains.beta_sa, gains.alpha_ff, gains.beta_ff]
        }
        BlockConfig::PostNorm {} => vec![],
        BlockConfig::Parallel { gains, .. } => vec![gains.alpha, gains.beta_sa, gains.beta_ff],
        BlockConfig::Sas { beta_ff } => vec![*beta_ff],
        BlockConfig::SasP { beta_sa, beta_ff } => vec![*beta_sa, *beta_ff],
    };
    gains.iter().filter(|g| g.trainable).count()
}

/// Every parameter `crate::model::Lm::new` builds for `m` with `vocab` tokens, counted from the
/// configuration (`tests/suite/memory.rs` checks it against the built model of every shipped
/// experiment).
pub fn param_count(m: &ModelConfig, vocab: usize) -> ParamCount {
    let mut p = ParamCount::default();
    let (d, h, f) = (m.d_model, m.n_heads, m.d_ff);
    let dh = m.d_head();
    let kv = m.kv_heads() * dh;
    p.add(vocab * d, true); // token embedding (V, d)
    match m.positions {
        PositionsConfig::Learned {} => p.add(m.ctx * d, true),
        PositionsConfig::Relative { buckets, .. } => p.add(buckets * h, true),
        _ => {}
    }
    if m.sink_tokens > 0 {
        p.add(m.sink_tokens * d, true);
    }
    if let Some(n) = &m.input_norm {
        p.norm(n, d);
    }
    let a = &m.attention;
    for layer in 0..m.n_layers {
        for _ in 0..norms_per_block(m) {
            p.norm(&m.norm, d);
        }
        for _ in 0..trained_block_gains(m) {
            p.add(1, true);
        }
        let qkv_bias = m.bias || m.qkv_bias;
        p.linear(d, d, qkv_bias); // W_Q
        p.linear(d, kv, qkv_bias); // W_K
        match a.value_output {
            ValueOutputConfig::Dense {} => {
                p.linear(d, kv, qkv_bias); // W_V
                p.linear(d, d, m.bias); // W_O
            }
            ValueOutputConfig::Reparam { alpha, beta, .. } => {
                p.reparam(d, m.bias, [alpha, beta]);
                p.reparam(d, m.bias, [alpha, beta]);
            }
            ValueOutputConfig::Identity { first_layer_value } => {
                if layer == 0 && first_layer_value {
                    let fixed = crate::config::Gain {
                        init: 1.0,
                        trainable: false,
                    };
                    p.reparam(d, m.bias, [fixed, fixed]);
                }
            }
        }
        match a.gate {
            GateConfig::None {} => {}
            GateConfig::Headwise {} => p.linear(d, h, m.bias),
            GateConfig::Elementwise {} => p.linear(d, d, m.bias),
            GateConfig::PerToken { .. } => p.linear(dh, h, true), // (H, d_h) and a bias (H)
            GateConfig::Sparse { dims } => p.linear(dims, h, false),
        }
        if let NormaliserConfig::ScalableSoftmax {
            per_head,
            trainable,
            ..
        } = a.normaliser
        {
            p.add(if per_head { h } else { 1 }, trainable);
        }
        if let NormaliserConfig::Linear {
            feature_map: FeatureMap::Mlp,
            ..
        } = a.normaliser
        {
            p.add(dh * dh, true);
            p.add(dh * dh, true);
        }
        match a.shaping {
            ShapingConfig::None {} => {}
            ShapingConfig::ValueSkipinit { trainable, .. } => {
                (0..2).for_each(|_| p.add(h, trainable));
            }
            ShapingConfig::Shaped { trainable, .. } => (0..3).for_each(|_| p.add(h, trainable)),
        }
        let rows = |shared: bool| if shared { 1 } else { h };
        match &a.slot {
            SlotConfig::None {} => {}
            SlotConfig::SinkLogit { trainable, .. } => p.add(h, *trainable),
            SlotConfig::KvBias { shared, .. } => {
                p.add(rows(*shared) * dh, true);
                p.add(rows(*shared) * dh, true);
            }
            SlotConfig::KBias {
                shared,
                learnable_dims,
                trainable,
                ..
            } => {
                let r = rows(*shared);
                if *trainable {
                    p.add(r * learnable_dims.unwrap_or(dh), true);
                } else {
                    p.add(r * dh, false);
                }
                p.add(r * dh, false); // v*, fixed
            }
            SlotConfig::VBias { shared, .. } => p.add(rows(*shared) * dh, true),
            SlotConfig::MemoryKv { n, .. } => {
                p.add(h * n * dh, true);
                p.add(h * n * dh, true);
            }
        }
        if a.spa != (SpaConfig::None {}) {
            p.add(m.ctx * m.ctx, false); // Γ_l
            p.add(m.ctx, false); // D_l
        }
        if has_ffn(m) {
            let gated = matches!(
                m.ffn,
                FfnConfig::Swiglu {} | FfnConfig::Geglu {} | FfnConfig::Reglu {}
            );
            if gated {
                p.linear(d, f, m.bias);
            }
            p.linear(d, f, m.bias);
            p.linear(f, d, m.bias);
        }
    }
    if !matches!(m.block, BlockConfig::PostNorm {}) {
        p.norm(&m.norm, d); // final norm
    }
    if m.head == crate::config::HeadKind::Untied {
        p.linear(d, vocab, m.bias);
    }
    p
}

/// (B, S, f) tensors the FFN keeps for the backward pass (e.g. SwiGLU: x W_gate, its sigmoid,
/// silu, x W_up and their product).
fn ffn_kept(ffn: FfnConfig) -> u64 {
    match ffn {
        FfnConfig::Relu {} => 1,
        FfnConfig::Gelu {} => 2,
        FfnConfig::GeluTanh {} => 5,
        FfnConfig::Silu {} => 3,
        FfnConfig::Swiglu {} => 5,
        FfnConfig::Geglu {} => 4,
        FfnConfig::Reglu {} => 3,
        FfnConfig::None {} => 0,
    }
}

/// Floats kept per row of the residual stream and per layer for the backward pass (the row
/// term `a` of the module docs): 3d per norm (its input, the normalised input, the output),
/// the query (2d with RoPE: the raw and scaled query; d without), keys (2 d_kv with RoPE, d_kv
/// without; + d when grouped-query attention repeats them), values (d_kv; + d repeated), the
/// concatenated head outputs (d; 2d + the gate with an output gate), a linear kernel's feature
/// maps, d per trained block gain, and the FFN's [`ffn_kept`] (B, S, f) tensors.
pub fn row_floats(m: &ModelConfig) -> u64 {
    let (d, f) = (m.d_model as u64, m.d_ff as u64);
    let kv = (m.kv_heads() * m.d_head()) as u64;
    let a = &m.attention;
    let rope = matches!(m.positions, PositionsConfig::Rope { .. });
    let repeated = if kv < d { d } else { 0 };
    let mut n = 3 * d * norms_per_block(m) as u64;
    n += if rope { 2 * d } else { d }; // queries
    n += if rope { 2 * kv } else { kv } + repeated; // keys
    n += kv + repeated; // values
    n += d; // head outputs, concatenated for W_O
    n += match a.gate {
        GateConfig::None {} => 0,
        GateConfig::Headwise {} | GateConfig::PerToken { .. } | GateConfig::Sparse { .. } => {
            d + m.n_heads as u64
        }
        GateConfig::Elementwise {} => 2 * d,
    };
    n += match a.normaliser {
        NormaliserConfig::Linear { feature_map, .. } => match feature_map {
            FeatureMap::Identity => 0,
            FeatureMap::Elu1 | FeatureMap::Mlp => 2 * (d + kv),
        },
        _ => 0,
    };
    n += d * trained_block_gains(m) as u64;
    n + ffn_kept(m.ffn) * f
}

/// (B, H, S, C) attention matrices one layer keeps for the backward pass (the `m` of the module
/// docs): the normaliser's kept tensors (softmax: exp(s − max) and the weights; sigmoid,
/// softmax_n, ReLU: the activation and the weights; the log-space normalisers more; softpick:
/// the shifted exponentials, their absolute values and the weights; clipped softmax: the
/// softmax's two, the stretched weights and the clipped ones), one more for the U-SPA/E-SPA
/// row rescaling and one for shaping.
pub fn kept_matrices(m: &ModelConfig) -> u64 {
    let a = &m.attention;
    let base = match a.normaliser {
        NormaliserConfig::Softmax {}
        | NormaliserConfig::SoftmaxN { .. }
        | NormaliserConfig::ScalableSoftmax { .. } => 2,
        NormaliserConfig::Softpick { .. } => 4,
        NormaliserConfig::ClippedSoftmax { .. } => 4,
        NormaliserConfig::Sigmoid { .. } => 2,
        NormaliserConfig::Relu {} => 3,
        NormaliserConfig::SigmoidNormalised {} | NormaliserConfig::Elu1Normalised {} => 4,
        NormaliserConfig::Elu1 {} => 4,
        NormaliserConfig::Linear { normaliser, .. } => match normaliser {
            KernelNorm::None => 1,
            KernelNorm::MaxAbsSum | KernelNorm::Sum => 2,
        },
    };
    let spa = u64::from(a.spa != (SpaConfig::None {}));
    let shaping = u64::from(a.shaping != (ShapingConfig::None {}));
    base + spa + shaping
}

/// Which phase of a step holds the most memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Forward and backward of the micro-batches in flight, earlier gradients held.
    Step,
    /// The optimizer's update.
    Update,
    /// Validation loss.
    Eval,
    /// The probe pass (sink metrics).
    Probe,
    /// Host copies of the weights and optimizer state for a checkpoint.
    Checkpoint,
}

impl Phase {
    pub fn name(self) -> &'static str {
        match self {
            Phase::Step => "training step",
            Phase::Update => "optimizer update",
            Phase::Eval => "evaluation",
            Phase::Probe => "probe pass",
            Phase::Checkpoint => "checkpoint",
        }
    }
}

/// The estimate of one run's peak memory on its device, every term in bytes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Estimate {
    pub device: DeviceKind,
    pub vocab: usize,
    pub params: ParamCount,
    /// Micro-batches per optimizer step (A) and in flight at once (W).
    pub micro_batches: usize,
    pub workers: usize,
    pub weights: u64,
    pub optimizer: u64,
    /// Every micro-batch's gradients, held until they are summed.
    pub gradients: u64,
    /// Kept activations and backward transients of one micro-batch, logits excluded.
    pub activations: u64,
    /// Of which the (B, H, S, C) attention matrices.
    pub attention: u64,
    /// Log-softmax cross-entropy over the vocabulary, one micro-batch.
    pub logits: u64,
    pub step: u64,
    pub update: u64,
    pub eval: u64,
    pub probe: u64,
    /// Host copies for a checkpoint (0 on a GPU: they are in RAM).
    pub checkpoint: u64,
    pub runtime: u64,
    pub slack: u64,
    pub peak_phase: Phase,
    /// The estimated peak.
    pub total: u64,
}

/// Micro-batches in flight at once: one per CPU core up to A on `flex` (`threads` = rayon's
/// threads), one on a GPU (one per device, and device 0 is the one that fills up).
pub fn workers(exp: &Experiment, threads: usize) -> usize {
    match exp.run.device {
        DeviceKind::Flex => exp.accumulation().clamp(1, threads.max(1)),
        DeviceKind::Wgpu | DeviceKind::Cuda => 1,
    }
}

/// The peak memory of training `exp` with `vocab` tokens and `workers` micro-batches in
/// flight; `trainable` the parameter elements `train.trainable` leaves trainable (None: every
/// parameter the model trains): optimizer state and gradients are counted for those only.
pub fn estimate(
    exp: &Experiment,
    vocab: usize,
    workers: usize,
    trainable: Option<u64>,
) -> Estimate {
    let m = &exp.model;
    let params = param_count(m, vocab);
    let (all, pc) = (params.trainable, params.constant);
    let p = trainable.map_or(all, |t| t.min(all));
    let k = match exp.optim.algorithm {
        Algorithm::Adamw {} => 2,
        Algorithm::Sgd { momentum } => u64::from(momentum != 0.0),
    };
    let u = |x: usize| x as u64;
    let (b, t, h, d, f, v, l) = (
        u(exp.train.micro_batch),
        u(m.ctx),
        u(m.n_heads),
        u(m.d_model),
        u(m.d_ff),
        u(vocab),
        u(m.n_layers),
    );
    let slots = u(m.attention.slot.slot_columns());
    let s = u(m.sink_tokens) + t;
    let c = slots + s;
    let a_steps = u(exp.accumulation().max(1));
    let w = u(workers.max(1));

    let weights = F32 * (all + pc);
    let optimizer = F32 * k * p;
    let gradients = F32 * a_steps * p;
    let matrix = b * h * s * c; // one (B, H, S, C) attention matrix
    // Where the CPU kernels run (crate::kernels): the fused cross-entropy keeps the logits and
    // their gradient only. Where the attention kernel runs (flex, wgpu, cuda): it keeps no
    // (B, H, S, C) matrix (a log-sum-exp row per query, and one block per task in the
    // backward on the CPU; nothing on the GPU).
    // (The CubeCL half may give way to the explicit path at a shape where that measured
    // faster: the estimate counts the kernel's memory, as it cannot know the measurement.)
    let kernels = crate::kernels::runs_on(exp.run.device).is_ok();
    let choose = |p| crate::kernels::attention::choose(m, exp.run.device, p).is_ok();
    let fused = choose(crate::config::Precision::F32);
    let fused_train = choose(exp.train.precision);
    let attention = if fused_train {
        0
    } else {
        F32 * (l * kept_matrices(m) + BACKWARD_MATRICES) * matrix
    };
    let rows = b * s;
    let kept_rows = l * rows * row_floats(m) + 3 * b * t * d;
    let backward_rows = rows * (3 * f + 4 * d);
    let activations = attention + F32 * (kept_rows + backward_rows);
    let logits =
        F32 * if kernels {
            KERNEL_LOGIT_TENSORS
        } else {
            LOGIT_TENSORS
        } * b
            * t
            * v;
    let transient = w * (activations + logits);
    let step = gradients + transient;
    let update = F32 * (p + 4 * params.largest);
    // Evaluation: one micro-batch per worker (`crate::eval::eval_loss`) through one block at a
    // time without autograd (the manual kernel forms ~3 attention matrices; the fused one
    // none), logits in bounded blocks.
    let eval_matrices = if fused { 0 } else { 3 * matrix };
    let eval =
        w * F32 * (eval_matrices + rows * (3 * f + 6 * d) + 3 * (b * t * v).min(EVAL_LOGITS_BLOCK));
    let probe = probe_bytes(exp, vocab);
    let gpu = exp.run.device != DeviceKind::Flex;
    let checkpoint = if gpu { 0 } else { F32 * (p + pc + k * p) };
    let phases = [
        (Phase::Step, step),
        (Phase::Update, update),
        (Phase::Eval, eval),
        (Phase::Probe, probe),
        (Phase::Checkpoint, checkpoint),
    ];
    let (peak_phase, peak) = phases
        .into_iter()
        .fold((Phase::Step, 0), |acc, x| if x.1 > acc.1 { x } else { acc });
    let runtime = if gpu { GPU_RUNTIME } else { CPU_RUNTIME };
    let slack = (ALLOCATOR_SLACK * transient.max(probe) as f64) as u64;
    let total = weights + optimizer + peak + runtime + slack;
    Estimate {
        device: exp.run.device,
        vocab,
        params,
        micro_batches: a_steps as usize,
        workers: w as usize,
        weights,
        optimizer,
        gradients,
        activations,
        attention,
        logits,
        step,
        update,
        eval,
        probe,
        checkpoint,
        runtime,
        slack,
        peak_phase,
        total,
    }
}

/// The probe pass (`crate::eval::probe_each`): the residual streams of every probe chunk
/// (N_p (N + T_p) d), one layer's host copies for the whole probe set (attention N_p H T_p C_p
/// and keys, values, hidden states and inputs, 4 N_p T_p d; twice, for the metrics computed
/// from them), and one chunk of B sequences on the device (its attention weights and their
/// host copies, 6 B H S_p C_p, the block's FFN 3 B S_p f and five (B, S_p, d) records).
pub fn probe_bytes(exp: &Experiment, _vocab: usize) -> u64 {
    let m = &exp.model;
    let u = |x: usize| x as u64;
    let (np, tp) = (u(exp.metrics.probe_sequences), u(exp.metrics.probe_len));
    let (h, d, f) = (u(m.n_heads), u(m.d_model), u(m.d_ff));
    let sp = u(m.sink_tokens) + tp;
    let cp = u(m.attention.slot.slot_columns()) + sp;
    let chunk = u(exp.train.micro_batch).min(np);
    let streams = np * sp * d;
    let host = 2 * (np * h * tp * cp + 4 * np * tp * d);
    let device = chunk * (6 * h * sp * cp + 3 * sp * f + 5 * sp * d);
    F32 * (streams + host + device)
}

/// `n` bytes for people: "512 B", "12.3 MiB", "3.3 TiB".
pub fn human(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut x = n as f64;
    let mut i = 0;
    while x >= 1024.0 && i + 1 < UNITS.len() {
        x /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else if x >= 100.0 {
        format!("{x:.0} {}", UNITS[i])
    } else {
        format!("{x:.1} {}", UNITS[i])
    }
}

/// An element count for people: "62k", "1.38M", "825G".
pub fn count(n: u64) -> String {
    let x = n as f64;
    if x >= 1e9 {
        format!("{:.3}G", x / 1e9)
    } else if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.0}k", x / 1e3)
    } else {
        format!("{n}")
    }
}

impl Estimate {
    /// One line: the peak as the sum of its terms, then every phase.
    pub fn line(&self) -> String {
        let mut sum = vec![format!("weights {}", human(self.weights))];
        if self.optimizer > 0 {
            sum.push(format!("optimizer {}", human(self.optimizer)));
        }
        let phase = match self.peak_phase {
            Phase::Step => self.step,
            Phase::Update => self.update,
            Phase::Eval => self.eval,
            Phase::Probe => self.probe,
            Phase::Checkpoint => self.checkpoint,
        };
        sum.push(format!("{} {}", self.peak_phase.name(), human(phase)));
        sum.push(format!("runtime {}", human(self.runtime)));
        sum.push(format!("slack {}", human(self.slack)));
        let checkpoint = if self.checkpoint > 0 {
            format!("; checkpoint {}", human(self.checkpoint))
        } else {
            String::new()
        };
        format!(
            "{} = {} ({} parameters, vocab {}; training step: gradients {} × {} + {} × \
             (activations {} incl. attention {} + logits {}); optimizer update {}; probe pass \
             {}; evaluation {}{checkpoint})",
            human(self.total),
            sum.join(" + "),
            count(self.params.total()),
            self.vocab,
            self.micro_batches,
            human(self.gradients / self.micro_batches.max(1) as u64),
            if self.workers == 1 {
                "1 micro-batch in flight".to_string()
            } else {
                format!("{} micro-batches in flight", self.workers)
            },
            human(self.activations),
            human(self.attention),
            human(self.logits),
            human(self.update),
            human(self.probe),
            human(self.eval),
        )
    }
}
