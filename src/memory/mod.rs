//! Will a run fit in memory? Before a model is built or data is prepared, the run's peak
//! memory is estimated from its configuration ([`estimate`]: weights, gradients, optimizer
//! state, activations of the micro-batches in flight with the attention matrices, logits, the
//! probe pass, a checkpoint's host copies, the runtime) and compared with what the device has
//! ([`available`]: RAM and cgroup headroom for `flex`, the adapter's memory where a GPU runtime
//! reports it). A run that cannot fit is refused with the figures and the settings that would
//! fit (`train.micro_batch`, `model.ctx`, the number of CPU workers); `--skip-memory-check`
//! overrides the refusal.

pub mod available;
pub mod estimate;

pub use available::{Available, device_memory, peak_rss};
pub use estimate::{Estimate, ParamCount, Phase, estimate, human, param_count, workers};

use crate::config::{DeviceKind, Experiment};
use anyhow::{Context, Result, bail};
use serde::Serialize;

/// The command-line flag that runs a model the check refuses (`train`, `bench`, `sweep`).
pub const SKIP_FLAG: &str = "--skip-memory-check";

/// The vocabulary the run's model will have, known before any data is prepared:
/// `model.vocab_size`, the synthetic task's tokens (its chain and the two special tokens), or
/// the tokenizer's size (a BPE's requested size: one trained on a small corpus may end up
/// smaller, so this is an upper bound).
pub fn planned_vocab(exp: &Experiment) -> Result<usize> {
    if let Some(v) = exp.model.vocab_size {
        return Ok(v);
    }
    match &exp.data.synthetic {
        Some(task) => Ok(task.task_vocab() + 2),
        None => exp.data.tokenizer.requested_vocab(),
    }
}

/// A run's estimate against its device's memory.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub estimate: Estimate,
    pub available: Available,
    /// CPU threads the workers were sized from (rayon's pool).
    pub threads: usize,
    /// Parameter elements trained under `train.trainable` (None: all).
    pub trainable: Option<u64>,
}

impl Check {
    /// `exp` on this machine: rayon's threads, the device's memory now; `trainable` the
    /// parameter elements `train.trainable` leaves trainable (`crate::model::trainable_elements`;
    /// None: every one).
    pub fn of(exp: &Experiment, trainable: Option<u64>) -> Result<Self> {
        let threads = rayon::current_num_threads();
        Self::with(exp, threads, device_memory(exp.run.device), trainable)
    }

    /// `exp` with `threads` CPU threads against `available`.
    pub fn with(
        exp: &Experiment,
        threads: usize,
        available: Available,
        trainable: Option<u64>,
    ) -> Result<Self> {
        let vocab = planned_vocab(exp)
            .context("data.tokenizer: reading the vocabulary size for the memory estimate")?;
        Ok(Self {
            estimate: estimate(exp, vocab, workers(exp, threads), trainable),
            available,
            threads,
            trainable,
        })
    }

    /// Whether the estimate fits (None: the device reports no memory).
    pub fn fits(&self) -> Option<bool> {
        self.available
            .bytes()
            .map(|avail| self.estimate.total <= avail)
    }

    /// The start line: the estimate, and what it was checked against.
    pub fn line(&self) -> String {
        let against = match &self.available {
            Available::Known { bytes, source } => format!(
                "{} {} available ({source})",
                if self.estimate.total <= *bytes {
                    "fits in"
                } else {
                    "DOES NOT FIT in"
                },
                human(*bytes)
            ),
            Available::Unknown { why } => format!("not checked: {why}"),
        };
        format!("memory: estimated peak {}; {against}", self.estimate.line())
    }

    /// The estimate of `exp` changed by `f`, with this check's threads and vocabulary.
    fn variant(&self, exp: &Experiment, f: impl FnOnce(&mut Experiment)) -> Estimate {
        let mut e = exp.clone();
        f(&mut e);
        estimate(
            &e,
            self.estimate.vocab,
            workers(&e, self.threads),
            self.trainable,
        )
    }

    /// Settings that would fit, each changed alone: the largest `train.micro_batch` (a divisor
    /// of the step's sequences), the largest `model.ctx` (≥ `metrics.probe_len`, dividing
    /// `batch_tokens / micro_batch`) and on the CPU the most workers (`RAYON_NUM_THREADS`).
    pub fn suggestions(&self, exp: &Experiment) -> Vec<String> {
        let Some(avail) = self.available.bytes() else {
            return vec![];
        };
        let mut out = Vec::new();
        let t = &exp.train;
        let seqs = t.batch_tokens / exp.model.ctx.max(1);
        if let Some((mb, e)) = (1..t.micro_batch)
            .rev()
            .filter(|m| seqs.is_multiple_of(*m))
            .map(|m| (m, self.variant(exp, |x| x.train.micro_batch = m)))
            .find(|(_, e)| e.total <= avail)
        {
            out.push(format!(
                "--set train.micro_batch={mb}   ({} micro-batches per step; estimate {})",
                e.micro_batches,
                human(e.total)
            ));
        }
        let per_step = t.batch_tokens / t.micro_batch.max(1);
        if let Some((ctx, e)) = (exp.metrics.probe_len.max(1)..exp.model.ctx)
            .rev()
            .filter(|c| per_step.is_multiple_of(*c))
            .map(|c| (c, self.variant(exp, |x| x.model.ctx = c)))
            .find(|(_, e)| e.total <= avail)
        {
            out.push(format!(
                "--set model.ctx={ctx}   (keeping batch_tokens and micro_batch; estimate {})",
                human(e.total)
            ));
        }
        let w0 = self.estimate.workers;
        if let Some((w, e)) = (1..w0)
            .rev()
            .map(|w| (w, estimate(exp, self.estimate.vocab, w, self.trainable)))
            .find(|(_, e)| e.total <= avail)
        {
            out.push(format!(
                "RAYON_NUM_THREADS={w}   ({w} micro-batch{} in flight instead of {w0}, slower; \
                 estimate {})",
                if w == 1 { "" } else { "es" },
                human(e.total)
            ));
        }
        out
    }

    /// Why the run is refused: the figures, the settings that would fit, the override.
    pub fn refusal(&self, exp: &Experiment) -> String {
        let e = &self.estimate;
        let (avail, source) = match &self.available {
            Available::Known { bytes, source } => (*bytes, source.as_str()),
            Available::Unknown { .. } => return String::new(),
        };
        let mut msg = format!(
            "memory: this run does not fit on {}: estimated peak {} but {} is available ({source}).\n\
             Estimate: {}.\n",
            exp.run.device.name(),
            human(e.total),
            human(avail),
            e.line()
        );
        let s = self.suggestions(exp);
        if s.is_empty() {
            let k = e.optimizer / e.params.trainable.max(1);
            let per_param = estimate::F32 * 2 + k; // weight, one gradient, optimizer state
            let model_alone = e.params.total() * estimate::F32 * 2 + e.optimizer;
            msg.push_str(&format!(
                "No train.micro_batch, model.ctx or worker count fits: the {} parameters alone \
                 need {} (weights, one gradient, optimizer state: {per_param} bytes each); {} \
                 holds at most about {} parameters: lower model.d_model, model.d_ff or \
                 model.n_layers.\n",
                estimate::count(e.params.total()),
                human(model_alone),
                human(avail),
                estimate::count(avail.saturating_sub(e.runtime) / per_param)
            ));
        } else {
            msg.push_str("Settings that would fit (each alone):\n");
            for line in s {
                msg.push_str(&format!("  {line}\n"));
            }
        }
        if exp.run.device != DeviceKind::Flex {
            msg.push_str(
                "More MPI ranks (GPUs) would not lower the weights, gradients and optimizer \
                 state: every rank holds them all (data parallelism); they take the \
                 micro-batches apart, so the activations of one micro-batch are what shrinks \
                 only with train.micro_batch.\n",
            );
        }
        msg.push_str(&format!(
            "If you know the run fits, pass {SKIP_FLAG} to start it anyway."
        ));
        msg
    }
}

/// The check before a run builds anything: the estimate against the device, refused when it
/// does not fit unless `skip` (`--skip-memory-check`). Returns the check for the start lines.
pub fn preflight(exp: &Experiment, skip: bool, trainable: Option<u64>) -> Result<Check> {
    let check = Check::of(exp, trainable)?;
    if check.fits() == Some(false) && !skip {
        bail!("{}", check.refusal(exp));
    }
    Ok(check)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn huge() -> Experiment {
        let mut e = Experiment::default();
        e.model.d_model = 32768;
        e.model.d_ff = 131072;
        e.model.n_layers = 48;
        e
    }

    fn gib(n: u64) -> Available {
        Available::Known {
            bytes: n << 30,
            source: "test".into(),
        }
    }

    #[test]
    fn the_huge_model_is_refused_with_the_parameter_bound() {
        let c = Check::with(&huge(), 2, gib(24), None).unwrap();
        assert_eq!(c.fits(), Some(false));
        // 48 × (4 d² + 3 d f + 2 d) + 2 V d + d: 824.8G parameters, 3.3 TB of weights
        assert_eq!(c.estimate.params.trainable, 824_771_117_056);
        assert_eq!(c.estimate.params.constant, 0);
        assert_eq!(c.estimate.weights, 4 * 824_771_117_056);
        assert!(c.suggestions(&huge()).is_empty());
        let msg = c.refusal(&huge());
        assert!(
            msg.contains("No train.micro_batch, model.ctx or worker count fits"),
            "{msg}"
        );
        assert!(msg.contains(SKIP_FLAG), "{msg}");
        // 24 GiB minus the runtime at 16 bytes a parameter: (24 GiB − 120 MiB) / 16 = 1.603G
        assert!(msg.contains("at most about 1.603G parameters"), "{msg}");
    }

    #[test]
    fn train_trainable_counts_optimizer_state_and_gradients_for_its_parameters_only() {
        let all = Check::with(&huge(), 2, gib(24), None).unwrap().estimate;
        let t = 1_000_000;
        let some = Check::with(&huge(), 2, gib(24), Some(t)).unwrap().estimate;
        // AdamW: two f32 moments a trained element; f32 gradients a trained element (one
        // buffer per accumulation step); the weights are all there either way
        assert_eq!(some.optimizer, 2 * 4 * t);
        assert_eq!(all.optimizer, 2 * 4 * 824_771_117_056);
        assert_eq!(some.gradients % (4 * t), 0);
        assert_eq!(some.gradients / t, all.gradients / 824_771_117_056);
        assert_eq!(some.weights, all.weights);
        assert!(some.total < all.total);
        // more than the model has is the model
        let over = Check::with(&huge(), 2, gib(24), Some(u64::MAX))
            .unwrap()
            .estimate;
        assert_eq!(over.optimizer, all.optimizer);
    }

    #[test]
    fn suggestions_fit_and_are_the_largest_that_do() {
        let mut e = Experiment::default();
        e.model.ctx = 1024;
        e.train.batch_tokens = 16 * 1024;
        e.train.micro_batch = 16;
        let full = Check::with(&e, 2, gib(64), None).unwrap();
        let avail = full.estimate.total * 3 / 5;
        let c = Check::with(
            &e,
            2,
            Available::Known {
                bytes: avail,
                source: "test".into(),
            },
            None,
        )
        .unwrap();
        assert_eq!(c.fits(), Some(false));
        let s = c.suggestions(&e);
        let mb = s
            .iter()
            .find(|l| l.contains("micro_batch"))
            .expect("micro_batch");
        let m: usize = mb["--set train.micro_batch=".len()..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let fits = |m: usize| {
            let mut x = e.clone();
            x.train.micro_batch = m;
            Check::with(&x, 2, gib(64), None).unwrap().estimate.total <= avail
        };
        assert!(fits(m) && !fits(2 * m), "{mb}");
        assert!(s.iter().any(|l| l.starts_with("--set model.ctx=")), "{s:?}");
    }
}
