//! `sinklab bench`.

use super::Overrides;
use crate::bench;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct Args {
    /// Experiment TOML file (model, micro_batch, ctx and optimizer are taken from it); with
    /// --heads, a run directory.
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
    /// After the timed rounds, one more training step whose kernels CubeCL's profiler logs
    /// to FILE (a GPU backend, with CubeCL's profiling logger pointed at FILE by a
    /// `cubecl.toml`, as scripts/gpu_checks.sh does): the byte range of FILE that step wrote
    /// goes into the result (`profile`), for scripts/kernel_profile.py to break down by kernel.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["forward", "decode"])]
    pub profile_log: Option<PathBuf>,
    /// Time training even when the memory estimate exceeds what the device has.
    #[arg(long)]
    pub skip_memory_check: bool,
    /// Time a zero-ablation scan of one layer's heads of the run EXPERIMENT four ways: from
    /// layer 0 or restarted at the layer, one head per walk or the heads batched as copies
    /// (restarted and batched: the scan of `sinklab ablate`), on the repeat task.
    #[arg(long, conflicts_with_all = ["forward", "decode"])]
    pub heads: bool,
    /// --heads: the layer whose heads are timed (default: the middle one).
    #[arg(long, requires = "heads")]
    pub layer: Option<usize>,
    /// --heads: distinct tokens of the repeat task [first, R, R].
    #[arg(long, default_value_t = 50, requires = "heads")]
    pub n: usize,
    /// --heads: sequences of the repeat task.
    #[arg(long, default_value_t = 4, requires = "heads")]
    pub sequences: usize,
    /// Under `mpirun -np N` (a sinklab built with --features mpi): time the sum of one step's
    /// gradients over the ranks — the experiment's parameter count in f32, in the buckets
    /// training uses — --steps times after --warmup; the slowest rank's median, and the
    /// bandwidth (docs/distributed.md models the step time at N ranks from it).
    #[arg(long, conflicts_with_all = ["forward", "decode", "heads"])]
    pub allreduce: bool,
    /// --allreduce: sum this many f32 values instead of the experiment's trainable parameters
    /// (e.g. 60000000 for a 60M model without its embeddings).
    #[arg(long, value_name = "N", requires = "allreduce")]
    pub values: Option<usize>,
}

pub fn run(a: Args) -> Result<()> {
    if a.allreduce {
        return allreduce(a);
    }
    if let Some(l) = crate::dist::launch::detect() {
        anyhow::bail!(
            "rank {} of {} ({}): of the benchmarks only --allreduce runs as several MPI ranks",
            l.rank,
            l.size,
            l.launcher
        );
    }
    if a.heads {
        return heads(a);
    }
    let exp = a.overrides.load(&a.experiment)?;
    // Training builds what `train` does (the estimate is a training run's); inference needs
    // a fraction of it and is not checked.
    if !a.forward && a.decode.is_none() {
        let trainable = crate::model::trainable_elements(&exp)?;
        let memory = crate::memory::preflight(&exp, a.skip_memory_check, trainable)?;
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
        a.profile_log.as_deref(),
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
    println!("matrix products: {}", r.products);
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
    if let Some(p) = &r.profile {
        println!(
            "profiled step: bytes {}..{} of {} (scripts/kernel_profile.py)",
            p.from,
            p.to,
            p.log.display()
        );
    }
    Ok(())
}

fn heads(a: Args) -> Result<()> {
    if !a.overrides.set.is_empty() {
        anyhow::bail!("--heads times a run's model as it is: --set does not apply");
    }
    let device = super::RunDevice {
        device: a.overrides.device.clone(),
    };
    let run = device.open(&a.experiment)?;
    let layer = a.layer.unwrap_or(run.exp.model.n_layers / 2);
    let r = bench::heads(&run, a.n, a.sequences, layer, 0)?;
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    let h = r.heads_per_layer;
    println!(
        "sinklab bench --heads: {} layers × {h} heads | zero ablation of layer {}'s heads, \
         {} sequences × {} tokens (repeat task, loss at the second half)",
        r.layers, r.layer, r.sequences, r.tokens
    );
    let rows = [
        (
            "record (one walk, resid_pre of every layer)".to_string(),
            r.record_s,
        ),
        ("naive (one full forward per head)".to_string(), r.naive_s),
        (format!("batched ({h} copies from layer 0)"), r.batched_s),
        (
            format!("one head per walk, restarted at layer {}", r.layer),
            r.restarted_one_s,
        ),
        (
            format!("batched, restarted at layer {}", r.layer),
            r.restarted_s,
        ),
    ];
    for (what, secs) in rows {
        println!("{what:<44} {secs:7.2} s");
    }
    println!(
        "naive whole-model scan, extrapolated: {:.0} s (record + {} × {:.2} s)",
        r.naive_scan_estimate_s,
        r.layers * h,
        r.naive_per_head_s
    );
    println!(
        "largest loss difference between the four ways: {:.2e}",
        r.max_abs_diff
    );
    println!("peak RSS: {:.0} MiB", r.peak_rss_mib);
    Ok(())
}

/// `--allreduce`: every rank times the sum; rank 0 prints.
fn allreduce(a: Args) -> Result<()> {
    let world = crate::dist::World::from_env()?;
    let exp = a.overrides.load(&a.experiment)?;
    let vocab = crate::memory::planned_vocab(&exp)?;
    let trainable = crate::memory::estimate::param_count(&exp.model, vocab).trainable as usize;
    let values = a.values.unwrap_or(trainable);
    let r = crate::dist::bench::allreduce(&world, values, a.warmup, a.steps)?;
    if !world.is_root() {
        return Ok(());
    }
    if a.json {
        println!("{}", serde_json::to_string(&r)?);
        return Ok(());
    }
    let mut hosts = r.hosts.clone();
    hosts.dedup();
    println!(
        "sinklab bench --allreduce: {} ({} trainable parameters) | {} f32 = {:.1} MB in {} \
         bucket(s) | {} ranks on {} ({})",
        exp.run.name,
        crate::memory::estimate::count(trainable as u64),
        r.values,
        r.bytes as f64 / 1e6,
        r.buckets,
        r.ranks,
        hosts.join(", "),
        r.launcher.as_deref().unwrap_or("?")
    );
    println!(
        "all-reduce per step (slowest rank): median {:.2} ms, min {:.2} ms over {} steps",
        1e3 * r.median_s,
        1e3 * r.min_s,
        r.times_s.len()
    );
    println!(
        "bandwidth: {:.2} GB/s algorithm (bytes / time), {:.2} GB/s bus (2(N-1)/N x bytes / time)",
        r.algbw_gb_s, r.busbw_gb_s
    );
    Ok(())
}
