//! The command line: one module per command, each owning its arguments (a `clap::Args`
//! struct), the call into the library and the printing. `main.rs` parses [`Cli`] and calls
//! [`run`].

pub mod ablate;
pub mod analyze;
pub mod bench;
pub mod check;
pub mod dark;
pub mod data;
pub mod eval;
pub mod export;
pub mod generate;
pub mod heads;
pub mod import;
pub mod init_check;
pub mod patch;
pub mod report;
pub mod stream_eval;
pub mod sweep;
pub mod train;

use crate::config::{self, DeviceKind, Experiment};
use crate::run::{self, OpenRun};
use anyhow::{Result, anyhow};
use clap::{Parser, Subcommand};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "sinklab",
    version,
    about = "Train and measure transformers for attention-sink research (Burn backend)",
    long_about = "sinklab trains causal LMs defined in strict TOML experiment files and measures \
                  attention sinks (Sink_k^ε, first-token importance, massive activations) while they \
                  train, writing TensorBoard events and metrics.jsonl.\n\nQuickstart:\n  \
                  sinklab train experiments/quickstart.toml   (an attention sink forms in under a minute)\n  tensorboard --logdir runs"
)]
pub struct Cli {
    #[command(subcommand)]
    pub cmd: Cmd,
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Train an experiment: writes runs/NAME/{resolved.toml, provenance.json, metrics.jsonl, tb/, checkpoints/}.
    Train(train::Args),
    /// Validate experiment files and print every error (file, TOML path, what is valid).
    Check(check::Args),
    /// Validation loss and sink metrics of a trained run directory or checkpoint directory.
    Eval(eval::Args),
    /// Look inside a checkpoint: Sink_k^eps on natural / random / repeated-token probes, slot
    /// masses, first-token importance heat map, attention maps, attention bars, activations
    /// (norms, massive channels, key/value norms) and the q·k angle/norm decomposition. Writes
    /// analysis.json and PNG plots (default RUN/analysis/step_N/).
    Analyze(analyze::Args),
    /// Dark signals (Cancedda 2024): SVD bands of W_U and W_E, band energy of the residual
    /// stream (first token vs rest), head/MLP write weights on the bands, and spectral filters
    /// swept over k, applied one block input at a time (the paper's per-layer curves): Φ_k (W_U
    /// bands 1..k), Ω_k (1..k + the dark band), Ψ_k = I − Φ_e,(k+1):n Φ_u,(k+1):n (the joint
    /// W_E/W_U tail removed), Φ_e,k (W_E bands 1..k) and a random-orthonormal-basis control,
    /// with ΔNLL and Sink1 for each. Writes dark.json and PNG plots.
    Dark(dark::Args),
    /// Attention heads (Zheng et al. 2024's survey): previous-token, duplicate-token and
    /// induction scores per (layer, head) on a probe ([first, R, R] by default; or
    /// TransformerLens's detect_head measures), dormancy (α1, AHON, AHON-LN, entropy, value
    /// drain, slot mass), the OV copying score from the weights, a class per head. Writes
    /// heads.json and one heat map per score.
    Heads(heads::Args),
    /// Ablate attention heads (zero, mean, resample, move-to-first) or key/value groups: every
    /// head on its own (a Δmetric map per layer and head, with each head's dormancy), or a
    /// named set against matched-random sets from the same layers. Writes ablate.json and
    /// PNGs.
    Ablate(ablate::Args),
    /// Activation patching between clean and corrupted prompts (a JSON Lines file, or the
    /// built-in repeat task) at one site — z, q, k, v, pattern, resid_pre, attn_out, mlp_out —
    /// by head, head × position or layer × position, denoising or noising, with the normalised
    /// logit difference; and directional addition of a stored direction. Writes patch.json and
    /// PNGs.
    Patch(patch::Args),
    /// Corpus preparation (`data prepare`: stream a corpus of any size into memory-mapped
    /// token shards) and the batch loader's speed (`data bench`).
    Data(data::Args),
    /// Import a pretrained model (a Hugging Face directory of the LLaMA family, GPT-2 or
    /// GPT-NeoX, or a llama GGUF file) as a run directory: resolved.toml, the model's
    /// tokenizer.json and step 0's checkpoint, ready for eval, analyze, dark, stream-eval,
    /// generate and fine-tuning (train.init_from).
    Import(import::Args),
    /// Export a run whose model is exactly a LLaMA (pre-norm RMSNorm, SwiGLU, RoPE, softmax,
    /// no extra parameters; q/k/v biases make it Qwen2) as a Hugging Face model directory:
    /// config.json, model.safetensors, tokenizer.json. Anything else is refused with every
    /// difference named.
    Export(export::Args),
    /// Sample a continuation with a KV cache (temperature, top-k).
    Generate(generate::Args),
    /// StreamingLLM evaluation: token-by-token perplexity of a long text with a cache of the
    /// first S plus the last W tokens (positions in cache coordinates), against window only
    /// (0 + L), one sink (1 + (L − 1)) and a sliding window re-computed over the last L tokens,
    /// all with the same budget L = S + W, and dense attention over the whole text (past the
    /// training context where the positions exist); --kept 0,1,2,4 picks the kept-token counts
    /// instead. Writes stream.json and stream_ppl.png (perplexity against position).
    StreamEval(stream_eval::Args),
    /// Run a sweep: expand FILE into runs (axes × seeds), run them N at a time as child
    /// processes, skip finished runs, resume unfinished ones; a failing run is recorded and the
    /// others go on. Ctrl-C checkpoints every running run and stops.
    Sweep(sweep::Args),
    /// Summarise a sweep directory: report.md, report.csv and report.json (mean ± std over
    /// seeds of the final Sink1, slot Sink1*, largest Sink_k and its position k, first-token
    /// attention mass, val loss and norm ratio; the step at which Sink1 first exceeds a
    /// threshold) and PNG plots (final Sink against each axis, Sink1 against step).
    Report(report::Args),
    /// Signal propagation at init: build the model, push validation sequences through it and
    /// report every layer's token kernel (mean off-diagonal cosine: 1 = rank collapse; diagonal
    /// scale ‖x‖²/d; for U-SPA / E-SPA the distance to the target Σ_l and the smallest entry of
    /// A_l).
    InitCheck(init_check::Args),
    /// Training throughput (tokens/s), model FLOPs utilisation and peak memory of an experiment's model.
    Bench(bench::Args),
}

/// Run a parsed command line.
pub fn run(cli: Cli) -> Result<()> {
    // Only `train` (and `bench --allreduce`) run as several MPI ranks; any other command
    // started by mpirun or srun would run once per rank, each writing the same files.
    if !matches!(cli.cmd, Cmd::Train(_) | Cmd::Bench(_))
        && let Some(l) = crate::dist::launch::detect()
    {
        anyhow::bail!(
            "this process is rank {} of {} started by {}: only `sinklab train` (and `sinklab \
             bench --allreduce`) run as several ranks; this command would run {} times. Start it \
             as one process, without {}",
            l.rank,
            l.size,
            l.launcher,
            l.size,
            l.launcher
        );
    }
    match cli.cmd {
        Cmd::Train(a) => train::run(a),
        Cmd::Check(a) => check::run(a),
        Cmd::Eval(a) => eval::run(a),
        Cmd::Analyze(a) => analyze::run(a),
        Cmd::Dark(a) => dark::run(a),
        Cmd::Heads(a) => heads::run(a),
        Cmd::Ablate(a) => ablate::run(a),
        Cmd::Patch(a) => patch::run(a),
        Cmd::Data(a) => data::run(a),
        Cmd::Generate(a) => generate::run(a),
        Cmd::Import(a) => import::run(a),
        Cmd::Export(a) => export::run(a),
        Cmd::StreamEval(a) => stream_eval::run(a),
        Cmd::Sweep(a) => sweep::run(a),
        Cmd::Report(a) => report::run(a),
        Cmd::InitCheck(a) => init_check::run(a),
        Cmd::Bench(a) => bench::run(a),
    }
}

/// `--set` overrides and `--device`, for the commands that read an experiment file.
#[derive(clap::Args, Clone)]
pub struct Overrides {
    /// Override a config value: --set optim.lr=1e-3 (repeatable; value parsed as TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    pub set: Vec<String>,
    /// Backend device (shorthand for --set run.device=...): flex, wgpu or cuda.
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<String>,
}

impl Overrides {
    /// The overrides as `--set` assignments, `--device` last.
    pub fn all(&self) -> Result<Vec<String>> {
        let mut v = self.set.clone();
        if let Some(d) = &self.device {
            parse_device(d)?;
            v.push(format!("run.device=\"{d}\""));
        }
        Ok(v)
    }

    /// Load `path` with these overrides.
    pub fn load(&self, path: &Path) -> Result<Experiment> {
        Ok(config::load(path, &self.all()?)?)
    }
}

/// `--device` of the commands that open a run (default: the run's own device).
#[derive(clap::Args, Clone)]
pub struct RunDevice {
    /// Backend device (default: the run's).
    #[arg(long)]
    pub device: Option<String>,
}

impl RunDevice {
    /// Open a run directory (newest checkpoint) or checkpoint directory on this device.
    pub fn open(&self, path: &Path) -> Result<OpenRun> {
        let device = self.device.as_deref().map(parse_device).transpose()?;
        run::open_run(path, device, &mut |m| eprintln!("{m}"))
    }
}

/// A device name, or an error that lists the valid ones.
pub fn parse_device(d: &str) -> Result<DeviceKind> {
    DeviceKind::parse(d).ok_or_else(|| {
        anyhow!(
            "--device {d}: unknown device; valid: {}",
            DeviceKind::ALL.join(", ")
        )
    })
}

/// Options shared by `analyze` and `dark`.
#[derive(clap::Args, Clone)]
pub struct AnalysisArgs {
    /// Output directory (default RUN/analysis/step_N/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write scalars and plots to the run's TensorBoard (at the checkpoint's step), under
    /// the command's own prefix.
    #[arg(long)]
    pub tensorboard: bool,
    /// Replace the report of an earlier analysis of the same name (without it, an existing
    /// report stops the command before it computes anything).
    #[arg(long)]
    pub force: bool,
    /// Seed of the random probes / random basis.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    #[command(flatten)]
    pub device: RunDevice,
}

impl AnalysisArgs {
    /// Where the analysis writes.
    pub fn destination(&self) -> crate::analysis::Destination {
        crate::analysis::Destination {
            out: self.out.clone(),
            tensorboard: self.tensorboard,
            force: self.force,
        }
    }
}
