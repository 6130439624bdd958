//! `sinklab bench EXP --allreduce` under `mpirun -np N`: the time of one step's gradient sum
//! over the ranks — the model's parameter count in f32, summed with [`World::sum_f32`] (the
//! buckets training uses) — and the bandwidth it reaches. docs/distributed.md turns the figures
//! into a model of the step time at N ranks.

use super::World;
use anyhow::{Result, bail};
use serde::Serialize;
use std::time::Instant;

/// What `bench --allreduce` measured.
#[derive(Debug, Clone, Serialize)]
pub struct AllreduceReport {
    pub ranks: usize,
    /// Each rank's host, in rank order.
    pub hosts: Vec<String>,
    pub launcher: Option<String>,
    /// f32 values summed per step (the model's parameters) and their bytes.
    pub values: usize,
    pub bytes: u64,
    /// `MPI_Allreduce` calls per step ([`World::bucket`] values each at most).
    pub buckets: usize,
    /// Every timed step's all-reduce, the slowest rank's time, in seconds.
    pub times_s: Vec<f64>,
    pub median_s: f64,
    pub min_s: f64,
    /// bytes / time.
    pub algbw_gb_s: f64,
    /// 2(N − 1)/N × bytes / time: what each rank's link carries in a ring all-reduce, per
    /// second (comparable across N, and with the link's bandwidth).
    pub busbw_gb_s: f64,
}

/// Time `steps` all-reduces of `values` f32 (after `warmup` untimed ones); each result is
/// checked (rank r contributes r + 1 everywhere, so every value must be N(N + 1)/2).
pub fn allreduce(
    world: &World,
    values: usize,
    warmup: usize,
    steps: usize,
) -> Result<AllreduceReport> {
    if world.size() < 2 {
        bail!(
            "--allreduce times the sum over MPI ranks: start it with `mpirun -np N sinklab \
             bench FILE --allreduce` (N ≥ 2; a sinklab built with --features mpi)"
        );
    }
    if steps == 0 || values == 0 {
        bail!("--allreduce needs at least one timed step and one value");
    }
    let n = world.size();
    let expect = (n * (n + 1) / 2) as f32;
    let mut buf = vec![0f32; values];
    let mut times = Vec::with_capacity(steps);
    for i in 0..warmup + steps {
        buf.fill((world.rank() + 1) as f32);
        world.barrier();
        let t0 = Instant::now();
        world.sum_f32(&mut buf);
        let dt = t0.elapsed().as_secs_f64();
        if let Some(at) = [0, values / 2, values - 1]
            .into_iter()
            .find(|&j| buf[j] != expect)
        {
            bail!(
                "all-reduce step {i}: value {at} is {} on {}, expected {expect}",
                buf[at],
                world.who()
            );
        }
        if i >= warmup {
            times.push(dt);
        }
    }
    // A step takes as long as its slowest rank.
    let all = world.all_gather(&times)?;
    let slowest: Vec<f64> = (0..steps)
        .map(|i| all.iter().map(|t| t[i]).fold(0.0, f64::max))
        .collect();
    let mut sorted = slowest.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    let bytes = (values * 4) as u64;
    Ok(AllreduceReport {
        ranks: n,
        hosts: world.all_gather(&world.host().to_string())?,
        launcher: world.launcher().map(str::to_string),
        values,
        bytes,
        buckets: values.div_ceil(world.bucket()),
        times_s: slowest,
        median_s: median,
        min_s: sorted[0],
        algbw_gb_s: bytes as f64 / median / 1e9,
        busbw_gb_s: ring_bytes(n, bytes) / median / 1e9,
    })
}

/// The bytes each rank sends (and receives) in a ring all-reduce of `bytes`: 2(N − 1)/N ×
/// bytes (a reduce-scatter and an all-gather, N − 1 chunks of bytes/N each).
pub fn ring_bytes(ranks: usize, bytes: u64) -> f64 {
    2.0 * (ranks as f64 - 1.0) / ranks as f64 * bytes as f64
}

/// The ring model of an all-reduce's time: 2(N − 1)/N × bytes / bandwidth + 2(N − 1) ×
/// latency (seconds; bandwidth in bytes/s).
pub fn ring_time(ranks: usize, bytes: u64, bandwidth: f64, latency: f64) -> f64 {
    ring_bytes(ranks, bytes) / bandwidth + 2.0 * (ranks as f64 - 1.0) * latency
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_model_numbers() {
        // 240 MB over 2 ranks moves 240 MB per rank: 2.4 s at 100 MB/s, plus 2 latencies.
        let t = ring_time(2, 240_000_000, 1e8, 1e-5);
        assert!((t - 2.40002).abs() < 1e-9, "{t}");
        // At 8 ranks each rank moves 7/4 of the bytes.
        assert!((ring_bytes(8, 400) - 700.0).abs() < 1e-9);
        assert!(ring_bytes(1, 400).abs() < 1e-12);
    }
}
