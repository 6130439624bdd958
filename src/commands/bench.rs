//! `sinklab bench`.

use super::Overrides;
use crate::bench;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Experiment TOML file (model, micro_batch, ctx and optimizer are taken from it).
    pub experiment: PathBuf,
    #[command(flatten)]
    pub overrides: Overrides,
    /// Untimed warmup steps.
    #[arg(long, default_value_t = 5)]
    pub warmup: usize,
    /// Timed steps per round.
    #[arg(long, default_value_t = 30)]
    pub steps: usize,
    /// Timed rounds (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// fp32 peak of the machine in GFLOP/s (default: estimated from /proc/cpuinfo).
    #[arg(long)]
    pub peak_gflops: Option<f64>,
    /// Print one JSON object.
    #[arg(long)]
    pub json: bool,
    /// Time inference (the logits of every micro-batch, no autodiff) instead of training steps.
    #[arg(long, conflicts_with = "decode")]
    pub forward: bool,
    /// Time cached decoding instead (stream-eval's and generate's path): one stream of N tokens
    /// fed one at a time through a dense key/value cache; a step is one stream.
    #[arg(long, value_name = "N")]
    pub decode: Option<usize>,
    /// Time training even when the memory estimate exceeds what the device has.
    #[arg(long)]
    pub skip_memory_check: bool,
}

pub fn run(a: Args) -> Result<()> {
    let exp = a.overrides.load(&a.experiment)?;
    // Training builds what `train` does (the estimate is a training run's); inference needs
    // a fraction of it and is not checked.
    if !a.forward && a.decode.is_none() {
        let memory = crate::memory::preflight(&exp, a.skip_memory_check)?;
        if !a.json {
            println!("{}", memory.line());
        }
    }
    let vocab = match exp.model.vocab_size {
        Some(v) => v,
        None => exp.data.tokenizer.requested_vocab()?,
    };
    let r = bench::run(
        &exp,
        vocab,
        a.warmup,
        a.steps,
        a.rounds,
        a.peak_gflops,
        match (a.forward, a.decode) {
            (_, Some(n)) => bench::Mode::Decode(n),
            (true, None) => bench::Mode::Forward,
            (false, None) => bench::Mode::Train,
        },
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    println!(
        "sinklab bench ({}): {} | {} params ({} non-embedding) | batch {} × ctx {} per step \
         ({} micro-batches of {}) | {} threads: {} worker(s) × {}",
        r.mode,
        r.device,
        r.params,
        r.non_embedding_params,
        r.batch,
        r.ctx,
        r.batch / r.micro_batch,
        r.micro_batch,
        r.threads,
        r.workers,
        r.threads_per_worker
    );
    let rounds: Vec<String> = r
        .rounds_tokens_per_s
        .iter()
        .map(|t| format!("{t:.0}"))
        .collect();
    println!("tokens/s per round: {}", rounds.join(", "));
    println!("median tokens/s: {:.0}", r.median_tokens_per_s);
    println!(
        "model FLOPs/token: {:.3e} | achieved {:.2} GFLOP/s | peak {:.1} GFLOP/s ({}) | MFU {:.2}%",
        r.flops_per_token,
        r.achieved_gflops,
        r.peak_gflops,
        r.peak_source,
        100.0 * r.mfu
    );
    println!("peak RSS: {:.0} MiB", r.peak_rss_mib);
    Ok(())
}
