//! `sinklab patch`.

use super::AnalysisArgs;
use crate::analysis::patch::{self, AddOptions, By, Direction, PatchOptions, PatchReport, Prompts};
use crate::intervene::Metric;
use crate::model::Site;
use anyhow::{Result, anyhow, bail};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub common: AnalysisArgs,
    /// Clean and corrupted prompts: a JSON Lines file of {"clean", "corrupt", "answer",
    /// "wrong"} (equal token lengths; one-token answers). Default: the built-in repeat task
    /// (clean [first, A, A without its last token], corrupted with A's last token replaced).
    #[arg(long, value_name = "FILE")]
    pub prompts: Option<PathBuf>,
    /// Distinct tokens A of the built-in prompts.
    #[arg(long, default_value_t = 20)]
    pub n: usize,
    /// Built-in prompt pairs.
    #[arg(long, default_value_t = 8)]
    pub sequences: usize,
    /// The site patched: z, q, k, v, pattern, gate (per head; k and v per key/value group) or
    /// resid_pre, resid_mid, resid_post, attn_out, mlp_out (per layer and position).
    #[arg(long, default_value = "z")]
    pub site: String,
    /// head, head-position or layer-position (default: head for per-head sites,
    /// layer-position for the residual stream).
    #[arg(long, value_parser = ["head", "head-position", "layer-position"])]
    pub by: Option<String>,
    /// denoise (the corrupted run with a clean activation) or noise (the reverse).
    #[arg(long, default_value = "denoise", value_parser = ["denoise", "noise"])]
    pub direction: String,
    /// logit-diff (logit(answer) − logit(wrong) at the last position) or loss (of the answer).
    #[arg(long, default_value = "logit-diff", value_parser = ["logit-diff", "loss"])]
    pub metric: String,
    /// Layers to patch (comma-separated; default all).
    #[arg(long, value_delimiter = ',')]
    pub layers: Vec<usize>,
    /// Directional addition: a JSON array of numbers, or `mean-diff` (the mean clean −
    /// corrupted activation at --at, last position; written to direction.json), added at the
    /// last position of the corrupted prompts.
    #[arg(long, value_name = "FILE|mean-diff")]
    pub add: Option<String>,
    /// Where the direction goes: L:SITE or L:SITE:H (e.g. 4:resid_pre, 17:z:4).
    #[arg(long, value_name = "L:SITE[:H]")]
    pub at: Option<String>,
    /// Scales α of the added direction (negative subtracts).
    #[arg(long, value_delimiter = ',', default_values_t = [-1.0, 0.0, 0.5, 1.0, 2.0])]
    pub scales: Vec<f64>,
    /// Print patch.json to stdout instead of the summary.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let site: Site = a.site.parse()?;
    let by = match a.by.as_deref() {
        Some("head") => By::Head,
        Some("head-position") => By::HeadPosition,
        Some(_) => By::LayerPosition,
        None if matches!(site, Site::Head(_)) => By::Head,
        None => By::LayerPosition,
    };
    let add = match (&a.add, &a.at) {
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => bail!("--add and --at go together"),
        (Some(src), Some(at)) => {
            let parts: Vec<&str> = at.split(':').collect();
            let bad =
                || anyhow!("--at {at}: expected L:SITE or L:SITE:H, e.g. 4:resid_pre or 17:z:4");
            let (layer, site, index) = match parts.as_slice() {
                [l, s] => (l.parse().map_err(|_| bad())?, s.parse::<Site>()?, None),
                [l, s, h] => (
                    l.parse().map_err(|_| bad())?,
                    s.parse::<Site>()?,
                    Some(h.parse().map_err(|_| bad())?),
                ),
                _ => return Err(bad()),
            };
            Some(AddOptions {
                file: (src != "mean-diff").then(|| PathBuf::from(src)),
                layer,
                site,
                index,
                scales: a.scales.clone(),
            })
        }
    };
    let run = a.common.device.open(&a.checkpoint)?;
    let o = PatchOptions {
        prompts: match a.prompts {
            Some(file) => Prompts::File { file },
            None => Prompts::Repeat {
                n: a.n,
                sequences: a.sequences,
            },
        },
        site,
        by,
        direction: if a.direction == "noise" {
            Direction::Noise
        } else {
            Direction::Denoise
        },
        metric: if a.metric == "loss" {
            Metric::Loss
        } else {
            Metric::LogitDiff
        },
        layers: (!a.layers.is_empty()).then_some(a.layers),
        add,
        seed: a.common.seed,
        dest: a.common.destination(),
    };
    let r = patch::patch(&run, &o, &mut |m| eprintln!("{m}"))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(());
    }
    let dir = o.dest.dir(&run);
    print(&r, &dir);
    Ok(())
}

fn print(r: &PatchReport, dir: &std::path::Path) {
    println!(
        "patch: {} {} of {} tokens; metric clean {:.4}, corrupted {:.4} ({:.1} s)",
        r.site,
        crate::progress::count(r.count, "prompt pair", None),
        r.len,
        r.clean,
        r.corrupt,
        r.seconds
    );
    let mut cells: Vec<(f64, String)> = Vec::new();
    for (i, row) in r.normalised.iter().enumerate() {
        for (j, &v) in row.iter().enumerate() {
            // one spelling of a head everywhere: `L.H` (crate::heads::head_label)
            let (row, col) = (&r.row_labels[i], &r.column_labels[j]);
            cells.push((
                v,
                match r.by {
                    By::Head => format!("{row}.{col}"),
                    By::HeadPosition => format!("{row} at {col}"),
                    By::LayerPosition => format!("layer {row} at {col}"),
                },
            ));
        }
    }
    cells.sort_by(|a, b| b.0.abs().total_cmp(&a.0.abs()));
    let top: Vec<String> = cells
        .iter()
        .take(8)
        .map(|(v, l)| format!("{l}: {v:+.3}"))
        .collect();
    println!("  largest normalised effects: {}", top.join("; "));
    if let Some(a) = &r.addition {
        let pts: Vec<String> = a
            .options
            .scales
            .iter()
            .zip(&a.normalised)
            .map(|(s, v)| format!("α {s}: {v:+.3}"))
            .collect();
        println!(
            "  adding {} (‖u‖ = {:.3}) at layer {} {}: {}",
            a.direction,
            a.norm,
            a.options.layer,
            a.options.site,
            pts.join(", ")
        );
    }
    println!("results in {}: {}", dir.display(), r.files.join(", "));
}
