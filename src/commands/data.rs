//! `sinklab data prepare` and `sinklab data bench`.

use super::Overrides;
use crate::data::{self, Dataset, Sampler};
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    pub cmd: DataCmd,
}

#[derive(clap::Subcommand)]
pub enum DataCmd {
    /// Stream an experiment's corpus ([data]: "embedded", a corpus directory, or files under
    /// [data.sources.NAME]: .txt, .jsonl, .jsonl.gz, .jsonl.zst, .parquet) into token shards
    /// under data.cache_dir, as `train` does before its first step: tokenizer trained on a sample
    /// or the training split (or loaded), tokenization on every core, u16/u32 shards with an
    /// index and a manifest written atomically. An interrupted preparation resumes at the first
    /// unfinished source file. Prints the manifest's summary.
    Prepare {
        /// Experiment TOML file (only [data] is used).
        experiment: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
    },
    /// How fast the sampler assembles training batches from the prepared shards (one thread),
    /// to compare with the trainer's tokens/s (`sinklab bench`).
    Bench {
        /// Experiment TOML file ([data], model.ctx and train.micro_batch are used).
        experiment: PathBuf,
        #[command(flatten)]
        overrides: Overrides,
        /// Micro-batches to assemble.
        #[arg(long, default_value_t = 2000)]
        batches: usize,
        /// Sequences per micro-batch (default: train.micro_batch).
        #[arg(long)]
        batch: Option<usize>,
    },
}

pub fn run(a: Args) -> Result<()> {
    match a.cmd {
        DataCmd::Prepare {
            experiment,
            overrides,
        } => prepare(overrides.load(&experiment)?),
        DataCmd::Bench {
            experiment,
            overrides,
            batches,
            batch,
        } => bench(overrides.load(&experiment)?, batches, batch),
    }
}

fn prepare(exp: crate::config::Experiment) -> Result<()> {
    if exp.data.synthetic.is_some() {
        bail!("data.synthetic: a generated task has no corpus to prepare (train generates it)");
    }
    let t0 = Instant::now();
    let ds = Dataset::prepare(&exp.data, &mut |m| eprintln!("{m}"))?;
    let secs = t0.elapsed().as_secs_f64();
    let m = data::read_manifest(&ds.dir)?;
    println!(
        "prepared {} → {} ({} ids, vocabulary {})",
        m.corpus,
        ds.dir.display(),
        m.width.ext(),
        m.vocab_size
    );
    println!(
        "{:<16} {:>7} {:>12} {:>14} {:>14} {:>12}  skipped",
        "domain", "files", "documents", "train tokens", "val tokens", "text MB"
    );
    let (mut bytes, mut tokens, mut source, mut disk) = (0u64, 0u64, 0u64, 0u64);
    for d in &m.domains {
        let skipped: Vec<String> = d.skipped.iter().map(|(k, n)| format!("{n} {k}")).collect();
        println!(
            "{:<16} {:>7} {:>12} {:>14} {:>14} {:>12.1}  {}",
            d.name,
            d.shards.len(),
            d.documents,
            d.train_tokens,
            d.val_tokens,
            d.text_bytes as f64 / 1e6,
            if skipped.is_empty() {
                "none".into()
            } else {
                skipped.join(", ")
            }
        );
        bytes += d.text_bytes;
        tokens += d.tokens;
        for s in &d.shards {
            source += s.source_bytes;
            disk += std::fs::metadata(ds.dir.join(&s.file))?.len();
        }
    }
    println!(
        "source {:.1} MB ({:.1} MB of text) → {tokens} tokens, shards {:.1} MB on disk",
        source as f64 / 1e6,
        bytes as f64 / 1e6,
        disk as f64 / 1e6
    );
    println!(
        "prepared in {:.1} s: {:.2} MB/s of text ({:.2} MB/s as stored), {:.0} tokens/s{}",
        m.seconds,
        bytes as f64 / 1e6 / m.seconds,
        source as f64 / 1e6 / m.seconds,
        tokens as f64 / m.seconds,
        match (secs < 0.5 * m.seconds, m.resumed_shards) {
            (true, _) => format!(" (earlier; opened now in {secs:.2} s)"),
            (false, 0) => String::new(),
            (false, k) => format!(
                " (resumed: {} finished before the interruption, so these rates overstate the \
                 throughput)",
                crate::progress::count(k, "shard was", Some("shards were"))
            ),
        }
    );
    Ok(())
}

fn bench(exp: crate::config::Experiment, batches: usize, batch: Option<usize>) -> Result<()> {
    let t0 = Instant::now();
    let ds = Dataset::prepare(&exp.data, &mut |m| eprintln!("{m}"))?;
    let open = t0.elapsed().as_secs_f64();
    let sampler = Sampler::new(&ds, &exp.data, exp.model.ctx, exp.run.seed)?;
    let b = batch.unwrap_or(exp.train.micro_batch);
    let t = Instant::now();
    let mut checksum = 0u64;
    for i in 0..batches {
        let mb = sampler.batch(&ds, i as u64, 0, b);
        checksum = mb
            .inputs
            .iter()
            .fold(checksum, |c, &t| c.wrapping_add(t as u64));
    }
    let secs = t.elapsed().as_secs_f64();
    let toks = (batches * b * exp.model.ctx) as f64;
    println!(
        "data bench: {batches} micro-batches of {b} × {} tokens in {secs:.3} s = {:.0} tokens/s \
         ({:.1} µs per micro-batch; one thread) | dataset opened in {open:.3} s | checksum {checksum}",
        exp.model.ctx,
        toks / secs,
        secs / batches as f64 * 1e6
    );
    Ok(())
}
