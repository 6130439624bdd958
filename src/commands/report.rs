//! `sinklab report`.

use crate::metrics::HEADLINE_EPS;
use crate::report;
use crate::rundir::RunDir;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A sweep directory (holding sweep.json): the sweep's tables and plots. Or a run
    /// directory: its curves as PNG charts in RUN/plots/ (Sink₁ at every ε, per-head attention
    /// to token 1, losses, value drain and massive-activation ratio) and a table at a few steps.
    pub dir: PathBuf,
    /// A sweep's report: ε of the Sink1 reported (must be one of the runs' metrics.eps;
    /// default 0.3). A run's report draws Sink₁ at every ε and takes no --eps.
    #[arg(long)]
    pub eps: Option<f64>,
    /// A sweep's report: emergence is the first probe step at which Sink1 exceeds this
    /// percentage (default 5).
    #[arg(long)]
    pub threshold: Option<f64>,
    /// Write the report and plots into DIR instead of the run or sweep directory, which is
    /// then only read (so it works while the run trains or the sweep runs).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

pub fn run(a: Args) -> Result<()> {
    // A report written into the directory is a writer there: one at a time (a run that trains,
    // a sweep's launcher or another report holds it). With --out it only reads.
    let _lock = match &a.out {
        None if a.dir.is_dir() => Some(crate::lock::acquire_advising(
            &a.dir,
            "report",
            Some(
                "or write the report elsewhere with --out DIR (TensorBoard also shows a \
                 training run's curves live)",
            ),
        )?),
        _ => None,
    };
    if !a.dir.join("sweep.json").exists() && RunDir(&a.dir).metrics().exists() {
        for (flag, given) in [
            ("--eps", a.eps.is_some()),
            ("--threshold", a.threshold.is_some()),
        ] {
            if given {
                anyhow::bail!(
                    "{flag} applies to a sweep's report; {} is a run, whose report draws Sink₁ \
                     at every ε the run measured (its plots/sink1.png) and marks no emergence",
                    a.dir.display()
                );
            }
        }
        let out = a.out.clone().unwrap_or_else(|| RunDir(&a.dir).plots());
        let md = report::run_curves(&a.dir, &out)?;
        println!("{md}");
        println!("wrote {}/", out.display());
        return Ok(());
    }
    let out = a.out.clone().unwrap_or_else(|| a.dir.clone());
    let md = report::report(
        &a.dir,
        &out,
        a.eps.unwrap_or(HEADLINE_EPS),
        a.threshold.unwrap_or(5.0),
    )?;
    println!("{md}");
    println!(
        "wrote {}/report.md, report.csv, report.json and plots",
        out.display()
    );
    Ok(())
}
