//! `sinklab train`.

use super::Overrides;
use crate::dist::{self, World};
use crate::metrics::HEADLINE_EPS;
use crate::train::{self, TrainOptions};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Experiment TOML file.
    pub experiment: PathBuf,
    #[command(flatten)]
    pub overrides: Overrides,
    /// Continue from the newest checkpoint of the run directory (same config required).
    #[arg(long)]
    pub resume: bool,
    /// Stop after this many optimizer steps, checkpointing first (as if interrupted).
    #[arg(long, value_name = "STEPS")]
    pub stop_after: Option<u64>,
    /// Less output: no progress bar or periodic step lines, only evaluations, probes and the
    /// result. (Without a terminal, progress comes as about 20 plain step lines instead of a bar.)
    #[arg(long)]
    pub quiet: bool,
    /// Start even when the memory estimate (printed at the start) exceeds the memory the device
    /// has; without it such a run is refused before anything is built.
    #[arg(long)]
    pub skip_memory_check: bool,
}

pub fn run(a: Args) -> Result<()> {
    // One process, or one of the MPI ranks a launcher started (docs/distributed.md).
    let world = World::from_env()?;
    if world.size() == 1 {
        let code = run_in(&world, a)?;
        if code != 0 {
            std::process::exit(code);
        }
        return Ok(());
    }
    world.configure_threads();
    match run_in(&world, a) {
        Ok(code) => {
            drop(world); // MPI_Finalize, on every rank, before the exit status
            if code != 0 {
                std::process::exit(code);
            }
            Ok(())
        }
        Err(e) => {
            // Every rank ends now: an error every rank reached together is reported by rank 0
            // and ends the job cleanly; one of this rank alone aborts the others.
            let agreed = dist::agreed(&e).map(|a| a.code);
            if world.is_root() || agreed.is_none() {
                eprintln!("error ({}): {e:#}", world.who());
            }
            match agreed {
                Some(code) => {
                    drop(world);
                    std::process::exit(code)
                }
                None => world.abort(if crate::lock::is_busy(&e) {
                    crate::lock::EXIT_BUSY
                } else {
                    1
                }),
            }
        }
    }
}

/// `sinklab train` as one rank of `world`; the exit status (130: interrupted).
fn run_in(world: &World, a: Args) -> Result<i32> {
    let exp = a.overrides.load(&a.experiment)?;
    let opts = TrainOptions {
        resume: a.resume,
        stop_after: a.stop_after,
        quiet: a.quiet || !world.is_root(), // no progress bar on the other ranks
        skip_memory_check: a.skip_memory_check,
    };
    ctrlc::set_handler(|| {
        train::INTERRUPT.store(true, std::sync::atomic::Ordering::SeqCst);
    })?;
    // rank 0 speaks for the run; the other ranks print only their errors
    let root = world.is_root();
    let summary = train::train_in(world, &exp, &opts, &mut |m| {
        if root {
            eprintln!("{m}")
        }
    })?;
    if !root {
        return Ok(if summary.interrupted { 130 } else { 0 });
    }
    let s = &summary;
    let val = match (s.last_val_loss, s.last_val_step) {
        (Some(v), Some(at)) => format!("val loss {v:.4} (step {at})"),
        _ => "no validation loss".to_string(),
    };
    if s.interrupted {
        let why = match s.stop_reason.as_deref() {
            Some("stop_after") => "--stop-after",
            _ => "interrupted",
        };
        eprintln!(
            "stopped after step {} of {} ({why}), {val}: checkpointed in {}; continue with `{}`",
            s.steps_done,
            s.total_steps,
            s.run_dir.display(),
            resume_command(world)
        );
        return Ok(if why == "interrupted" { 130 } else { 0 });
    }
    println!(
        "done: {}, loss {:.4} -> {:.4}, {val}, Sink1(eps={HEADLINE_EPS}) {:.1}%, \
         {:.0} tokens/s, peak RSS {}\nrun directory: {}\nview: tensorboard --logdir {}",
        crate::progress::count(s.steps_done, "step", None),
        s.first_loss.unwrap_or(f64::NAN),
        s.last_loss.unwrap_or(f64::NAN),
        s.last_sink1.unwrap_or(f64::NAN),
        s.tokens_per_s,
        crate::memory::peak_rss().map_or("unknown".into(), crate::memory::human),
        s.run_dir.display(),
        s.run_dir.display()
    );
    Ok(0)
}

/// This command line as `--resume` of the same run: `--stop-after N` dropped, `--resume` added;
/// under a launcher, that launcher's (any N resumes it).
fn resume_command(world: &World) -> String {
    let mut out: Vec<String> = match world.launcher() {
        Some("srun") => vec!["srun".into(), "-n".into(), world.size().to_string()],
        Some(_) => vec!["mpirun".into(), "-np".into(), world.size().to_string()],
        None => Vec::new(),
    };
    let mut args = std::env::args();
    while let Some(a) = args.next() {
        if a == "--stop-after" {
            args.next();
        } else if !a.starts_with("--stop-after=") {
            out.push(if a.contains([' ', '"', '\'', '{']) {
                format!("'{}'", a.replace('\'', "'\\''"))
            } else {
                a
            });
        }
    }
    if !out.iter().any(|a| a == "--resume") {
        out.push("--resume".into());
    }
    out.join(" ")
}
