//! `sinklab check`.

use super::Overrides;
use anyhow::{Result, anyhow};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Experiment TOML files.
    #[arg(required = true)]
    pub experiments: Vec<PathBuf>,
    #[command(flatten)]
    pub overrides: Overrides,
}

pub fn run(a: Args) -> Result<()> {
    let mut failed = 0;
    for path in &a.experiments {
        match a.overrides.load(path) {
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
            a.experiments.len()
        ));
    }
    Ok(())
}
