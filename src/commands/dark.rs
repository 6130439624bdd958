//! `sinklab dark`.

use super::AnalysisArgs;
use crate::analysis::dark::{self, DarkOptions, DarkReport, FAMILIES, FilterLayers};
use anyhow::{Result, anyhow};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub common: AnalysisArgs,
    /// Number of bands (the last one is the dark band).
    #[arg(long, default_value_t = 20)]
    pub bands: usize,
    /// Where to filter: comma-separated block inputs 0..=L (L = before the final norm), each
    /// on its own; `each` for every block input, one at a time; `all` for every block input
    /// at once. Default: one at a time at up to 5 evenly spaced block inputs.
    #[arg(long)]
    pub layer: Option<String>,
    /// Values of k to sweep (comma-separated; default 1, 2, 3, 4, every eighth of the bands,
    /// bands − 1 and bands).
    #[arg(long, value_delimiter = ',')]
    pub k: Vec<usize>,
    /// Which unembedding to decompose: `plain` W_U (the paper) or `folded`, diag(g) W_U with
    /// the final norm's gain g folded in (the map the normalised residual stream meets).
    #[arg(long, default_value = "plain", value_parser = ["plain", "folded"])]
    pub w_u: String,
    /// Validation sequences for ΔNLL (default: train.eval_sequences).
    #[arg(long)]
    pub sequences: Option<usize>,
    /// Probe sequences for Sink1 under each filter.
    #[arg(long, default_value_t = 32)]
    pub probe_sequences: usize,
    /// Probe length for Sink1 and the band energies.
    #[arg(long, default_value_t = 64)]
    pub probe_len: usize,
}

pub fn run(a: Args) -> Result<()> {
    let run = a.common.device.open(&a.checkpoint)?;
    let layers = match a.layer.as_deref() {
        None => None,
        Some("all") => Some(FilterLayers::All),
        Some("each") => Some(FilterLayers::Each((0..=run.exp.model.n_layers).collect())),
        Some(list) => Some(FilterLayers::Each(
            list.split(',')
                .map(|x| {
                    x.trim().parse::<usize>().map_err(|_| {
                        anyhow!(
                            "--layer {list}: expected `each`, `all` or comma-separated block \
                             inputs such as 2 or 0,3"
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        )),
    };
    let o = DarkOptions {
        bands: a.bands,
        layers,
        ks: a.k,
        fold_gain: a.w_u == "folded",
        sequences: a.sequences,
        probe_sequences: a.probe_sequences,
        probe_len: a.probe_len,
        dest: a.common.destination(),
        seed: a.common.seed,
    };
    let report = dark::dark(&run, &o, &mut |m| eprintln!("{m}"))?;
    let dir = o.dest.dir(&run);
    print(&report, &dir);
    Ok(())
}

/// The terminal summary: one table per filter site, ΔNLL (Sink₁) per family and k.
fn print(r: &DarkReport, dir: &std::path::Path) {
    let base_sink = r.sink1_unfiltered;
    println!(
        "dark signals: {} bands of {} (d = {}); validation NLL {:.4} ({} × {}), Sink1 {}; \
         ΔNLL per filter, one site at a time",
        r.bands,
        r.unembedding,
        r.d_model,
        r.validation.nll,
        r.validation.sequences,
        r.validation.len,
        base_sink.map_or("-".into(), |s| format!("{s:.1}%"))
    );
    println!(
        "identity check (Φ with all bands at every block input): ΔNLL {:+.5}",
        r.filters[0].delta_nll
    );
    let mut sites: Vec<Option<usize>> = Vec::new();
    for r in &r.filters[1..] {
        if !sites.contains(&r.layer) {
            sites.push(r.layer);
        }
    }
    for layer in sites {
        match layer {
            Some(l) => println!("\nblock input {l}:"),
            None => println!("\nevery block input:"),
        }
        print!("{:>4}", "k");
        for family in FAMILIES {
            print!(" {:>16}", format!("Δ{family} (Sink1)"));
        }
        println!();
        for &k in &r.ks {
            print!("{k:>4}");
            for family in FAMILIES {
                let r = r
                    .filters
                    .iter()
                    .find(|r| r.filter == family && r.layer == layer && r.k == Some(k))
                    .expect("evaluated");
                print!(
                    " {:>16}",
                    format!(
                        "{:+.3} ({})",
                        r.delta_nll,
                        r.sink1.map_or("-".into(), |s| format!("{s:.0}"))
                    )
                );
            }
            println!();
        }
    }
    println!("results: {}", dir.display());
}
