//! `sinklab bench`: training throughput of an experiment's model on random tokens, timed the
//! same way as `scripts/bench_torch.py` (warmup steps untimed, then rounds of full optimizer
//! steps — forward, backward, global-norm clip, AdamW, loss read back — each round timed).
//!
//! Model FLOPs per token: `6·N + 12·L·T·d` (N non-embedding parameters, the head included; the
//! second term is attention's q·k and A·v, forward and backward). MFU divides achieved FLOP/s by
//! the machine's fp32 peak, estimated as cores × clock × FLOPs/cycle (32 with AVX2+FMA, 64 with
//! AVX-512) unless `--peak-gflops` is given.
//!
//! `--forward` times inference instead, the path of `eval` and `analyze`: the logits of every
//! micro-batch of the step through the model without autodiff, the micro-batches on the CPU
//! workers concurrently as `eval` runs its chunks, one value read back (FLOPs per
//! token `2·N + 4·L·T·d`). `--decode N` times cached decoding, the path of `stream-eval` and
//! `generate`: one stream (batch 1) of N tokens fed one at a time through a dense key/value
//! cache, each step's logits read back (FLOPs per token `2·N + 4·L·d·(N+1)/2`, the mean cache
//! length).
//!
//! `--heads` times a zero-ablation scan of one layer's heads on a run's model four ways —
//! from layer 0 or restarted at the layer from the recorded `resid_pre`, one head per walk or
//! the heads batched as copies — see [`HeadsBench`];
//! `scripts/bench_heads.sh` puts it beside the whole-model `heads`, `ablate` and `patch`.

use crate::backend;
use crate::config::{DeviceKind, Experiment};
use crate::data::Batch;
use crate::model::{self, Lm};
use crate::optim::{self, Optimizer};
use crate::parallel::Workers;
use crate::train;
use anyhow::Result;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::time::Instant;

/// What `sinklab bench` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Full optimizer steps.
    Train,
    /// Inference over every micro-batch of a step.
    Forward,
    /// Cached decoding of one stream of this many tokens.
    Decode(usize),
}

#[derive(Debug, Serialize)]
pub struct BenchResult {
    /// "train" (full optimizer steps), "forward" (inference) or "decode" (cached decoding).
    pub mode: String,
    pub device: String,
    /// Which kernels run the CPU's matrix products (`kernels::cpu::sgemm::products`); on
    /// other devices, the backend's own.
    pub products: String,
    pub params: usize,
    pub non_embedding_params: usize,
    /// Sequences per optimizer step (`accumulation × micro_batch`).
    pub batch: usize,
    pub micro_batch: usize,
    pub ctx: usize,
    pub workers: usize,
    pub threads_per_worker: usize,
    pub steps_per_round: usize,
    pub rounds_tokens_per_s: Vec<f64>,
    pub median_tokens_per_s: f64,
    pub flops_per_token: f64,
    pub achieved_gflops: f64,
    pub peak_gflops: f64,
    pub peak_source: String,
    pub mfu: f64,
    pub peak_rss_mib: f64,
    pub threads: usize,
    /// On a GPU, which way attention ran and the measurement behind it (the start line of
    /// `train`); None where the kernel does not run on the CubeCL half.
    pub attention: Option<String>,
    /// `--profile-log`: where the profiled step's kernels are in CubeCL's profiling log.
    pub profile: Option<Profiled>,
}

/// The bytes `from..to` of CubeCL's profiling log `log` that one training step wrote.
#[derive(Debug, Serialize)]
pub struct Profiled {
    pub log: std::path::PathBuf,
    pub from: u64,
    pub to: u64,
}

/// The size of the profiling log once CubeCL's logger, which writes from its own task, has
/// written everything so far: the size once it has not changed for half a second.
fn settled_size(log: &std::path::Path) -> u64 {
    let size = || std::fs::metadata(log).map_or(0, |m| m.len());
    let mut last = size();
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let now = size();
        if now == last {
            return now;
        }
        last = now;
    }
}

/// Estimate the machine's fp32 peak in GFLOP/s from /proc/cpuinfo.
pub fn cpu_peak_gflops() -> (f64, String) {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mhz = info
        .lines()
        .find(|l| l.starts_with("cpu MHz"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(2000.0);
    let flags = info.lines().find(|l| l.starts_with("flags")).unwrap_or("");
    let per_cycle = if flags.contains(" avx512f") {
        64.0
    } else if flags.contains(" fma") && flags.contains(" avx2") {
        32.0
    } else {
        8.0
    };
    let gflops = cores as f64 * mhz / 1000.0 * per_cycle;
    (
        gflops,
        format!("{cores} cores × {mhz:.0} MHz × {per_cycle} FLOP/cycle (from /proc/cpuinfo)"),
    )
}

/// Benchmark training steps of `exp`'s model with `vocab` tokens.
#[allow(clippy::too_many_arguments)]
pub fn run(
    exp: &Experiment,
    vocab: usize,
    warmup: usize,
    steps: usize,
    rounds: usize,
    peak: Option<f64>,
    mode: Mode,
    profile_log: Option<&std::path::Path>,
) -> Result<BenchResult> {
    let base = backend::device(exp.run.device)?;
    let device = base.clone().autodiff();
    let mut model = Lm::new(&exp.model, vocab, exp.run.seed, &device);
    let mut adam = Optimizer::new(&exp.optim);
    let (b, t) = (exp.train.micro_batch, exp.model.ctx);
    let accum = exp.accumulation();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    let batches: Vec<Batch> = (0..accum)
        .map(|_| Batch {
            batch: b,
            len: t,
            inputs: (0..b * t).map(|_| rng.gen_range(2..vocab as u32)).collect(),
            targets: (0..b * t).map(|_| rng.gen_range(2..vocab as u32)).collect(),
            loss_mask: vec![1.0; b * t],
            domains: vec![0; b],
        })
        .collect();
    let workers = Workers::for_device(exp.run.device == DeviceKind::Flex, accum);
    // on a GPU, the kernel or the explicit path, whichever measures faster at this shape
    let attention = train::attention_path(exp, &device);
    if let Some(line) = &attention {
        eprintln!("bench: {line}");
    }
    if steps == 0 || rounds == 0 {
        anyhow::bail!("--steps {steps} --rounds {rounds}: need at least 1 of each");
    }
    if let Mode::Decode(n) = mode
        && (n == 0 || n > t)
    {
        anyhow::bail!("--decode {n}: need 1 ≤ tokens ≤ model.ctx = {t}");
    }
    let mut step = |model: Lm| -> Result<Lm> {
        match mode {
            Mode::Forward => {
                // the micro-batches on the workers, as `eval` runs its chunks
                let valid = burn::module::Module::valid(&model);
                workers.map(batches.len(), |i| {
                    let (x, _, _) = crate::eval::batch_tensors(&batches[i], &base);
                    let logits = valid.forward(x); // (B, T, V)
                    let _ = logits.slice([0..1, 0..1, 0..1]).into_scalar::<f32>();
                });
                Ok(model)
            }
            Mode::Decode(n) => {
                let valid = burn::module::Module::valid(&model);
                let mut cache = valid.cache(model::CachePolicy::DENSE)?;
                for &tok in &batches[0].inputs[..n] {
                    let x = crate::generate::ids_tensor(&[tok], &base);
                    let logits = valid.forward_cached(x, &mut cache)?; // (1, 1, V)
                    let _ = logits.slice([0..1, 0..1, 0..1]).into_scalar::<f32>();
                }
                Ok(model)
            }
            Mode::Train => {
                let (grads, loss) = train::gradients(
                    &model,
                    &batches,
                    &device,
                    &workers,
                    exp.train.precision,
                    1.0,
                );
                if backend::is_cpu(&base) {
                    let _ = loss.read();
                    let scale = optim::clip_scale(grads.global_norm(), exp.optim.grad_clip);
                    Ok(adam.step(model, &grads, exp.optim.lr, scale))
                } else {
                    // as `train` steps on a GPU: one read-back, after the update is queued
                    let (model, _, _) = train::update_on_device(
                        model,
                        &mut adam,
                        &grads,
                        loss,
                        exp.optim.lr,
                        exp.optim.grad_clip,
                    );
                    Ok(model)
                }
            }
        }
    };
    for _ in 0..warmup {
        model = step(model)?;
    }
    // tokens per timed step
    let per_step = match mode {
        Mode::Decode(n) => n,
        _ => accum * b * t,
    };
    let mut tps = Vec::new();
    for _ in 0..rounds {
        let t0 = Instant::now();
        for _ in 0..steps {
            model = step(model)?;
        }
        tps.push((per_step * steps) as f64 / t0.elapsed().as_secs_f64());
    }
    // one more step, its kernels in the profiling log (each step ends with a read-back, so
    // its kernels are done before the log settles)
    let profile = match profile_log {
        Some(log) => {
            let from = settled_size(log);
            model = step(model)?;
            let to = settled_size(log);
            if to == from {
                anyhow::bail!(
                    "--profile-log {}: the profiled step wrote nothing there (is CubeCL's \
                     profiling logger pointed at it by a cubecl.toml in the working directory, \
                     and is the device a GPU?)",
                    log.display()
                );
            }
            Some(Profiled {
                log: log.to_path_buf(),
                from,
                to,
            })
        }
        None => None,
    };
    let median = crate::metrics::median(tps.clone());
    let n = model::non_embedding_params(&model);
    let m = &exp.model;
    let attn = |len: f64| 4.0 * (m.n_layers * m.d_model) as f64 * len; // q·k and A·v per token
    let flops_per_token = match mode {
        Mode::Train => 3.0 * (2.0 * n as f64 + attn(t as f64)),
        Mode::Forward => 2.0 * n as f64 + attn(t as f64),
        Mode::Decode(len) => 2.0 * n as f64 + attn((len as f64 + 1.0) / 2.0),
    };
    let achieved = median * flops_per_token / 1e9;
    let (peak_gflops, peak_source) = match peak {
        Some(p) => (p, "--peak-gflops".to_string()),
        None => cpu_peak_gflops(),
    };
    Ok(BenchResult {
        mode: match mode {
            Mode::Train => "train".into(),
            Mode::Forward => "forward".into(),
            Mode::Decode(n) => format!("decode {n}"),
        },
        device: exp.run.device.name().into(),
        products: if backend::is_cpu(&base) {
            crate::kernels::cpu::sgemm::products().into()
        } else {
            "the backend's".into()
        },
        params: model::count_params(&model),
        non_embedding_params: n,
        batch: if matches!(mode, Mode::Decode(_)) {
            1
        } else {
            accum * b
        },
        micro_batch: if matches!(mode, Mode::Decode(_)) {
            1
        } else {
            b
        },
        ctx: t,
        workers: workers.len(),
        threads_per_worker: workers.threads_per_worker(),
        steps_per_round: steps,
        rounds_tokens_per_s: tps,
        median_tokens_per_s: median,
        flops_per_token,
        achieved_gflops: achieved,
        peak_gflops,
        peak_source,
        mfu: achieved / peak_gflops,
        peak_rss_mib: crate::memory::peak_rss().map_or(0.0, |b| b as f64 / (1u64 << 20) as f64),
        threads: rayon::current_num_threads(),
        attention,
        profile,
    })
}

/// `sinklab bench RUN --heads`: what restarting at the layer and batching a layer's heads
/// buy in a zero-ablation scan (the path of `sinklab ablate`), measured on one layer's heads
/// of a run's model on the repeat task ([first, R, R], loss at the second half):
///
/// - `record`: the one walk of the batch that records `resid_pre` of every layer;
/// - `naive`: each head of the layer on its own, one full forward from layer 0 per head (what
///   a scan without the record costs; ×(layers · heads) estimates the naive whole-model scan);
/// - `batched`: the layer's heads at once as copies of the batch, still from layer 0;
/// - `restarted_one`: each head on its own, walked from the layer's recorded `resid_pre`;
/// - `restarted`: the heads as copies, walked from the recorded `resid_pre` (the scan).
///
/// The four give the same loss per head (`max_abs_diff`).
#[derive(Debug, Serialize)]
pub struct HeadsBench {
    pub layers: usize,
    pub heads_per_layer: usize,
    pub sequences: usize,
    pub tokens: usize,
    pub layer: usize,
    pub record_s: f64,
    pub naive_s: f64,
    pub batched_s: f64,
    pub restarted_one_s: f64,
    pub restarted_s: f64,
    /// `naive_s / heads_per_layer`: one head, one full forward.
    pub naive_per_head_s: f64,
    /// `record_s + naive_per_head_s · layers · heads_per_layer`: extrapolated, not measured.
    pub naive_scan_estimate_s: f64,
    /// The largest |loss difference| between the four ways, over the layer's heads.
    pub max_abs_diff: f64,
    pub peak_rss_mib: f64,
}

/// Time one layer's zero-ablation scan four ways (see [`HeadsBench`]).
pub fn heads(
    run: &crate::run::OpenRun,
    n: usize,
    sequences: usize,
    layer: usize,
    seed: u64,
) -> Result<HeadsBench> {
    use crate::analysis::tasks::{Task, task_batch};
    use crate::intervene::ablate::{Ablation, ablate_sets, hooks_for};
    use crate::intervene::{AblationKind, Metric, Positions, Prepared, Scoring, Unit, aggregate};
    let cfg = &run.exp.model;
    if layer >= cfg.n_layers {
        anyhow::bail!("--layer {layer}: the model has layers 0..{}", cfg.n_layers);
    }
    let batch = task_batch(run, &Task::Repeat { n, reps: 2 }, sequences, seed)?.batch;
    let scoring = Scoring {
        metric: Metric::Loss,
        weights: Positions::SecondHalf.weights(&batch),
        answers: None,
    };
    let t0 = Instant::now();
    let p = Prepared::new(&run.model, &batch, &[], scoring, &run.device)?;
    let record_s = t0.elapsed().as_secs_f64();
    let ab = Ablation::new(AblationKind::Zero, batch.batch, seed, None);
    let sets: Vec<Vec<Unit>> = (0..cfg.n_heads)
        .map(|head| vec![Unit::Head { layer, head }])
        .collect();
    let b = batch.batch;
    // every set's copy walked from layer `from` (default: the layer), `per` copies at a time
    let walk = |from: Option<usize>, per: usize| -> Result<Vec<f64>> {
        let mut out = Vec::new();
        for chunk in sets.chunks(per) {
            let (start, mut hooks) =
                hooks_for(&p, &ab, chunk)?.ok_or_else(|| anyhow::anyhow!("no head to ablate"))?;
            let end = p.walk_copies(from.unwrap_or(start), chunk.len(), &mut hooks);
            let r = p.metric_rows(end, chunk.len());
            out.extend(r.chunks(b).map(aggregate));
        }
        Ok(out)
    };
    let t0 = Instant::now();
    let naive = walk(Some(0), 1)?;
    let naive_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let batched = walk(Some(0), p.max_copies())?;
    let batched_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let restarted_one = walk(None, 1)?;
    let restarted_one_s = t0.elapsed().as_secs_f64();
    let t0 = Instant::now();
    let restarted = ablate_sets(&p, &ab, &sets, &mut |_| {})?;
    let restarted_s = t0.elapsed().as_secs_f64();
    let max_abs_diff = [batched, restarted_one, restarted]
        .iter()
        .flat_map(|w| w.iter().zip(&naive).map(|(a, b)| (a - b).abs()))
        .fold(0.0, f64::max);
    let naive_per_head_s = naive_s / cfg.n_heads as f64;
    Ok(HeadsBench {
        layers: cfg.n_layers,
        heads_per_layer: cfg.n_heads,
        sequences: b,
        tokens: batch.len,
        layer,
        record_s,
        naive_s,
        batched_s,
        restarted_one_s,
        restarted_s,
        naive_per_head_s,
        naive_scan_estimate_s: record_s + naive_per_head_s * (cfg.n_layers * cfg.n_heads) as f64,
        max_abs_diff,
        peak_rss_mib: crate::memory::peak_rss().map_or(0.0, |b| b as f64 / (1u64 << 20) as f64),
    })
}
