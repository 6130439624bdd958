//! One run over several processes and machines: data-parallel ranks on MPI (cargo feature
//! `mpi`; docs/distributed.md is the user's guide).
//!
//! `mpirun -np N sinklab train EXP.toml` (or `srun --mpi=pmix -n N …`) starts N ranks of one
//! run, each on its own device (cuda/wgpu: the GPU of its local rank; flex: its share of the
//! cores). The step's micro-batches — a batch is a function of (seed, step, micro-batch index),
//! [`crate::data::Sampler::batch`] — are split in contiguous blocks over the ranks ([`share`]);
//! each rank sums its block's gradients in micro-batch order, and the ranks' sums are added with
//! `MPI_Allreduce` in f32 buckets ([`World::sum_f32`]); the loss is added in f64. Every rank
//! then takes the same optimizer step on the same numbers, so the weights stay bit-identical:
//! [`sync::check_weights`] compares a sha256 of them across ranks at the start and at every
//! checkpoint and stops the run, naming both ranks, when one differs.
//!
//! Rank 0 is the one writer: it alone takes the run directory's lock and writes resolved.toml,
//! provenance (with every rank's host and device), metrics, TensorBoard, checkpoints and the
//! summary, and runs the evaluations and probes; the other ranks go on to the next step and
//! wait for it in the next collective. A rank that dies ends the job: the launcher (mpirun,
//! srun --kill-on-bad-exit) kills the others, an error in sinklab calls `MPI_Abort`; the
//! checkpoints are written atomically, so the newest one stays intact and `--resume` continues
//! from it with the same number of ranks or another.
//!
//! Without the `mpi` feature a process started as one of N > 1 ranks refuses to start
//! ([`launch`]); a process started on its own is a world of one ([`World::single`]) and nothing
//! here costs anything.

pub mod bench;
#[cfg(feature = "mpi")]
mod comm;
pub mod launch;
pub mod sync;

pub use sync::{
    check_weights, device_name, ranks_note, share, start, sum_gradients, weights_sha256,
};

use anyhow::{Result, bail};
use serde::{Serialize, de::DeserializeOwned};
use std::cell::Cell;
#[cfg(feature = "mpi")]
use std::cell::RefCell;

/// The number of f32 values one `MPI_Allreduce` call sums: 2^26 (256 MiB), far below the
/// 2^31 − 1 elements an MPI count can hold; a larger gradient goes in several buckets.
/// `SINKLAB_MPI_BUCKET=N` sets another size (at most 2^31 − 2; smaller buckets need less
/// scratch memory, the tests use them to sum in many pieces).
pub const MAX_BUCKET: usize = 1 << 26;

/// The variable that sets the bucket size ([`MAX_BUCKET`]).
pub const BUCKET_VAR: &str = "SINKLAB_MPI_BUCKET";

/// This process's place among the ranks of a run.
pub struct World {
    rank: usize,
    size: usize,
    local_rank: usize,
    local_size: usize,
    host: String,
    launch: Option<launch::Launch>,
    #[cfg(feature = "mpi")]
    mpi: Option<comm::Mpi>,
    /// The receive buffer of the bucketed gradient sum, kept between steps.
    #[cfg(feature = "mpi")]
    scratch: RefCell<Vec<f32>>,
    /// Whether the ranks' gradient layouts were compared (once, at the first sum).
    pub(crate) layout_checked: Cell<bool>,
    /// The number of f32 values per `MPI_Allreduce` ([`MAX_BUCKET`], [`BUCKET_VAR`]).
    bucket: usize,
}

/// An error every rank reached together (a verdict shared by a collective): rank 0 reports
/// it, the others end quietly, and every rank exits with `code`.
#[derive(Debug)]
pub struct Agreed {
    pub message: String,
    pub code: i32,
}

impl Agreed {
    /// An agreed failure (exit status 1).
    pub fn new(message: String) -> Self {
        Agreed { message, code: 1 }
    }
}

impl std::fmt::Display for Agreed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Agreed {}

/// The [`Agreed`] error inside `e`, if it is one.
pub fn agreed(e: &anyhow::Error) -> Option<&Agreed> {
    e.chain().find_map(|c| c.downcast_ref::<Agreed>())
}

impl World {
    /// A world of one process: no MPI.
    pub fn single() -> World {
        World {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            host: crate::lock::hostname(),
            launch: None,
            #[cfg(feature = "mpi")]
            mpi: None,
            #[cfg(feature = "mpi")]
            scratch: RefCell::new(Vec::new()),
            layout_checked: Cell::new(false),
            bucket: MAX_BUCKET,
        }
    }

    /// The world this process was started in: one process, or (feature `mpi`) the MPI world a
    /// launcher made. Without the feature a launch of several ranks is refused.
    pub fn from_env() -> Result<World> {
        let Some(l) = launch::detect() else {
            return Ok(World::single());
        };
        #[cfg(not(feature = "mpi"))]
        bail!("{}", l.refusal_without_mpi());
        #[cfg(feature = "mpi")]
        {
            let mpi = comm::Mpi::init()?;
            if mpi.size() != l.size {
                bail!(
                    "{} started {} processes ({}={}), but MPI sees a world of {}: the launcher \
                     and the MPI library do not talk to each other. Under SLURM give srun the \
                     MPI plugin of the library sinklab was built with (OpenMPI: `srun \
                     --mpi=pmix`; `srun --mpi=list` names those the cluster has); otherwise use \
                     that library's own mpirun",
                    l.launcher,
                    l.size,
                    l.size_var,
                    l.size,
                    mpi.size()
                );
            }
            let mut w = World::single();
            if let Ok(v) = std::env::var(BUCKET_VAR) {
                w.bucket = v
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| (1..i32::MAX as usize).contains(&n))
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "{BUCKET_VAR}={v}: expected the number of f32 values per \
                             MPI_Allreduce, 1 to {}",
                            i32::MAX - 1
                        )
                    })?;
            }
            w.rank = mpi.rank();
            w.size = mpi.size();
            w.local_rank = mpi.local_rank;
            w.local_size = mpi.local_size;
            w.launch = Some(l);
            w.mpi = Some(mpi);
            Ok(w)
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Rank 0: the one writer.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// The rank among this machine's ranks.
    pub fn local_rank(&self) -> usize {
        self.local_rank
    }

    pub fn local_size(&self) -> usize {
        self.local_size
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// `rank 1 of 4 on node7`, for messages.
    pub fn who(&self) -> String {
        format!("rank {} of {} on {}", self.rank, self.size, self.host)
    }

    /// The launcher, when there is one (`mpirun (OpenMPI)`, `srun`).
    pub fn launcher(&self) -> Option<&'static str> {
        self.launch.as_ref().map(|l| l.launcher)
    }

    /// The index of this rank's GPU among the devices it sees: its local rank, or 0 when the
    /// launcher gave each rank a single GPU (`CUDA_VISIBLE_DEVICES` with one entry, as SLURM's
    /// `--gpus-per-task=1` binding sets it).
    pub fn gpu_index(&self) -> usize {
        let one_visible = std::env::var("CUDA_VISIBLE_DEVICES")
            .is_ok_and(|v| !v.trim().is_empty() && !v.contains(','));
        if one_visible { 0 } else { self.local_rank }
    }

    /// CPU threads for this rank: the cores it may run on (its affinity mask), at most its
    /// share of the machine's cores (a launcher that binds ranks to sockets, or not at all,
    /// lets several ranks see the same cores).
    pub fn cpu_threads(&self) -> usize {
        let visible = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SAFETY: sysconf reads a system constant; no memory is passed.
        let online = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as usize;
        visible.min(online / self.local_size.max(1)).max(1)
    }

    /// Make rayon's global pool (the CPU backend's and the workers' threads) this rank's share
    /// of the cores, unless `RAYON_NUM_THREADS` says otherwise. A world of one keeps rayon's
    /// default (every core).
    pub fn configure_threads(&self) {
        if self.size == 1 || std::env::var_os("RAYON_NUM_THREADS").is_some() {
            return;
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(self.cpu_threads())
            .build_global()
            .ok();
    }

    /// Wait for every rank.
    pub fn barrier(&self) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.barrier();
        }
    }

    /// Whether `flag` holds on any rank (every rank gets the same answer).
    pub fn any(&self, flag: bool) -> bool {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            return m.max_u32(flag as u32) != 0;
        }
        flag
    }

    /// `values` summed over the ranks, in place.
    pub fn sum_f64(&self, values: &mut [f64]) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            let mine = values.to_vec();
            m.sum_f64(&mine, values);
        }
        let _ = values;
    }

    /// `values` summed over the ranks, in place, in buckets of [`World::bucket`] values
    /// (one `MPI_Allreduce` each). Every rank receives the same bits: each bucket is one
    /// reduction whose result the library hands to every rank (the weights check confirms it).
    pub fn sum_f32(&self, values: &mut [f32]) {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            let bucket = self.bucket;
            let mut scratch = self.scratch.borrow_mut();
            scratch.resize(bucket.min(values.len()), 0.0);
            for chunk in values.chunks_mut(bucket) {
                let recv = &mut scratch[..chunk.len()];
                m.sum_f32(chunk, recv);
                chunk.copy_from_slice(recv);
            }
        }
        let _ = values;
    }

    /// The number of f32 values per `MPI_Allreduce` of [`World::sum_f32`].
    pub fn bucket(&self) -> usize {
        self.bucket
    }

    /// Rank 0's value on every rank (`value` is read on rank 0 only).
    pub fn broadcast<T: Serialize + DeserializeOwned>(&self, value: Option<&T>) -> Result<T> {
        #[cfg_attr(not(feature = "mpi"), allow(unused_mut))]
        let mut bytes = match value {
            Some(v) if self.is_root() => serde_json::to_vec(v)?,
            _ if self.is_root() => bail!("rank 0 has nothing to broadcast"),
            _ => Vec::new(),
        };
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.broadcast_bytes(&mut bytes);
        }
        Ok(serde_json::from_slice(&bytes)?)
    }

    /// Every rank's `value`, in rank order.
    pub fn all_gather<T: Serialize + DeserializeOwned>(&self, value: &T) -> Result<Vec<T>> {
        let mine = serde_json::to_vec(value)?;
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            return m
                .all_gather_bytes(&mine)
                .iter()
                .map(|b| Ok(serde_json::from_slice(b)?))
                .collect();
        }
        Ok(vec![serde_json::from_slice(&mine)?])
    }

    /// End the job: with several ranks `MPI_Abort` (every rank ends; `code` becomes the
    /// launcher's exit status), alone `exit(code)`.
    pub fn abort(&self, code: i32) -> ! {
        #[cfg(feature = "mpi")]
        if let Some(m) = &self.mpi {
            m.abort(code);
        }
        std::process::exit(code)
    }
}
