//! `sinklab train`.

use super::Overrides;
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
    let exp = a.overrides.load(&a.experiment)?;
    let opts = TrainOptions {
        resume: a.resume,
        stop_after: a.stop_after,
        quiet: a.quiet,
        skip_memory_check: a.skip_memory_check,
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
        "done: {} steps, loss {:.4} -> {:.4}, val loss {:.4}, Sink1(eps={HEADLINE_EPS}) {:.1}%, \
         {:.0} tokens/s, peak RSS {}\nrun directory: {}\nview: tensorboard --logdir {}",
        summary.steps_done,
        summary.first_loss.unwrap_or(f64::NAN),
        summary.last_loss.unwrap_or(f64::NAN),
        summary.last_val_loss.unwrap_or(f64::NAN),
        summary.last_sink1.unwrap_or(f64::NAN),
        summary.tokens_per_s,
        crate::memory::peak_rss().map_or("unknown".into(), crate::memory::human),
        summary.run_dir.display(),
        summary.run_dir.display()
    );
    Ok(())
}
