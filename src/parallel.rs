//! Data parallelism over CPU cores.
//!
//! Burn's CPU backend parallelises inside each operation, which for the small matrices of the
//! models sinklab trains on a laptop keeps only about 1.2 of 2 cores busy. sinklab instead runs
//! the micro-batches of an optimizer step (and the chunks of an evaluation, `eval`'s and
//! `train`'s validation loss, `bench --forward`) concurrently: each worker owns a rayon pool (so the
//! backend's inner parallelism stays inside the worker's cores) and a replica of the model
//! whose parameters are fresh autodiff leaves over the same weights, so every replica records
//! its own autograd graph and backward passes do not serialise on a shared graph lock.
//!
//! The result does not depend on the number of workers: every micro-batch's gradient is
//! computed by one worker from the same weights, and the per-micro-batch gradients and losses
//! are summed in micro-batch order on the calling thread. Only the backend's own
//! intra-operation threading (inside a worker's pool) could change rounding, and workers that
//! each own one core have none.
//!
//! On a GPU there is one worker: the device is shared, and launching from several host threads
//! does not add compute. Several GPUs (or machines) train one run as MPI ranks, one process per
//! GPU ([`crate::dist`]), not as workers of one process.

use burn::module::{Module, ModuleMapper, Param};
use burn::tensor::Tensor;

/// Run `f` on a thread of rayon's global pool: in place when the caller is on a pool thread
/// already, else moved there until it returns. Work that issues many small parallel operations
/// one after another (a decoded token's ~210 matrix products) runs each one's split from a pool
/// thread, instead of handing every one of them to the pool and waking its caller afterwards
/// (cached decoding of the SmolLM2 shape: 25–26 → 30–32 tokens/s). An optimizer step (the
/// workers' gradient sums, the norm, AdamW: a few hundred per-tensor operations) measured the
/// same either way (natural-text training, 8 pairs, 1.01×), so it stays where it is.
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if rayon::current_thread_index().is_some() {
        f()
    } else {
        rayon::scope(|_| f())
    }
}

/// A set of worker pools; [`Workers::map`] runs jobs on them, results in job order.
pub struct Workers {
    pools: Vec<rayon::ThreadPool>,
}

impl Workers {
    /// Workers for up to `jobs` concurrent jobs on `threads` CPU threads: `min(jobs, threads)`
    /// workers, the threads split evenly among them.
    pub fn new(jobs: usize, threads: usize) -> Self {
        let n = jobs.clamp(1, threads.max(1));
        let per = (threads / n).max(1);
        let pools = (0..n)
            .map(|i| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(per)
                    .thread_name(move |t| format!("sinklab-worker{i}.{t}"))
                    .build()
                    .expect("building a worker thread pool")
            })
            .collect();
        Self { pools }
    }

    /// One worker using every thread of rayon's global pool (GPU devices, or no parallel jobs).
    pub fn single() -> Self {
        Self::new(1, rayon::current_num_threads())
    }

    /// Workers for `jobs` jobs per step on the CPU, sized from rayon's global pool
    /// (`RAYON_NUM_THREADS`, default: every core); a single worker on other devices.
    pub fn for_device(cpu: bool, jobs: usize) -> Self {
        if cpu {
            Self::new(jobs, rayon::current_num_threads())
        } else {
            Self::single()
        }
    }

    pub fn len(&self) -> usize {
        self.pools.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pools.is_empty()
    }

    /// Threads per worker.
    pub fn threads_per_worker(&self) -> usize {
        self.pools[0].current_num_threads()
    }

    /// Run `f(i)` for i in 0..jobs, job i on worker i mod n (each worker takes its jobs in
    /// order); returns the results in job order.
    pub fn map<R: Send>(&self, jobs: usize, f: impl Fn(usize) -> R + Sync) -> Vec<R> {
        let n = self.pools.len();
        if n == 1 {
            return self.pools[0].install(|| (0..jobs).map(&f).collect());
        }
        let f = &f;
        let mut per_worker: Vec<Vec<(usize, R)>> = std::thread::scope(|s| {
            let handles: Vec<_> = self
                .pools
                .iter()
                .enumerate()
                .map(|(w, pool)| {
                    s.spawn(move || {
                        pool.install(|| (w..jobs).step_by(n).map(|i| (i, f(i))).collect::<Vec<_>>())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
                .collect()
        });
        let mut out: Vec<Option<R>> = (0..jobs).map(|_| None).collect();
        for (i, r) in per_worker.drain(..).flatten() {
            out[i] = Some(r);
        }
        out.into_iter().map(|r| r.expect("every job ran")).collect()
    }
}

/// A copy of `module` whose float parameters are new autodiff leaves over the same values
/// (no data is copied): gradients computed through the replica belong to its own graph.
pub fn replica<M: Module>(module: &M) -> M {
    struct Leaves;
    impl ModuleMapper for Leaves {
        fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
            let (id, tensor, mapper) = param.consume();
            let grad = tensor.is_require_grad();
            let mut t = tensor.detach();
            if grad {
                t = t.require_grad();
            }
            Param::from_mapped_value(id, t, mapper)
        }
    }
    module.clone().map(&mut Leaves)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn map_returns_results_in_job_order_on_every_worker_count() {
        for threads in 1..=4 {
            let w = Workers::new(3, threads);
            assert_eq!(w.len(), 3.min(threads));
            let out = w.map(7, |i| (i * i, rayon::current_num_threads()));
            let squares: Vec<usize> = out.iter().map(|r| r.0).collect();
            assert_eq!(squares, vec![0, 1, 4, 9, 16, 25, 36]);
            // Each job runs inside its worker's pool.
            assert!(out.iter().all(|r| r.1 == w.threads_per_worker()));
        }
    }
}
