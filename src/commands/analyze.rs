//! `sinklab analyze`.

use super::AnalysisArgs;
use crate::analysis::inspect::{self, AnalyzeOptions};
use anyhow::{Result, anyhow};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    #[command(flatten)]
    pub common: AnalysisArgs,
    /// Probe sequences per kind.
    #[arg(long, default_value_t = 100)]
    pub sequences: usize,
    /// Probe length T (capped at model.ctx).
    #[arg(long, default_value_t = 64)]
    pub len: usize,
    /// Thresholds ε of the Sink_k^ε table (comma-separated).
    #[arg(long, value_delimiter = ',', default_value = "0.2,0.3,0.4,0.5,0.8")]
    pub eps: Vec<f64>,
    /// Largest k of the Sink_k^ε table.
    #[arg(long, default_value_t = 10)]
    pub k_max: usize,
    /// Attention maps to draw as LAYER:HEAD (repeatable, 0-based; default: per layer the
    /// head with the highest first-token importance).
    #[arg(long = "map", value_name = "LAYER:HEAD")]
    pub maps: Vec<String>,
    /// Text for the attention maps (default: the first natural probe sequence).
    #[arg(long)]
    pub map_text: Option<String>,
    /// Attention bar: mean received attention must exceed this.
    #[arg(long, default_value_t = 0.2)]
    pub bar_mean: f64,
    /// Attention bar: standard deviation of received attention must be below this.
    #[arg(long, default_value_t = 0.1)]
    pub bar_std: f64,
    /// Attention bar: at least this many later queries must see the key.
    #[arg(long, default_value_t = 8)]
    pub bar_min_queries: usize,
    /// W_U bands for the dark ratio of attention-bar tokens.
    #[arg(long, default_value_t = 20)]
    pub bands: usize,
    /// Natural probes from this text file: its consecutive windows of --len tokens (at most
    /// --sequences; a shorter text is one window of its own length) instead of the run's
    /// validation split.
    #[arg(long, value_name = "FILE")]
    pub text: Option<PathBuf>,
    /// Print analysis.json to stdout instead of the tables.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: Args) -> Result<()> {
    let maps = a
        .maps
        .iter()
        .map(|m| {
            m.split_once(':')
                .and_then(|(l, h)| Some((l.parse().ok()?, h.parse().ok()?)))
                .ok_or_else(|| anyhow!("--map {m}: expected LAYER:HEAD, e.g. 2:0"))
        })
        .collect::<Result<Vec<_>>>()?;
    let run = a.common.device.open(&a.checkpoint)?;
    let o = AnalyzeOptions {
        sequences: a.sequences,
        len: a.len,
        eps: a.eps,
        k_max: a.k_max,
        maps,
        map_text: a.map_text,
        bar_mean: a.bar_mean,
        bar_std: a.bar_std,
        bar_min_queries: a.bar_min_queries,
        bands: a.bands,
        out: a.common.out,
        tensorboard: a.common.tensorboard,
        seed: a.common.seed,
        text: a.text,
    };
    let report = inspect::analyze(&run, &o, &mut |m| eprintln!("{m}"))?;
    let dir = o.out.clone().unwrap_or_else(|| {
        run.run_dir
            .join("analysis")
            .join(format!("step_{:08}", run.state.step))
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        report.print(&dir);
    }
    Ok(())
}
