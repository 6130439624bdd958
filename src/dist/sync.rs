//! What the training loop asks of the ranks: the run directory started by rank 0 and shared
//! ([`start`]), each rank's micro-batches ([`share`]), the gradient sum ([`sum_gradients`]) and
//! the weights check ([`check_weights`]). With one rank each is a no-op.

use super::{Agreed, World};
use crate::backend::RankInfo;
use crate::config::Experiment;
use crate::model::Lm;
use crate::optim::{self, GradAccumulator};
use crate::run;
use anyhow::{Result, bail};
use burn::tensor::{Tensor, TensorData};
use serde::{Deserialize, Serialize};
use std::ops::Range;
use std::path::PathBuf;

/// The micro-batches rank `rank` of `size` computes out of `accum` per step: a contiguous
/// block, `accum · rank / size ..  accum · (rank + 1) / size` (blocks differ by at most one).
pub fn share(accum: usize, rank: usize, size: usize) -> Range<usize> {
    accum * rank / size..accum * (rank + 1) / size
}

/// What rank 0's start of the run tells the others.
#[derive(Serialize, Deserialize)]
enum Started {
    Ok {
        run_dir: PathBuf,
        previous_digest: Option<String>,
        resume_from: Option<(u64, PathBuf)>,
    },
    Failed {
        code: i32,
    },
}

/// Start the run: rank 0 locks and prepares the run directory ([`run::start`], with every
/// rank's host and device in the provenance) and tells the others where it is and which
/// checkpoint to resume from; they read that checkpoint themselves (the run directory is on a
/// file system every rank sees). A failure of rank 0 reaches every rank.
pub fn start(world: &World, exp: &Experiment, resume: bool, device: &str) -> Result<run::Start> {
    let me = RankInfo {
        rank: world.rank(),
        local_rank: world.local_rank(),
        host: world.host().to_string(),
        device: device.to_string(),
        pid: std::process::id(),
    };
    let ranks = world.all_gather(&me)?;
    if world.size() == 1 {
        return run::start(exp, resume, Vec::new());
    }
    if exp.accumulation() < world.size() {
        return Err(Agreed::new(format!(
            "{} ranks, but a step has only {} micro-batch{} (train.batch_tokens / \
             (train.micro_batch × model.ctx) = {} / ({} × {})): each rank needs at least one; \
             lower train.micro_batch, raise train.batch_tokens, or start fewer ranks",
            world.size(),
            exp.accumulation(),
            if exp.accumulation() == 1 { "" } else { "es" },
            exp.train.batch_tokens,
            exp.train.micro_batch,
            exp.model.ctx
        ))
        .into());
    }
    if world.is_root() {
        let started = run::start(exp, resume, ranks);
        let msg = match &started {
            Ok(s) => Started::Ok {
                run_dir: s.run_dir.clone(),
                previous_digest: s.previous_digest.clone(),
                resume_from: s.resume_from.clone(),
            },
            Err(e) => Started::Failed {
                code: if crate::lock::is_busy(e) {
                    crate::lock::EXIT_BUSY
                } else {
                    1
                },
            },
        };
        world.broadcast(Some(&msg))?;
        return started;
    }
    match world.broadcast::<Started>(None)? {
        Started::Ok {
            run_dir,
            previous_digest,
            resume_from,
        } => Ok(run::Start::follower(run_dir, previous_digest, resume_from)),
        Started::Failed { code } => Err(Agreed {
            message: format!(
                "rank 0 could not start the run (exit status {code}; its message says why)"
            ),
            code,
        }
        .into()),
    }
}

/// A test-only fault: `SINKLAB_TEST_DIVERGE=RANK:STEP` makes rank RANK add 1e-3 to its first
/// summed gradient value at step STEP, so that its weights leave the others'.
const DIVERGE_VAR: &str = "SINKLAB_TEST_DIVERGE";

fn diverges(rank: usize, step: u64) -> bool {
    std::env::var(DIVERGE_VAR).ok().is_some_and(|v| {
        v.split_once(':')
            .is_some_and(|(r, s)| r.parse() == Ok(rank) && s.parse() == Ok(step))
    })
}

/// The step's gradients and loss summed over the ranks: every gradient, in name order, is
/// flattened into one host buffer (one copy from the device, the staging a GPU needs), summed
/// with `MPI_Allreduce` in f32 buckets ([`World::sum_f32`]) and cut back into tensors on the
/// gradients' device; the loss is summed in f64. The first call compares the ranks' gradient
/// layouts (names and sizes), which must agree for the buffers to line up.
pub fn sum_gradients(
    world: &World,
    mut grads: GradAccumulator,
    loss: f64,
    step: u64,
) -> Result<(GradAccumulator, f64)> {
    if world.size() == 1 {
        return Ok((grads, loss));
    }
    let layout: Vec<(String, usize)> = grads
        .grads
        .iter()
        .map(|(k, g)| (k.clone(), g.shape().num_elements()))
        .collect();
    if !world.layout_checked.get() {
        let all = world.all_gather(&layout)?;
        if let Some(r) = all.iter().position(|l| *l != all[0]) {
            return Err(Agreed::new(format!(
                "the gradients of rank 0 and rank {r} do not line up ({} against {} tensors): \
                 the ranks built different models",
                all[0].len(),
                all[r].len()
            ))
            .into());
        }
        world.layout_checked.set(true);
    }
    let Some(device) = grads.grads.values().next().map(|g| g.device()) else {
        bail!("step {step}: no gradients to sum");
    };
    let n: usize = layout.iter().map(|(_, s)| s).sum();
    let flat = Tensor::cat(grads.grads.values().cloned().collect::<Vec<_>>(), 0);
    let mut host: Vec<f32> = flat
        .into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .map_err(|e| anyhow::anyhow!("step {step}: gradients to the host: {e:?}"))?;
    world.sum_f32(&mut host);
    if diverges(world.rank(), step) {
        host[0] += 1e-3;
    }
    let flat = Tensor::<1>::from_data(TensorData::new(host, [n]), &device);
    let mut at = 0;
    for (name, size) in layout {
        grads.grads.insert(name, flat.clone().slice(at..at + size));
        at += size;
    }
    let mut l = [loss];
    world.sum_f64(&mut l);
    Ok((grads, l[0]))
}

/// sha256 of the model's weights: every parameter in name order, its name, shape and f32
/// values (little-endian).
pub fn weights_sha256(model: &Lm) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut bytes = Vec::new();
    for (name, t) in optim::export_params(model) {
        h.update(name.as_bytes());
        for d in &t.shape {
            h.update((*d as u64).to_le_bytes());
        }
        for chunk in t.data.chunks(1 << 16) {
            bytes.clear();
            bytes.extend(chunk.iter().flat_map(|v| v.to_le_bytes()));
            h.update(&bytes);
        }
    }
    crate::checkpoint::hex(&h.finalize())
}

/// Compare the ranks' weights after `step` (their sha256, [`weights_sha256`]) and log the
/// verdict on rank 0; an error naming rank 0 and each rank that differs when one does. Nothing
/// with one rank.
pub fn check_weights(
    world: &World,
    model: &Lm,
    step: u64,
    log: &mut dyn FnMut(&str),
) -> Result<()> {
    if world.size() == 1 {
        return Ok(());
    }
    let mine = weights_sha256(model);
    let all = world.all_gather(&mine)?;
    let differ: Vec<String> = all
        .iter()
        .enumerate()
        .filter(|(_, h)| **h != all[0])
        .map(|(r, h)| format!("rank {r} has {}", &h[..16]))
        .collect();
    if differ.is_empty() {
        log(&format!(
            "step {step}: weights identical on all {} ranks (sha256 {}…)",
            world.size(),
            &mine[..16]
        ));
        return Ok(());
    }
    Err(Agreed::new(format!(
        "the weights differ across ranks after step {step}: rank 0 has sha256 {}…, {}…; \
         stopping before checkpointing step {step} (the previous checkpoint stays as it was). \
         Every rank must take the same step on the same summed gradients: a rank whose device \
         or build computes differently (another backend, GPU model or sinklab binary) breaks \
         that",
        &all[0][..16],
        differ.join("…, ")
    ))
    .into())
}

/// How a rank's device is named in the provenance: `flex (2 threads)`, `cuda:1`.
pub fn device_name(world: &World, exp: &Experiment) -> String {
    match exp.run.device {
        crate::config::DeviceKind::Flex => {
            let n = rayon::current_num_threads();
            format!("flex ({n} thread{})", if n == 1 { "" } else { "s" })
        }
        kind => format!("{}:{}", kind.name(), world.gpu_index()),
    }
}

/// `" over 2 MPI ranks (1 on this rank)"` for the start line; empty for one process.
pub fn ranks_note(world: &World, mine: usize) -> String {
    if world.size() == 1 {
        return String::new();
    }
    format!(
        " over {} MPI ranks ({mine} on rank {})",
        world.size(),
        world.rank()
    )
}
