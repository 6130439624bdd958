//! The `sinklab` command line.

use anyhow::{Result, anyhow};

/// mimalloc keeps freed tensor buffers mapped, which removes most page-fault time from the
/// training loop (glibc malloc returns large buffers to the OS every step).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use clap::{Parser, Subcommand};
use sinklab::config::{self, DeviceKind, Experiment, TokenizerConfig};
use sinklab::{analyze, backend, bench, data, generate, report, sweep, train};
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
    /// Look inside a checkpoint: Sink_k^eps on natural / random / repeated-token probes, slot
    /// masses, first-token importance heat map, attention maps, attention bars, activations
    /// (norms, massive channels, key/value norms) and the q·k angle/norm decomposition. Writes
    /// analysis.json and PNG plots (default RUN/analysis/step_N/).
    Analyze {
        /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
        checkpoint: PathBuf,
        #[command(flatten)]
        common: AnalysisArgs,
        /// Probe sequences per kind.
        #[arg(long, default_value_t = 100)]
        sequences: usize,
        /// Probe length T (capped at model.ctx).
        #[arg(long, default_value_t = 64)]
        len: usize,
        /// Thresholds ε of the Sink_k^ε table (comma-separated).
        #[arg(long, value_delimiter = ',', default_value = "0.2,0.3,0.4,0.5,0.8")]
        eps: Vec<f64>,
        /// Largest k of the Sink_k^ε table.
        #[arg(long, default_value_t = 10)]
        k_max: usize,
        /// Attention maps to draw as LAYER:HEAD (repeatable, 0-based; default: per layer the
        /// head with the highest first-token importance).
        #[arg(long = "map", value_name = "LAYER:HEAD")]
        maps: Vec<String>,
        /// Text for the attention maps (default: the first natural probe sequence).
        #[arg(long)]
        map_text: Option<String>,
        /// Attention bar: mean received attention must exceed this.
        #[arg(long, default_value_t = 0.2)]
        bar_mean: f64,
        /// Attention bar: standard deviation of received attention must be below this.
        #[arg(long, default_value_t = 0.1)]
        bar_std: f64,
        /// Attention bar: at least this many later queries must see the key.
        #[arg(long, default_value_t = 8)]
        bar_min_queries: usize,
        /// W_U bands for the dark ratio of attention-bar tokens.
        #[arg(long, default_value_t = 20)]
        bands: usize,
    },
    /// Dark signals (Cancedda 2024): SVD bands of W_U and W_E, band energy of the residual
    /// stream (first token vs rest), head/MLP write weights on the bands, and spectral filters
    /// Φ (bands 1..k), Ω (1..k + dark) and Ψ (remove dark-for-both) with ΔNLL and Sink1, against a
    /// random-orthonormal-basis control. Writes dark.json and PNG plots.
    Dark {
        /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
        checkpoint: PathBuf,
        #[command(flatten)]
        common: AnalysisArgs,
        /// Number of bands (the last one is the dark band).
        #[arg(long, default_value_t = 20)]
        bands: usize,
        /// Block input(s) to filter: `all` or comma-separated 0..=L (L = before the final norm).
        #[arg(long, default_value = "all")]
        layer: String,
        /// Values of k to sweep (comma-separated; default 1..=bands).
        #[arg(long, value_delimiter = ',')]
        k: Vec<usize>,
        /// Ψ removes principal directions of the two dark bands with cosine ≥ this.
        #[arg(long, default_value_t = 0.7)]
        both_cos: f64,
        /// Validation sequences for ΔNLL (default: train.eval_sequences).
        #[arg(long)]
        sequences: Option<usize>,
        /// Probe sequences for Sink1 under each filter.
        #[arg(long, default_value_t = 32)]
        probe_sequences: usize,
        /// Probe length for Sink1 and the band energies.
        #[arg(long, default_value_t = 64)]
        probe_len: usize,
    },
    /// Sample a continuation with a KV cache (temperature, top-k).
    Generate {
        /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
        checkpoint: PathBuf,
        /// Prompt text (BOS is prepended when the run trains with BOS).
        #[arg(long)]
        prompt: String,
        /// Tokens to generate.
        #[arg(long, default_value_t = 100)]
        tokens: usize,
        /// Sampling temperature (0 = greedy).
        #[arg(long, default_value_t = 0.8)]
        temperature: f64,
        /// Sample from the k most likely tokens (0 = all).
        #[arg(long, default_value_t = 40)]
        top_k: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Keep the first S prompt tokens when the cache is full (StreamingLLM sinks).
        #[arg(long, default_value_t = 4)]
        sinks: usize,
        /// Most recent tokens kept once the cache is full (default: model.ctx − sinks);
        /// generation can then run past the training context.
        #[arg(long)]
        window: Option<usize>,
        /// Backend device (default: the run's).
        #[arg(long)]
        device: Option<String>,
    },
    /// StreamingLLM evaluation: token-by-token perplexity of a text longer than the context
    /// with a cache of the first S plus the last W tokens (keys re-rotated in cache
    /// coordinates), against dense attention within the context, window only (S = 0), one sink
    /// (S = 1) and a sliding window with re-computation. Writes stream.json and stream_ppl.png.
    StreamEval {
        /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
        checkpoint: PathBuf,
        /// Initial tokens kept (attention sinks).
        #[arg(long, default_value_t = 4)]
        sinks: usize,
        /// Recent tokens kept (default: model.ctx / 2 − sinks).
        #[arg(long)]
        window: Option<usize>,
        /// Tokens of text to evaluate (default: 4 × model.ctx) from the validation split.
        #[arg(long)]
        tokens: Option<usize>,
        /// Evaluate this text file instead of the validation split.
        #[arg(long)]
        text: Option<PathBuf>,
        /// Windows per forward for the re-computation reference.
        #[arg(long, default_value_t = 16)]
        batch: usize,
        /// Output directory (default RUN/analysis/step_N/).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Also write the perplexities and the plot to the run's TensorBoard.
        #[arg(long)]
        tensorboard: bool,
        /// Backend device (default: the run's).
        #[arg(long)]
        device: Option<String>,
    },
    /// Run a sweep: expand FILE into runs (axes × seeds), run them N at a time as child
    /// processes, skip finished runs, resume unfinished ones; a failing run is recorded and the
    /// others go on. Ctrl-C checkpoints every running run and stops.
    Sweep {
        /// Sweep TOML file (base, axes, combine, seeds; see `experiments/sweeps/`).
        file: PathBuf,
        /// Runs at a time (each gets cores / N threads).
        #[arg(long, default_value_t = 1)]
        jobs: usize,
        /// Run only the run with this index (a SLURM array task).
        #[arg(long)]
        index: Option<usize>,
        /// Print the expanded runs and write the plan without running anything.
        #[arg(long)]
        dry_run: bool,
        /// Write a job script instead of running: `slurm` (one array task per run).
        #[arg(long, value_name = "SYSTEM")]
        emit: Option<String>,
        /// Put the sweep directory under DIR instead of the file's `out_dir` (runs/sweeps).
        #[arg(long, value_name = "DIR")]
        out_dir: Option<PathBuf>,
    },
    /// Summarise a sweep directory: report.md, report.csv and report.json (mean ± std over
    /// seeds of the final Sink1, slot Sink1*, largest Sink_k and its position k, first-token
    /// attention mass, val loss and norm ratio; the step at which Sink1 first exceeds a
    /// threshold) and PNG plots (final Sink against each axis, Sink1 against step).
    Report {
        /// A sweep directory (holding sweep.json).
        dir: PathBuf,
        /// ε of the Sink1 reported (must be one of the runs' metrics.eps).
        #[arg(long, default_value_t = 0.3)]
        eps: f64,
        /// Emergence: the first probe step at which Sink1 exceeds this percentage.
        #[arg(long, default_value_t = 5.0)]
        threshold: f64,
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

/// Options shared by `analyze` and `dark`.
#[derive(clap::Args, Clone)]
struct AnalysisArgs {
    /// Output directory (default RUN/analysis/step_N/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also write scalars and plots to the run's TensorBoard (at the checkpoint's step).
    #[arg(long)]
    tensorboard: bool,
    /// Seed of the random probes / random basis.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Backend device (default: the run's).
    #[arg(long)]
    device: Option<String>,
}

fn device_arg(device: &Option<String>) -> Result<Option<DeviceKind>> {
    device
        .as_ref()
        .map(|d| {
            DeviceKind::parse(d).ok_or_else(|| {
                anyhow!(
                    "--device {d}: unknown device; valid: {}",
                    DeviceKind::ALL.join(", ")
                )
            })
        })
        .transpose()
}

fn open(path: &Path, device: &Option<String>) -> Result<train::OpenRun> {
    train::open_run(path, device_arg(device)?, &mut |m| eprintln!("{m}"))
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
            ctrlc::set_handler(|| {
                train::INTERRUPT.store(true, std::sync::atomic::Ordering::SeqCst);
            })?;
            let summary = train::train(&exp, &opts, &mut |m| eprintln!("{m}"))?;
            if summary.interrupted {
                eprintln!(
                    "interrupted after step {}: checkpointed; continue with --resume",
                    summary.steps_done
                );
                std::process::exit(130);
            }
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
            let train::OpenRun {
                exp,
                model,
                run_dir,
                state,
                data: ds,
                device,
                ..
            } = open(&path, &device)?;
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
        Cmd::Analyze {
            checkpoint,
            common,
            sequences,
            len,
            eps,
            k_max,
            maps,
            map_text,
            bar_mean,
            bar_std,
            bar_min_queries,
            bands,
        } => {
            let maps = maps
                .iter()
                .map(|m| {
                    m.split_once(':')
                        .and_then(|(l, h)| Some((l.parse().ok()?, h.parse().ok()?)))
                        .ok_or_else(|| anyhow!("--map {m}: expected LAYER:HEAD, e.g. 2:0"))
                })
                .collect::<Result<Vec<_>>>()?;
            let run = open(&checkpoint, &common.device)?;
            let o = analyze::AnalyzeOptions {
                sequences,
                len,
                eps,
                k_max,
                maps,
                map_text,
                bar_mean,
                bar_std,
                bar_min_queries,
                bands,
                out: common.out,
                tensorboard: common.tensorboard,
                seed: common.seed,
            };
            analyze::analyze(&run, &o, &mut |m| eprintln!("{m}"))?;
        }
        Cmd::Dark {
            checkpoint,
            common,
            bands,
            layer,
            k,
            both_cos,
            sequences,
            probe_sequences,
            probe_len,
        } => {
            let layers = if layer == "all" {
                None
            } else {
                Some(
                    layer
                        .split(',')
                        .map(|x| {
                            x.trim().parse::<usize>().map_err(|_| {
                                anyhow!("--layer {layer}: expected `all` or comma-separated block inputs such as 2 or 0,3")
                            })
                        })
                        .collect::<Result<Vec<_>>>()?,
                )
            };
            let run = open(&checkpoint, &common.device)?;
            let o = analyze::DarkOptions {
                bands,
                layers,
                ks: k,
                both_cos,
                sequences,
                probe_sequences,
                probe_len,
                out: common.out,
                tensorboard: common.tensorboard,
                seed: common.seed,
            };
            analyze::dark(&run, &o, &mut |m| eprintln!("{m}"))?;
        }
        Cmd::Generate {
            checkpoint,
            prompt,
            tokens,
            temperature,
            top_k,
            seed,
            sinks,
            window,
            device,
        } => {
            let run = open(&checkpoint, &device)?;
            let ctx = run.exp.model.ctx;
            let window = window.unwrap_or(ctx.saturating_sub(sinks));
            let mut ids = Vec::new();
            if run.exp.data.bos {
                ids.push(run.data.tokenizer.bos_id);
            }
            ids.extend(run.data.tokenizer.encode(&prompt)?);
            if ids.len() > window {
                return Err(anyhow!(
                    "the prompt is {} tokens, more than the cache window {window} (model.ctx = {ctx})",
                    ids.len()
                ));
            }
            let policy = sinklab::model::CachePolicy {
                sinks,
                window: Some(window),
            };
            let sampling = generate::Sampling {
                temperature,
                top_k,
                seed,
            };
            let model = burn::module::Module::valid(&run.model);
            let out = generate::generate(&model, &ids, tokens, &sampling, policy, &run.device)?;
            println!("{prompt}{}", run.data.tokenizer.decode(&out)?);
        }
        Cmd::StreamEval {
            checkpoint,
            sinks,
            window,
            tokens,
            text,
            batch,
            out,
            tensorboard,
            device,
        } => {
            let run = open(&checkpoint, &device)?;
            let ctx = run.exp.model.ctx;
            let o = generate::StreamOptions {
                sinks,
                window: window.unwrap_or((ctx / 2).saturating_sub(sinks)),
                tokens: tokens.unwrap_or(4 * ctx),
                text,
                batch,
                out,
                tensorboard,
            };
            generate::stream_eval(&run, &o, &mut |m| eprintln!("{m}"))?;
        }
        Cmd::Sweep {
            file,
            jobs,
            index,
            dry_run,
            emit,
            out_dir,
        } => {
            let (plan, exps) = sweep::expand_into(&file, out_dir.as_deref())?;
            if dry_run || emit.is_some() {
                sweep::write_plan(&plan, &exps)?;
            }
            match emit.as_deref() {
                None => {}
                Some("slurm") => {
                    let exe = std::env::current_exe()?;
                    let cwd = std::env::current_dir()?;
                    let script = plan.dir.join("slurm.sh");
                    std::fs::write(
                        &script,
                        sweep::slurm_script(&plan, &exps, &exe, &cwd, out_dir.as_deref()),
                    )?;
                    println!(
                        "wrote {} ({} array tasks); submit with: sbatch {}",
                        script.display(),
                        plan.runs.len(),
                        script.display()
                    );
                    return Ok(());
                }
                Some(other) => {
                    return Err(anyhow!("--emit {other}: unknown; valid: slurm"));
                }
            }
            if dry_run {
                println!("sweep {} → {}", plan.name, plan.dir.display());
                for r in &plan.runs {
                    println!("{:>4}  {}", r.index, r.name);
                }
                return Ok(());
            }
            ctrlc::set_handler(|| {
                sweep::STOP.store(true, std::sync::atomic::Ordering::SeqCst);
                train::INTERRUPT.store(true, std::sync::atomic::Ordering::SeqCst);
            })?;
            let o = sweep::run(&plan, &exps, jobs, index, &|m| eprintln!("{m}"))?;
            println!(
                "sweep {}: {} done, {} skipped (already finished), {} failed, {} interrupted",
                plan.name,
                o.done.len(),
                o.skipped.len(),
                o.failed.len(),
                o.interrupted.len()
            );
            for (name, err) in &o.failed {
                println!("failed: {name}\n  {}", err.replace('\n', "\n  "));
            }
            println!("report: sinklab report {}", plan.dir.display());
            if !o.interrupted.is_empty() {
                println!("interrupted runs resume when the sweep is run again");
                std::process::exit(130);
            }
            if !o.failed.is_empty() {
                std::process::exit(1);
            }
        }
        Cmd::Report {
            dir,
            eps,
            threshold,
        } => {
            let md = report::report(&dir, eps, threshold)?;
            println!("{md}");
            println!(
                "wrote {}/report.md, report.csv, report.json and plots",
                dir.display()
            );
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
