//! `sinklab check`.

use super::Overrides;
use crate::progress::count;
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
    let mut failed = 0usize;
    for path in &a.experiments {
        let file = path.display();
        if let Some(hint) = sweep_file(path) {
            failed += 1;
            eprintln!("{file}: {hint}");
            continue;
        }
        let exp = match a.overrides.load(path) {
            Ok(exp) => exp,
            Err(e) => {
                failed += 1;
                eprint!("{e}");
                continue;
            }
        };
        let mut problems = if a.schema_only {
            Vec::new()
        } else {
            preflight(&exp)
        };
        // The memory estimate against what the device has (one of the machine checks).
        let memory = if a.schema_only {
            None
        } else {
            match crate::model::trainable_elements(&exp)
                .and_then(|t| crate::memory::Check::of(&exp, t))
            {
                Ok(m) => {
                    if m.fits() == Some(false) {
                        problems.push(("model".into(), m.refusal(&exp)));
                    }
                    Some(m)
                }
                // (an unreadable tokenizer or corpus is reported above already)
                Err(e) => {
                    if problems.is_empty() {
                        problems.push(("model".into(), format!("memory estimate: {e:#}")));
                    }
                    None
                }
            }
        };
        if problems.is_empty() {
            println!(
                "ok: {file} ({} × d {}, {})",
                count(exp.model.n_layers, "layer", None),
                exp.model.d_model,
                count(exp.train.steps, "step", None)
            );
            if let Some(m) = memory {
                println!("  {}", m.line());
            }
            if let Some(k) =
                crate::kernels::summary(&exp.model, exp.run.device, exp.train.precision)
            {
                println!("  {k}");
            }
        } else {
            failed += 1;
            eprintln!(
                "{file}: {} on this machine (--schema-only skips these checks):",
                count(problems.len(), "problem", None)
            );
            for (key, message) in problems {
                eprintln!("  - {file}: `{key}`: {message}");
            }
        }
    }
    if failed > 0 {
        return Err(anyhow!(
            "{failed} of {} {} errors",
            count(a.experiments.len(), "file", None),
            if failed == 1 { "has" } else { "have" }
        ));
    }
    Ok(())
}

/// Everything that can be verified before a run spends time, each problem as (TOML path,
/// message), all of them: the device's backend is compiled in, every corpus or source file
/// exists and is readable, the tokenizer file loads with its named tokens, `train.init_from`
/// names a run or checkpoint directory.
fn preflight(exp: &crate::config::Experiment) -> Vec<(String, String)> {
    let mut problems: Vec<(String, String)> = exp.init_from_problem().into_iter().collect();
    let name = exp.run.device.name();
    let compiled = crate::backend::compiled_features();
    if !compiled.contains(&name) {
        problems.push((
            "run.device".into(),
            format!(
                "\"{name}\": this sinklab binary was built without the `{name}` cargo feature \
                 (compiled in: [{}]); rebuild with `cargo build --release --features {name}`",
                compiled.join(", ")
            ),
        ));
    }
    if compiled.contains(&name) && exp.train.precision != crate::config::Precision::F32 {
        let supported = crate::backend::device(exp.run.device)
            .and_then(|d| crate::backend::check_precision(exp.run.device, &d, exp.train.precision));
        if let Err(e) = supported {
            problems.push(("train.precision".into(), format!("{e:#}")));
        }
    }
    if exp.data.synthetic.is_none() {
        problems.extend(crate::data::check(&exp.data));
    }
    if let crate::config::TokenizerConfig::File { path, bos, eot } = &exp.data.tokenizer {
        let loaded = std::fs::metadata(path)
            .map_err(|e| anyhow!("{}: {e}", path.display()))
            .and_then(|_| crate::tokenizer::Tokenizer::load_named(path, bos, eot));
        if let Err(e) = loaded {
            problems.push(("data.tokenizer.path".into(), format!("{e:#}")));
        }
    }
    problems
}

/// A sweep file given to `check` (it has the sweep keys `axes` or `seeds` at the top): what to
/// run instead. None for anything else (an experiment file, or one that does not parse: the
/// loader reports it).
fn sweep_file(path: &std::path::Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    let table: toml::Table = text.parse().ok()?;
    let keys: Vec<&str> = ["axes", "seeds"]
        .into_iter()
        .filter(|k| table.contains_key(*k))
        .collect();
    (!keys.is_empty()).then(|| {
        format!(
            "a sweep file (it has `{}`), not an experiment: check every run it expands to with \
             `sinklab sweep {} --dry-run`",
            keys.join("`, `"),
            path.display()
        )
    })
}
