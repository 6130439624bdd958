//! The cluster's options of a SLURM sweep: the sweep file's `[slurm]` table and the command
//! line's flags ([`Options`]), resolved and checked against the runs ([`resolve`]) into the
//! `#SBATCH` lines and, for runs of several MPI ranks, the srun launch ([`Cluster`]).

use crate::config::{DeviceKind, Experiment};
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};

/// A sweep file's `[slurm]` table, or the command line's cluster flags.
///
/// ```toml
/// [slurm]
/// partition = "gpu"
/// account = "my_project"
/// time = "2-00:00:00"         # per task: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS
/// gpus_per_task = 1           # --gres=gpu:N (with ranks: --gpus-per-task=N, per rank)
/// cpus_per_task = 8           # also the task's (with ranks: each rank's) training threads
/// ranks = 4                   # MPI ranks per run (--ntasks; each run an srun of 4 processes)
/// nodes = 2                   # machines per run (--nodes; at most ranks)
/// mpi = "pmix"                # srun's --mpi plugin for runs with ranks > 1 (default pmix)
/// extra = ["--mem=32G", "--signal=B:TERM@120"]   # further #SBATCH options, written as given
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {
    pub partition: Option<String>,
    pub account: Option<String>,
    pub time: Option<String>,
    pub gpus_per_task: Option<u32>,
    pub cpus_per_task: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ranks: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<String>,
}

/// The keys of `[slurm]`, for error messages.
pub const KEYS: &str =
    "partition, account, time, gpus_per_task, cpus_per_task, ranks, nodes, mpi, extra";

/// srun's MPI plugin when `[slurm] mpi` is not given: PMIx, which OpenMPI 4/5 (Debian's
/// included) and MPICH built with PMIx speak.
pub const DEFAULT_MPI: &str = "pmix";

/// How the array task starts a run with several MPI ranks: `srun --mpi=PLUGIN --ntasks=RANKS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RankLaunch {
    pub ranks: u32,
    pub mpi: String,
}

impl RankLaunch {
    /// The srun arguments before the program (`--cpus-per-task` from the job's, which srun
    /// does not inherit in every SLURM version).
    pub fn srun_args(&self) -> Vec<String> {
        let mut a = vec![
            format!("--mpi={}", self.mpi),
            format!("--ntasks={}", self.ranks),
            // a rank that dies ends the run's other ranks (docs/distributed.md, "Faults")
            "--kill-on-bad-exit=1".to_string(),
        ];
        if let Some(c) = std::env::var("SLURM_CPUS_PER_TASK")
            .ok()
            .filter(|c| c.parse::<u32>().is_ok())
        {
            a.push(format!("--cpus-per-task={c}"));
        }
        a
    }
}

/// The cluster options sinklab knows, in `#SBATCH` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterOption {
    Partition,
    Account,
    Time,
    Ranks,
    Nodes,
    CpusPerTask,
    GpusPerTask,
}

impl ClusterOption {
    /// What it is, for people.
    pub fn what(self) -> &'static str {
        match self {
            ClusterOption::Partition => "partition",
            ClusterOption::Account => "account",
            ClusterOption::Time => "time limit",
            ClusterOption::Ranks => "MPI ranks per run",
            ClusterOption::Nodes => "nodes per run",
            ClusterOption::CpusPerTask => "CPUs per task",
            ClusterOption::GpusPerTask => "GPUs per task",
        }
    }

    /// Its key in the sweep file's `[slurm]` table.
    pub fn key(self) -> &'static str {
        match self {
            ClusterOption::Partition => "partition",
            ClusterOption::Account => "account",
            ClusterOption::Time => "time",
            ClusterOption::Ranks => "ranks",
            ClusterOption::Nodes => "nodes",
            ClusterOption::CpusPerTask => "cpus_per_task",
            ClusterOption::GpusPerTask => "gpus_per_task",
        }
    }

    /// Its `sinklab sweep` flag.
    pub fn flag(self) -> &'static str {
        match self {
            ClusterOption::Partition => "--partition",
            ClusterOption::Account => "--account",
            ClusterOption::Time => "--time",
            ClusterOption::Ranks => "--ranks",
            ClusterOption::Nodes => "--nodes",
            ClusterOption::CpusPerTask => "--cpus-per-task",
            ClusterOption::GpusPerTask => "--gpus-per-task",
        }
    }

    /// The `#SBATCH` option for `value` in a job of one task.
    pub fn sbatch(self, value: &str) -> String {
        match self {
            ClusterOption::GpusPerTask => format!("--gres=gpu:{value}"),
            ClusterOption::Ranks => format!("--ntasks={value}"),
            other => format!("{}={value}", other.flag()),
        }
    }

    /// Where a value came from, as the user wrote it: `[slurm] time` or `--time`.
    fn origin(self, source: Source) -> String {
        match source {
            Source::Flag => self.flag().to_string(),
            Source::SweepFile | Source::Runs => format!("[slurm] {}", self.key()),
        }
    }
}

/// Where a cluster option's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The command line (`--partition` …), which wins over the sweep file.
    Flag,
    /// The sweep file's `[slurm]` table.
    SweepFile,
    /// Derived from the runs: one GPU (per rank) for runs on a GPU backend.
    Runs,
}

impl Source {
    fn describe(self) -> &'static str {
        match self {
            Source::Flag => "command line",
            Source::SweepFile => "sweep file",
            Source::Runs => "runs' run.device",
        }
    }
}

/// One cluster option given a value.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub option: ClusterOption,
    pub value: String,
    pub source: Source,
}

impl Setting {
    /// The `#SBATCH` option, e.g. `--partition=gpu`.
    pub fn line(&self) -> String {
        self.option.sbatch(&self.value)
    }
}

/// The resolved cluster options of a sweep.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    /// The options written, in `#SBATCH` order.
    pub set: Vec<Setting>,
    /// How a run of several MPI ranks starts (`[slurm] ranks` > 1); `None`: one process.
    pub launch: Option<RankLaunch>,
    /// The options given nowhere: no line is written and the cluster's default applies.
    pub unset: Vec<ClusterOption>,
    /// `[slurm] extra`, written as given.
    pub extra: Vec<String>,
}

/// Characters allowed in partition and account names (a comma separates several partitions).
fn is_slurm_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-,:+".contains(c))
}

/// A SLURM time limit: `M`, `M:S`, `H:M:S`, `D-H`, `D-H:M`, `D-H:M:S` (numbers), or
/// `UNLIMITED` / `INFINITE`.
fn is_time_limit(s: &str) -> bool {
    if s.eq_ignore_ascii_case("unlimited") || s.eq_ignore_ascii_case("infinite") {
        return true;
    }
    let number = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    let (days, clock) = match s.split_once('-') {
        Some((d, c)) => (Some(d), c),
        None => (None, s),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    days.is_none_or(number) && parts.len() <= 3 && parts.iter().all(|p| number(p))
}

/// Resolve the cluster options (`flags` over the sweep file's `file`) and check them against
/// the runs; every problem is reported at once.
pub fn resolve(file: &Options, flags: &Options, exps: &[Experiment]) -> Result<Cluster> {
    use ClusterOption as O;
    // The flag over the sweep file.
    fn pick<T: ToString>(file: &Option<T>, flag: &Option<T>) -> Option<(String, Source)> {
        match (flag, file) {
            (Some(v), _) => Some((v.to_string(), Source::Flag)),
            (None, Some(v)) => Some((v.to_string(), Source::SweepFile)),
            (None, None) => None,
        }
    }
    // A run on a GPU backend needs a GPU (per rank).
    let on_gpu = exps.iter().any(|e| e.run.device != DeviceKind::Flex);
    let ranks = pick(&file.ranks, &flags.ranks);
    let n_ranks: u32 = ranks
        .as_ref()
        .and_then(|(v, _)| v.parse().ok())
        .unwrap_or(1);
    let given = [
        (O::Partition, pick(&file.partition, &flags.partition)),
        (O::Account, pick(&file.account, &flags.account)),
        (O::Time, pick(&file.time, &flags.time)),
        (O::Ranks, ranks.clone()),
        (O::Nodes, pick(&file.nodes, &flags.nodes)),
        (
            O::CpusPerTask,
            pick(&file.cpus_per_task, &flags.cpus_per_task),
        ),
        (
            O::GpusPerTask,
            pick(&file.gpus_per_task, &flags.gpus_per_task)
                .or_else(|| on_gpu.then(|| ("1".to_string(), Source::Runs))),
        ),
    ];
    let mut cluster = Cluster {
        set: Vec::new(),
        launch: None,
        unset: Vec::new(),
        extra: file.extra.clone(),
    };
    let mut errors = Vec::new();
    for (option, value) in given {
        let Some((value, source)) = value else {
            // no ranks or nodes: one process on one machine, not a cluster default to name
            if !matches!(option, O::Ranks | O::Nodes) {
                cluster.unset.push(option);
            }
            continue;
        };
        let problem = match option {
            O::Partition | O::Account if !is_slurm_name(&value) => {
                Some("expected a name of letters, digits and . _ - , : + only".to_string())
            }
            O::Time if !is_time_limit(&value) => Some(
                "expected a SLURM time limit: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or \
                 UNLIMITED"
                    .to_string(),
            ),
            O::CpusPerTask | O::GpusPerTask | O::Ranks | O::Nodes if value == "0" => {
                Some("expected at least 1 (leave it out for none or the cluster's default)".into())
            }
            O::Nodes if value.parse::<u32>().is_ok_and(|n| n > n_ranks) => Some(format!(
                "expected at most the ranks per run ({n_ranks}): every machine runs at least one \
                 rank{}",
                if n_ranks == 1 {
                    "; set ranks (or --ranks) for a run over several machines"
                } else {
                    ""
                }
            )),
            O::Ranks => exps
                .iter()
                .find(|e| e.accumulation() < n_ranks as usize)
                .map(|e| {
                    format!(
                        "run `{}` has {} micro-batch(es) per step (train.batch_tokens / \
                         (train.micro_batch × model.ctx)), and each rank needs at least one: \
                         lower train.micro_batch or the ranks",
                        e.run.name,
                        e.accumulation()
                    )
                }),
            _ => None,
        };
        match problem {
            Some(p) => errors.push(format!("{}: found `{value}`, {p}", option.origin(source))),
            None => cluster.set.push(Setting {
                option,
                value,
                source,
            }),
        }
    }
    match (pick(&file.mpi, &flags.mpi), n_ranks > 1) {
        (Some((m, src)), _)
            if m.is_empty() || !m.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            let at = if src == Source::Flag {
                "--mpi"
            } else {
                "[slurm] mpi"
            };
            errors.push(format!(
                "{at}: found `{m}`, expected the name of one of srun's MPI plugins (`srun \
                 --mpi=list`), like \"pmix\", \"pmix_v4\" or \"pmi2\""
            ));
        }
        (Some((m, src)), false) => {
            let at = if src == Source::Flag {
                "--mpi"
            } else {
                "[slurm] mpi"
            };
            errors.push(format!(
                "{at}: found `{m}`, but runs have one rank (set ranks, or --ranks, above 1 to \
                 start each run as MPI ranks with srun)"
            ));
        }
        (m, true) => {
            cluster.launch = Some(RankLaunch {
                ranks: n_ranks,
                mpi: m.map_or(DEFAULT_MPI.to_string(), |(m, _)| m),
            })
        }
        (None, false) => {}
    }
    for x in &file.extra {
        if !x.starts_with("--") || x.chars().any(|c| c.is_whitespace() || c.is_control()) {
            errors.push(format!(
                "[slurm] extra: found `{x}`, expected one sbatch option per entry, like \
                 \"--mem=16G\" (starting with --, no spaces)"
            ));
        }
    }
    if !errors.is_empty() {
        bail!("  {}", errors.join("\n  "));
    }
    Ok(cluster)
}

impl Cluster {
    /// The `#SBATCH` option of `s` in this job: GPUs are per rank when runs have several.
    pub fn line(&self, s: &Setting) -> String {
        match (s.option, &self.launch) {
            (ClusterOption::GpusPerTask, Some(_)) => format!("--gpus-per-task={}", s.value),
            _ => s.line(),
        }
    }

    /// The options written and those left to the cluster, for the terminal.
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .set
            .iter()
            .map(|s| {
                format!(
                    "  #SBATCH {}  ({}, from the {})",
                    self.line(s),
                    s.option.what(),
                    s.source.describe()
                )
            })
            .collect();
        if let Some(l) = &self.launch {
            lines.push(format!(
                "  each run: srun {} sinklab train … ({} MPI ranks; sinklab built with the `mpi` \
                 feature)",
                l.srun_args()[..3].join(" "),
                l.ranks
            ));
        }
        lines.extend(
            self.extra
                .iter()
                .map(|x| format!("  #SBATCH {x}  ([slurm] extra)")),
        );
        if !self.unset.is_empty() {
            let list = |f: fn(ClusterOption) -> &'static str| {
                self.unset
                    .iter()
                    .map(|&o| f(o))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            lines.push(format!(
                "  not set, so the cluster's default applies: {} (set them in the sweep file's \
                 [slurm] table: {}, or with {})",
                list(ClusterOption::what),
                list(ClusterOption::key),
                list(ClusterOption::flag)
            ));
        }
        lines.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_limits_and_names() {
        for ok in [
            "30",
            "30:00",
            "02:00:00",
            "1-12",
            "1-12:30",
            "7-00:00:00",
            "UNLIMITED",
        ] {
            assert!(is_time_limit(ok), "{ok}");
        }
        for bad in ["", "2h", "1:2:3:4", "1-", "-1", "1:", "1--2", "one"] {
            assert!(!is_time_limit(bad), "{bad}");
        }
        assert!(is_slurm_name("gpu,gpu-long") && !is_slurm_name("a b") && !is_slurm_name(""));
    }

    #[test]
    fn gpu_runs_get_one_gpu_per_rank_and_ranks_become_an_srun_launch() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/gu60m.toml");
        let exp = crate::config::load(&path, &[]).unwrap();
        assert_eq!(exp.run.device, DeviceKind::Cuda);
        let exps = [exp];
        let c = resolve(&Options::default(), &Options::default(), &exps).unwrap();
        let gpus = c
            .set
            .iter()
            .find(|s| s.option == ClusterOption::GpusPerTask)
            .unwrap();
        assert_eq!(
            (c.line(gpus), gpus.source, c.launch.clone()),
            ("--gres=gpu:1".to_string(), Source::Runs, None)
        );
        // 4 ranks on 2 nodes: --ntasks, --nodes, a GPU per rank, srun with the default plugin
        let file = Options {
            ranks: Some(4),
            nodes: Some(2),
            ..Options::default()
        };
        let c = resolve(&file, &Options::default(), &exps).unwrap();
        let lines: Vec<String> = c.set.iter().map(|s| c.line(s)).collect();
        assert_eq!(lines, ["--ntasks=4", "--nodes=2", "--gpus-per-task=1"]);
        let launch = c.launch.clone().unwrap();
        assert_eq!((launch.ranks, launch.mpi.as_str()), (4, "pmix"));
        assert_eq!(
            launch.srun_args()[..3],
            ["--mpi=pmix", "--ntasks=4", "--kill-on-bad-exit=1"]
        );
        assert!(
            c.describe()
                .contains("each run: srun --mpi=pmix --ntasks=4")
        );
        // the flag wins; too many nodes, a plugin name with a space, too few micro-batches
        let bad = Options {
            ranks: Some(2),
            nodes: Some(3),
            mpi: Some("pm ix".into()),
            ..Options::default()
        };
        let e = resolve(&bad, &Options::default(), &exps)
            .unwrap_err()
            .to_string();
        for needle in [
            "[slurm] nodes: found `3`, expected at most the ranks per run (2)",
            "[slurm] mpi: found `pm ix`, expected the name of one of srun's MPI plugins",
        ] {
            assert!(e.contains(needle), "{needle}: {e}");
        }
        let many = Options {
            ranks: Some(1024),
            ..Options::default()
        };
        let e = resolve(&Options::default(), &many, &exps)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--ranks: found `1024`, run `gu60m` has") && e.contains("micro-batch"),
            "{e}"
        );
        let alone = Options {
            mpi: Some("pmi2".into()),
            ..Options::default()
        };
        let e = resolve(&alone, &Options::default(), &exps)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("[slurm] mpi: found `pmi2`, but runs have one rank"),
            "{e}"
        );
    }

    #[test]
    fn flags_win_unset_options_are_named_and_bad_values_all_reported() {
        let file = Options {
            partition: Some("debug".into()),
            time: Some("10:00".into()),
            ..Options::default()
        };
        let flags = Options {
            partition: Some("long".into()),
            cpus_per_task: Some(4),
            ..Options::default()
        };
        let c = resolve(&file, &flags, &[]).unwrap();
        let lines: Vec<(String, Source)> = c.set.iter().map(|s| (s.line(), s.source)).collect();
        assert_eq!(
            lines,
            [
                ("--partition=long".to_string(), Source::Flag),
                ("--time=10:00".to_string(), Source::SweepFile),
                ("--cpus-per-task=4".to_string(), Source::Flag),
            ]
        );
        assert_eq!(
            c.unset,
            [ClusterOption::Account, ClusterOption::GpusPerTask]
        );
        assert!(
            c.describe().contains("account, GPUs per task"),
            "{}",
            c.describe()
        );
        let bad = Options {
            account: Some("a b".into()),
            time: Some("2h".into()),
            cpus_per_task: Some(0),
            extra: vec!["mem=4G".into()],
            ..Options::default()
        };
        let e = resolve(&bad, &Options::default(), &[])
            .unwrap_err()
            .to_string();
        for needle in [
            "[slurm] account: found `a b`",
            "[slurm] time: found `2h`",
            "[slurm] cpus_per_task: found `0`",
            "[slurm] extra: found `mem=4G`",
        ] {
            assert!(e.contains(needle), "{needle}: {e}");
        }
    }
}
