//! The `sinklab` command line.

use anyhow::{Context, Result, anyhow};

/// mimalloc keeps freed tensor buffers mapped, which removes most page-fault time from the
/// training loop (glibc malloc returns large buffers to the OS every step).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use clap::{Parser, Subcommand};
use sinklab::config::{self, DeviceKind, Experiment, TokenizerConfig};
use sinklab::{backend, bench, data, train};
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(
    name = "sinklab",
    version,
    about = "Train and measure transformers for attention-sink research (Burn backend)",
    long_about = "sinklab trains causal LMs defined in strict TOML experiment files and measures \
                  attention sinks (Sink_k^ε, first-token importance, massive activations) while they \
                  train, writing TensorBoard events and metrics.jsonl.\n\nQuickstart:\n  \
                  sinklab train experiments/quickstart.toml\n  tensorboard --logdir runs"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(clap::Args, Clone)]
struct Overrides {
    /// Override a config value: --set optim.lr=1e-3 (repeatable; value parsed as TOML).
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Backend device (shorthand for --set run.device=...): flex, wgpu or cuda.
    #[arg(long, value_name = "DEVICE")]
    device: Option<String>,
}

impl Overrides {
    fn all(&self) -> Result<Vec<String>> {
        let mut v = self.set.clone();
        if let Some(d) = &self.device {
            if DeviceKind::parse(d).is_none() {
                return Err(anyhow!(
                    "--device {d}: unknown device; valid: {}",
                    DeviceKind::ALL.join(", ")
                ));
            }
            v.push(format!("run.device=\"{d}\""));
        }
        Ok(v)
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Train an experiment: writes runs/NAME/{resolved.toml, provenance.json, metrics.jsonl, tb/, checkpoints/}.
    Train {
        /// Experiment TOML file.
        experiment: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
        /// Continue from the newest checkpoint of the run directory (same config required).
        #[arg(long)]
        resume: bool,
        /// Stop after this many optimizer steps, checkpointing first (as if interrupted).
        #[arg(long, value_name = "STEPS")]
        stop_after: Option<u64>,
        /// Plain log lines instead of a progress bar.
        #[arg(long)]
        quiet: bool,
    },
    /// Validate experiment files and print every error (file, TOML path, what is valid).
    Check {
        /// Experiment TOML files.
        #[arg(required = true)]
        experiments: Vec<PathBuf>,
        #[command(flatten)]
        overrides: Overrides,
    },
    /// Validation loss and sink metrics of a trained run directory or checkpoint directory.
    Eval {
        /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
        path: PathBuf,
        /// Backend device to evaluate on (default: the run's).
        #[arg(long)]
        device: Option<String>,
        /// Print the full report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Signal propagation at init: build the model, push validation sequences through it and
    /// report every layer's token kernel (mean off-diagonal cosine: 1 = rank collapse; diagonal
    /// scale ‖x‖²/d; for U-SPA / E-SPA the distance to the target Σ_l and the smallest entry of
    /// A_l).
    InitCheck {
        /// Experiment TOML file.
        experiment: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
        /// Probe sequences.
        #[arg(long, default_value_t = 16)]
        sequences: usize,
        /// Tokens per probe sequence (default: model.ctx).
        #[arg(long)]
        len: Option<usize>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Training throughput (tokens/s), model FLOPs utilisation and peak memory of an experiment's model.
    Bench {
        /// Experiment TOML file (model, micro_batch, ctx and optimizer are taken from it).
        experiment: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
        /// Untimed warmup steps.
        #[arg(long, default_value_t = 5)]
        warmup: usize,
        /// Timed steps per round.
        #[arg(long, default_value_t = 30)]
        steps: usize,
        /// Timed rounds (the median is reported).
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// fp32 peak of the machine in GFLOP/s (default: estimated from /proc/cpuinfo).
        #[arg(long)]
        peak_gflops: Option<f64>,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

fn load(path: &Path, overrides: &Overrides) -> Result<Experiment> {
    Ok(config::load(path, &overrides.all()?)?)
}

fn main() {
    // Never return freed pages to the OS: the training loop frees and reallocates the same
    // tensor sizes every step, and re-faulting zeroed pages cost ~5% of a step.
    // `mi_option_purge_delay` is entry 15 of `mi_option_e` in both mimalloc v2 and v3
    // (c_src/mimalloc/v*/include/mimalloc.h); -1 means "never purge".
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    // SAFETY: sets a process-wide allocator option; no memory is touched.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1);
    }
    if let Err(e) = real_main() {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

fn real_main() -> Result<()> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Train {
            experiment,
            overrides,
            resume,
            stop_after,
            quiet,
        } => {
            let exp = load(&experiment, &overrides)?;
            let opts = train::TrainOptions {
                resume,
                stop_after,
                quiet,
            };
            let summary = train::train(&exp, &opts, &mut |m| eprintln!("{m}"))?;
            println!(
                "done: {} steps, loss {:.4} -> {:.4}, val loss {:.4}, Sink1(eps=0.3) {:.1}%, {:.0} tokens/s\nrun directory: {}\nview: tensorboard --logdir {}",
                summary.steps_done,
                summary.first_loss.unwrap_or(f64::NAN),
                summary.last_loss.unwrap_or(f64::NAN),
                summary.last_val_loss.unwrap_or(f64::NAN),
                summary.last_sink1.unwrap_or(f64::NAN),
                summary.tokens_per_s,
                summary.run_dir.display(),
                summary.run_dir.display()
            );
        }
        Cmd::Check {
            experiments,
            overrides,
        } => {
            let mut failed = 0;
            for path in &experiments {
                match load(path, &overrides) {
                    Ok(exp) => println!(
                        "ok: {} ({} layers × d {}, {} steps)",
                        path.display(),
                        exp.model.n_layers,
                        exp.model.d_model,
                        exp.train.steps
                    ),
                    Err(e) => {
                        failed += 1;
                        eprint!("{e}");
                    }
                }
            }
            if failed > 0 {
                return Err(anyhow!(
                    "{failed} of {} files have errors",
                    experiments.len()
                ));
            }
        }
        Cmd::Eval { path, device, json } => {
            let dev_kind = match &device {
                Some(d) => Some(DeviceKind::parse(d).ok_or_else(|| {
                    anyhow!(
                        "--device {d}: unknown device; valid: {}",
                        DeviceKind::ALL.join(", ")
                    )
                })?),
                None => None,
            };
            // Read the run's config first to pick the device.
            let (run_dir0, _) = train::locate_checkpoint(&path)?;
            let text =
                std::fs::read_to_string(run_dir0.join("resolved.toml")).with_context(|| {
                    format!(
                        "{}: no resolved.toml (not a sinklab run directory)",
                        run_dir0.display()
                    )
                })?;
            let exp0 = config::from_str("resolved.toml", &text)?;
            let device = backend::device(dev_kind.unwrap_or(exp0.run.device))?;
            let (exp, model, run_dir, state) = train::load_checkpoint(&path, &device)?;
            // A relative cache directory is relative to where training ran; from elsewhere the
            // shards are rebuilt (deterministically) next to the run instead.
            let mut d = exp.data.clone();
            if !d.cache_dir.is_absolute() && !d.cache_dir.exists() {
                d.cache_dir = run_dir.join("_cache");
            }
            let ds = data::Dataset::prepare(&d, &mut |m| eprintln!("{m}"))?;
            let mut val =
                data::validation_batch(&ds, exp.train.eval_sequences, exp.model.ctx, exp.data.bos)?;
            data::ignore_first_targets(&mut val, exp.model.attention.mask.ignored_targets());
            let probe = data::validation_batch(
                &ds,
                exp.metrics.probe_sequences,
                exp.metrics.probe_len,
                exp.data.bos,
            )?;
            let loss = train::eval_loss(&model, &val, exp.train.micro_batch, &device);
            let report = train::probe_metrics(&model, &probe, exp.train.micro_batch, &exp, &device);
            if json {
                let scalars: serde_json::Map<String, serde_json::Value> = report
                    .scalars()
                    .into_iter()
                    .map(|(k, v)| (k, serde_json::json!(v)))
                    .collect();
                println!(
                    "{}",
                    serde_json::json!({"run_dir": run_dir, "step": state.step, "val_loss": loss, "scalars": scalars})
                );
            } else {
                println!("run {} at step {}", run_dir.display(), state.step);
                println!("validation loss: {loss:.4} (ppl {:.2})", loss.exp());
                println!(
                    "\nSink_k^eps (%), probe {} × {}:",
                    exp.metrics.probe_sequences, exp.metrics.probe_len
                );
                print!("{:>6}", "eps");
                for k in 1..=exp.metrics.k_max {
                    print!("{:>7}", format!("k={k}"));
                }
                println!();
                for (e, rates) in &report.sink_rate {
                    print!("{e:>6}");
                    for r in rates {
                        print!("{r:>7.1}");
                    }
                    println!();
                }
                if !report.slot_rate.is_empty() {
                    print!(
                        "\nSink1* on the slot (sink logit / KV-K bias / memory / sink tokens), %:"
                    );
                    for (e, r) in &report.slot_rate {
                        print!("  eps {e}: {r:.1}");
                    }
                    println!();
                }
                println!(
                    "F-Attn (mean attention on token 1) {:.3} | M-Act (largest mean top-1 |h|) {:.2}",
                    report.f_attn(),
                    report.m_act()
                );
                println!(
                    "\nper layer: first-token importance by head | norm ratio | entropy | massive | slot mass | gate"
                );
                for (l, heads) in report.importance_first.iter().enumerate() {
                    let hs: Vec<String> = heads.iter().map(|v| format!("{v:.2}")).collect();
                    let opt = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
                    println!(
                        "layer {l:02}: [{}] | {:.2} | {:.3} | {:.1} | {} | {}",
                        hs.join(" "),
                        report.hidden[l].norm_ratio,
                        report.entropy[l],
                        report.hidden[l].massive_count,
                        opt(report.slot_mass[l]),
                        opt(report.gate_mean[l])
                    );
                }
            }
        }
        Cmd::InitCheck {
            experiment,
            overrides,
            sequences,
            len,
            json,
        } => {
            let exp = load(&experiment, &overrides)?;
            let len = len.unwrap_or(exp.model.ctx);
            if !(2..=exp.model.ctx).contains(&len) || sequences == 0 {
                return Err(anyhow!(
                    "--len {len} / --sequences {sequences}: expected 2 ≤ len ≤ model.ctx = {} and \
                     at least one sequence",
                    exp.model.ctx
                ));
            }
            let device = backend::device(exp.run.device)?;
            let r = sinklab::signal::init_check(&exp, &device, sequences, len, &mut |m| {
                eprintln!("{m}")
            })?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "{}: token kernel at init, {} sequences × {} tokens (layer 0 = input to block 1)",
                    experiment.display(),
                    r.sequences,
                    r.len
                );
                let spa = r.layers.iter().any(|l| l.spa_distance.is_some());
                print!("{:>5} {:>10} {:>10}", "layer", "mean cos", "‖x‖²/d");
                if spa {
                    print!(
                        " {:>11} {:>14} {:>12}",
                        "target cos", "‖C−Σ‖/‖Σ‖", "min A_l"
                    );
                }
                println!();
                for l in &r.layers {
                    print!("{:>5} {:>10.4} {:>10.4}", l.layer, l.mean_cos, l.diag);
                    if spa {
                        let f = |v: Option<f64>, p: usize| {
                            v.map_or("-".to_string(), |v| format!("{v:.p$}"))
                        };
                        print!(
                            " {:>11} {:>14} {:>12}",
                            f(l.target_mean_cos, 4),
                            f(l.spa_distance, 4),
                            l.min_entry.map_or("-".into(), |v| format!("{v:.2e}"))
                        );
                    }
                    println!();
                }
                if spa {
                    println!("every causal entry of every A_l is positive (checked in f64)");
                }
            }
        }
        Cmd::Bench {
            experiment,
            overrides,
            warmup,
            steps,
            rounds,
            peak_gflops,
            json,
        } => {
            let exp = load(&experiment, &overrides)?;
            let vocab = match exp.data.tokenizer {
                TokenizerConfig::Byte {} => 258,
                TokenizerConfig::Bpe { vocab_size } => vocab_size,
            };
            let r = bench::run(&exp, vocab, warmup, steps, rounds, peak_gflops)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
            } else {
                println!(
                    "sinklab bench: {} | {} params ({} non-embedding) | batch {} × ctx {} per step \
                     ({} micro-batches of {}) | {} threads: {} worker(s) × {}",
                    r.device,
                    r.params,
                    r.non_embedding_params,
                    r.batch,
                    r.ctx,
                    r.batch / r.micro_batch,
                    r.micro_batch,
                    r.threads,
                    r.workers,
                    r.threads_per_worker
                );
                let rounds: Vec<String> = r
                    .rounds_tokens_per_s
                    .iter()
                    .map(|t| format!("{t:.0}"))
                    .collect();
                println!("tokens/s per round: {}", rounds.join(", "));
                println!("median tokens/s: {:.0}", r.median_tokens_per_s);
                println!(
                    "model FLOPs/token: {:.3e} | achieved {:.2} GFLOP/s | peak {:.1} GFLOP/s ({}) | MFU {:.2}%",
                    r.flops_per_token,
                    r.achieved_gflops,
                    r.peak_gflops,
                    r.peak_source,
                    100.0 * r.mfu
                );
                println!("peak RSS: {:.0} MiB", r.peak_rss_mib);
            }
        }
    }
    Ok(())
}
