//! `sinklab report`.

use crate::metrics::HEADLINE_EPS;
use crate::report;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A sweep directory (holding sweep.json): the sweep's tables and plots. Or a run
    /// directory: its curves as PNG charts in RUN/plots/ (Sink₁ at every ε, per-head attention
    /// to token 1, losses, value drain and massive-activation ratio) and a table at a few steps.
    pub dir: PathBuf,
    /// ε of the Sink1 reported (must be one of the runs' metrics.eps).
    #[arg(long, default_value_t = HEADLINE_EPS)]
    pub eps: f64,
    /// Emergence: the first probe step at which Sink1 exceeds this percentage.
    #[arg(long, default_value_t = 5.0)]
    pub threshold: f64,
}

pub fn run(a: Args) -> Result<()> {
    // The report writes into the directory: one writer at a time (a run that trains, a sweep's
    // launcher, another report hold it). TensorBoard reads a training run's curves meanwhile.
    let _lock = if a.dir.is_dir() {
        Some(crate::lock::acquire(&a.dir, "report")?)
    } else {
        None
    };
    if !a.dir.join("sweep.json").exists() && a.dir.join("metrics.jsonl").exists() {
        let md = report::run_curves(&a.dir)?;
        println!("{md}");
        println!("wrote {}/plots/", a.dir.display());
        return Ok(());
    }
    let md = report::report(&a.dir, a.eps, a.threshold)?;
    println!("{md}");
    println!(
        "wrote {}/report.md, report.csv, report.json and plots",
        a.dir.display()
    );
    Ok(())
}
