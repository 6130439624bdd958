//! `sinklab check`.

use super::Overrides;
use anyhow::{Result, anyhow};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Experiment TOML files.
    #[arg(required = true)]
    pub experiments: Vec<PathBuf>,
    /// Check the files only, not this machine: skip the checks that the device's backend is
    /// compiled in, that the corpus and tokenizer files exist and that the run's estimated
    /// memory fits in what the device has (for experiments meant for another machine, e.g. a
    /// GPU cluster).
    #[arg(long)]
    pub schema_only: bool,
    #[command(flatten)]
    pub overrides: Overrides,
}

pub fn run(a: Args) -> Result<()> {
    let mut failed = 0;
    for path in &a.experiments {
        let checked = a.overrides.load(path).and_then(|exp| {
            if a.schema_only {
                return Ok((exp, None));
            }
            preflight(&exp).map_err(|e| anyhow!("{}: {e:#}\n", path.display()))?;
            let memory = crate::memory::Check::of(&exp)
                .map_err(|e| anyhow!("{}: memory estimate: {e:#}\n", path.display()))?;
            if memory.fits() == Some(false) {
                return Err(anyhow!("{}: {}\n", path.display(), memory.refusal(&exp)));
            }
            Ok((exp, Some(memory)))
        });
        match checked {
            Ok((exp, memory)) => {
                println!(
                    "ok: {} ({} layers × d {}, {} steps)",
                    path.display(),
                    exp.model.n_layers,
                    exp.model.d_model,
                    exp.train.steps
                );
                if let Some(m) = memory {
                    println!("  {}", m.line());
                }
            }
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

/// What can be verified before a run spends time: the device's backend is compiled in, the
/// corpus exists and is readable, a tokenizer file exists.
fn preflight(exp: &crate::config::Experiment) -> Result<()> {
    let name = exp.run.device.name();
    let compiled = crate::backend::compiled_features();
    if !compiled.contains(&name) {
        return Err(anyhow!(
            "run.device = \"{name}\": this sinklab binary was built without the `{name}` cargo \
             feature (compiled in: [{}]); rebuild with `cargo build --release --features {name}`",
            compiled.join(", ")
        ));
    }
    if exp.data.synthetic.is_none() {
        crate::data::check(&exp.data).map_err(|e| anyhow!("data: {e:#}"))?;
    }
    if let crate::config::TokenizerConfig::File { path, .. } = &exp.data.tokenizer {
        std::fs::metadata(path)
            .map_err(|e| anyhow!("data.tokenizer.path: {}: {e}", path.display()))?;
    }
    Ok(())
}
