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
            resume_command()
        );
        if why == "interrupted" {
            std::process::exit(130);
        }
        return Ok(());
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
    Ok(())
}

/// This command line as `--resume` of the same run: `--stop-after N` dropped, `--resume` added.
fn resume_command() -> String {
    let mut out: Vec<String> = Vec::new();
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
