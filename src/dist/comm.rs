//! The MPI calls sinklab makes (cargo feature `mpi`, the `mpi` crate 0.8.2): initialisation,
//! the node-local split, barrier, sums of f32 and f64, broadcast and all-gather of bytes, abort.
//! Every call is made from the thread that initialised MPI (`MPI_THREAD_FUNNELED`: the worker
//! pools compute, the training loop's thread communicates).

use anyhow::{Result, anyhow};
use mpi::collective::SystemOperation;
use mpi::datatype::PartitionMut;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use mpi::traits::*;

/// An initialised MPI world; dropping it finalises MPI.
pub struct Mpi {
    world: SimpleCommunicator,
    pub local_rank: usize,
    pub local_size: usize,
    /// Dropped last: `MPI_Finalize`.
    _universe: Universe,
}

impl Mpi {
    pub fn init() -> Result<Self> {
        let (universe, _) = mpi::initialize_with_threading(mpi::Threading::Funneled)
            .ok_or_else(|| anyhow!("MPI was initialised twice in one process"))?;
        let world = universe.world();
        // The ranks of this machine (shared memory): the local rank picks the GPU.
        let node = world.split_shared(world.rank());
        Ok(Mpi {
            local_rank: node.rank() as usize,
            local_size: node.size() as usize,
            world,
            _universe: universe,
        })
    }

    pub fn rank(&self) -> usize {
        self.world.rank() as usize
    }

    pub fn size(&self) -> usize {
        self.world.size() as usize
    }

    pub fn barrier(&self) {
        self.world.barrier();
    }

    /// `recv = Σ_ranks send`, element-wise (`MPI_Allreduce`, `MPI_SUM`); at most `i32::MAX`
    /// elements (the caller buckets).
    pub fn sum_f32(&self, send: &[f32], recv: &mut [f32]) {
        debug_assert!(send.len() == recv.len() && send.len() <= i32::MAX as usize);
        self.world
            .all_reduce_into(send, recv, SystemOperation::sum());
    }

    pub fn sum_f64(&self, send: &[f64], recv: &mut [f64]) {
        self.world
            .all_reduce_into(send, recv, SystemOperation::sum());
    }

    pub fn max_u32(&self, mine: u32) -> u32 {
        let mut out = 0u32;
        self.world
            .all_reduce_into(&mine, &mut out, SystemOperation::max());
        out
    }

    /// Rank 0's bytes on every rank (`buf` is read on rank 0 and replaced elsewhere).
    pub fn broadcast_bytes(&self, buf: &mut Vec<u8>) {
        let root = self.world.process_at_rank(0);
        let mut len = buf.len() as u64;
        root.broadcast_into(&mut len);
        buf.resize(len as usize, 0);
        root.broadcast_into(&mut buf[..]);
    }

    /// Every rank's bytes, in rank order.
    pub fn all_gather_bytes(&self, mine: &[u8]) -> Vec<Vec<u8>> {
        let n = self.size();
        let mut lens = vec![0i32; n];
        self.world
            .all_gather_into(&(mine.len() as i32), &mut lens[..]);
        let displs: Vec<i32> = lens
            .iter()
            .scan(0i32, |at, &l| {
                let d = *at;
                *at += l;
                Some(d)
            })
            .collect();
        let total: usize = lens.iter().map(|&l| l as usize).sum();
        let mut all = vec![0u8; total];
        {
            let mut part = PartitionMut::new(&mut all[..], &lens[..], &displs[..]);
            self.world.all_gather_varcount_into(mine, &mut part);
        }
        lens.iter()
            .zip(&displs)
            .map(|(&l, &d)| all[d as usize..(d + l) as usize].to_vec())
            .collect()
    }

    /// End every rank of the job now (`MPI_Abort`), with `code` as the launcher's exit status.
    pub fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
}
