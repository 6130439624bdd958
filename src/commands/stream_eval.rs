//! `sinklab stream-eval`.

use super::RunDevice;
use crate::analysis::stream::{
    self, StreamOptions, StreamReport, default_budget, default_text_tokens,
};
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// A run directory (its newest checkpoint is used) or runs/NAME/checkpoints/step_N.
    pub checkpoint: PathBuf,
    /// Initial tokens kept (attention sinks).
    #[arg(long, default_value_t = 4)]
    pub sinks: usize,
    /// Recent tokens kept (default: min(model.ctx / 2, 1024) − sinks); the budget L of every
    /// policy is sinks + window.
    #[arg(long)]
    pub window: Option<usize>,
    /// Tokens of text to evaluate (default: 16 × model.ctx, at most 4096) from the validation
    /// split.
    #[arg(long)]
    pub tokens: Option<usize>,
    /// Evaluate this text file instead of the validation split.
    #[arg(long)]
    pub text: Option<PathBuf>,
    /// The evicting caches to compare, as numbers of initial tokens kept (comma-separated, e.g.
    /// 0,1,2,4: each cache keeps k + (L − k) tokens of the same budget L = sinks + window);
    /// default: 0, 1 and --sinks.
    #[arg(long, value_delimiter = ',')]
    pub kept: Option<Vec<usize>>,
    /// Leave out the sliding window re-computed over the last L tokens (L forwards of L
    /// tokens per scored token: by far the slowest row on a large model).
    #[arg(long)]
    pub no_recompute: bool,
    /// Windows per forward for the re-computation reference.
    #[arg(long, default_value_t = 16)]
    pub batch: usize,
    /// Output directory (default RUN/analysis/step_N/).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write the perplexities and the plot to the run's TensorBoard.
    #[arg(long)]
    pub tensorboard: bool,
    /// Replace an earlier stream.json (without it, an existing one stops the command before it
    /// computes anything).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub device: RunDevice,
}

pub fn run(a: Args) -> Result<()> {
    let run = a.device.open(&a.checkpoint)?;
    let ctx = run.exp.model.ctx;
    let o = StreamOptions {
        sinks: a.sinks,
        window: a
            .window
            .unwrap_or(default_budget(ctx).saturating_sub(a.sinks)),
        tokens: a.tokens.unwrap_or(default_text_tokens(ctx)),
        kept: a.kept,
        recompute: !a.no_recompute,
        text: a.text,
        batch: a.batch,
        dest: crate::analysis::Destination {
            out: a.out,
            tensorboard: a.tensorboard,
            force: a.force,
        },
    };
    print(&stream::stream_eval(&run, &o, &mut |m| eprintln!("{m}"))?);
    Ok(())
}

/// The terminal table.
fn print(r: &StreamReport) {
    println!(
        "stream-eval: {} tokens, model.ctx = {}; every cache policy keeps L = {} tokens \
         (plus the model's own sink tokens / slots)",
        r.tokens, r.ctx, r.budget
    );
    println!(
        "{:>40} {:>7} {:>10} {:>14} {:>14}",
        "policy", "scored", "PPL", "PPL past L", "PPL past ctx"
    );
    let opt = |p: Option<f64>| p.map_or("-".into(), |p| format!("{p:.2}"));
    for r in &r.rows {
        println!(
            "{:>40} {:>7} {:>10.2} {:>14} {:>14}",
            r.name,
            r.scored,
            r.ppl,
            opt(r.ppl_past_budget),
            opt(r.ppl_past_ctx)
        );
    }
    println!("results: {}", r.dir.display());
}
