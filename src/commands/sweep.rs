//! `sinklab sweep`.

use crate::sweep;
use crate::train;
use anyhow::{Result, anyhow};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Sweep TOML file (base, axes, combine, seeds; see `experiments/sweeps/`).
    pub file: PathBuf,
    /// Runs at a time (each gets cores / N threads).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// Run only the run with this index (a SLURM array task).
    #[arg(long)]
    pub index: Option<usize>,
    /// Print the expanded runs and write the plan without running anything.
    #[arg(long)]
    pub dry_run: bool,
    /// Write a job script instead of running: `slurm` (one array task per run).
    #[arg(long, value_name = "SYSTEM")]
    pub emit: Option<String>,
    /// Put the sweep directory under DIR instead of the file's `out_dir` (runs/sweeps).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    let (plan, exps) = sweep::expand_into(&a.file, a.out_dir.as_deref())?;
    if a.dry_run || a.emit.is_some() {
        sweep::write_plan(&plan, &exps)?;
    }
    match a.emit.as_deref() {
        None => {}
        Some("slurm") => {
            let exe = std::env::current_exe()?;
            let cwd = std::env::current_dir()?;
            let script = plan.dir.join("slurm.sh");
            std::fs::write(
                &script,
                sweep::slurm_script(&plan, &exps, &exe, &cwd, a.out_dir.as_deref()),
            )?;
            println!(
                "wrote {} ({} array tasks); submit with: sbatch {}",
                script.display(),
                plan.runs.len(),
                script.display()
            );
            return Ok(());
        }
        Some(other) => return Err(anyhow!("--emit {other}: unknown; valid: slurm")),
    }
    if a.dry_run {
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
    let o = sweep::run(&plan, &exps, a.jobs, a.index, &|m| eprintln!("{m}"))?;
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
    Ok(())
}
