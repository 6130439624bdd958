//! Which launcher started this process, read from the environment alone (no MPI call): the
//! world size and rank that `mpirun` (OpenMPI, MPICH's Hydra) or SLURM's `srun` gave it.
//!
//! This is what lets a binary built without the `mpi` feature refuse to start as one of N
//! copies (which would each train the whole run into the same directory), and what tells a
//! binary with the feature whether to initialise MPI at all: a plain `sinklab train` never
//! does.
//!
//! | launcher | size | rank | local rank |
//! |---|---|---|---|
//! | OpenMPI `mpirun` | `OMPI_COMM_WORLD_SIZE` | `OMPI_COMM_WORLD_RANK` | `OMPI_COMM_WORLD_LOCAL_RANK` |
//! | MPICH / Intel MPI (Hydra) | `PMI_SIZE` | `PMI_RANK` | `MPI_LOCALRANKID` |
//! | SLURM `srun` (any `--mpi` plugin) | `SLURM_STEP_NUM_TASKS` | `SLURM_PROCID` | `SLURM_LOCALID` |
//!
//! SLURM's variables count only inside a job step (`SLURM_STEP_ID` set and not the batch
//! script's own step): a batch script of a job with `--ntasks=4` is one process, and so is the
//! `sinklab sweep --index` it runs.

use std::collections::BTreeMap;

/// How this process was started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The launcher, as named to the user: `mpirun (OpenMPI)`, `mpirun (Hydra)`, `srun`.
    pub launcher: &'static str,
    /// The variable the size was read from, and the size.
    pub size_var: &'static str,
    pub size: usize,
    pub rank: usize,
    /// The rank among the processes of this machine (the GPU a rank takes), when the launcher
    /// says.
    pub local_rank: Option<usize>,
}

/// SLURM's step id of a batch script (`SLURM_STEP_ID` = 0xFFFFFFFE, or the word `batch`).
const SLURM_BATCH_STEP: [&str; 2] = ["4294967294", "batch"];

/// The launch described by `env` (variable → value); `None` for a process started on its own
/// (or as the only rank).
pub fn detect_in(env: &BTreeMap<String, String>) -> Option<Launch> {
    let num = |k: &str| env.get(k).and_then(|v| v.trim().parse::<usize>().ok());
    let in_step = env
        .get("SLURM_STEP_ID")
        .or_else(|| env.get("SLURM_STEPID"))
        .is_some_and(|s| !SLURM_BATCH_STEP.contains(&s.trim()));
    let candidates: [(&'static str, &'static str, &str, &str, bool); 3] = [
        (
            "mpirun (OpenMPI)",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_LOCAL_RANK",
            true,
        ),
        (
            "mpirun (Hydra)",
            "PMI_SIZE",
            "PMI_RANK",
            "MPI_LOCALRANKID",
            true,
        ),
        (
            "srun",
            "SLURM_STEP_NUM_TASKS",
            "SLURM_PROCID",
            "SLURM_LOCALID",
            in_step,
        ),
    ];
    candidates
        .into_iter()
        .filter(|c| c.4)
        .find_map(|(launcher, size_var, rank_var, local_var, _)| {
            let size = num(size_var)?;
            Some(Launch {
                launcher,
                size_var,
                size,
                rank: num(rank_var).unwrap_or(0),
                local_rank: num(local_var),
            })
        })
        .filter(|l| l.size > 1)
}

/// The launch of this process (see [`detect_in`]).
pub fn detect() -> Option<Launch> {
    detect_in(&std::env::vars().collect())
}

impl Launch {
    /// Refuse to run as one of several copies when MPI is not compiled in: each copy would
    /// train the whole run alone, into the same run directory.
    pub fn refusal_without_mpi(&self) -> String {
        format!(
            "this process is rank {} of {} ({} set {}={}), but this sinklab binary was built \
             without the `mpi` cargo feature: the {} copies would each train the whole run \
             into the same run directory. Rebuild with `cargo build --release --features mpi` \
             (needs an MPI library and libclang: docs/distributed.md), or start one process \
             without {}",
            self.rank, self.size, self.launcher, self.size_var, self.size, self.size, self.launcher
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn launchers_are_recognised_by_their_variables() {
        let l = detect_in(&env(&[
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("OMPI_COMM_WORLD_RANK", "3"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ]))
        .unwrap();
        assert_eq!(
            (l.launcher, l.size, l.rank, l.local_rank),
            ("mpirun (OpenMPI)", 4, 3, Some(1))
        );
        let l = detect_in(&env(&[("PMI_SIZE", "2"), ("PMI_RANK", "1")])).unwrap();
        assert_eq!(
            (l.launcher, l.size, l.rank, l.local_rank),
            ("mpirun (Hydra)", 2, 1, None)
        );
        let l = detect_in(&env(&[
            ("SLURM_STEP_ID", "0"),
            ("SLURM_STEP_NUM_TASKS", "8"),
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NTASKS", "8"),
        ]))
        .unwrap();
        assert_eq!(
            (l.launcher, l.size, l.rank, l.local_rank),
            ("srun", 8, 5, Some(1))
        );
        assert!(
            l.refusal_without_mpi()
                .contains("rank 5 of 8 (srun set SLURM_STEP_NUM_TASKS=8)")
        );
    }

    #[test]
    fn one_process_and_batch_scripts_are_not_ranks() {
        assert_eq!(detect_in(&env(&[])), None);
        assert_eq!(detect_in(&env(&[("OMPI_COMM_WORLD_SIZE", "1")])), None);
        // The batch script of a 4-task job (and the sweep it runs) is one process.
        assert_eq!(
            detect_in(&env(&[
                ("SLURM_NTASKS", "4"),
                ("SLURM_JOB_ID", "7"),
                ("SLURM_STEP_NUM_TASKS", "4"),
            ])),
            None
        );
        assert_eq!(
            detect_in(&env(&[
                ("SLURM_STEP_ID", "4294967294"),
                ("SLURM_STEP_NUM_TASKS", "1"),
                ("SLURM_NTASKS", "4"),
            ])),
            None
        );
    }
}
