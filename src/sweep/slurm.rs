//! A sweep on a SLURM cluster: a job array with one task per run, and the report as a job that
//! waits for the array.
//!
//! `sinklab sweep FILE --emit slurm` writes two scripts into the sweep directory and creates
//! everything they need first (`logs/`, where SLURM writes the tasks' output and which SLURM
//! does not create; `status/`; the plan), so they run on a fresh sweep:
//!
//! - `slurm.sh`, the job array. Task I checks that it can start (the working directory, the
//!   binary, the sweep file), then `exec`s `sinklab sweep FILE --index I`, which skips a finished
//!   run and resumes an unfinished one from its newest checkpoint, like a local sweep. `exec`
//!   makes sinklab the task's process, so the scheduler's SIGTERM (`scancel`, the time limit,
//!   pre-emption) reaches it: the step under way finishes, a checkpoint is written and the task
//!   exits 130, which must fit in the cluster's `KillWait` (30 s by default) before SIGKILL. A
//!   task that cannot start exits 1 with the reason in its log (`logs/slurm-JOB_I.out`) and in
//!   its run's `status/RUN.json`, which the report lists.
//! - `slurm-report.sh`: `sinklab report DIR`.
//!
//! `sinklab sweep FILE --submit` also calls `sbatch`: the array over the runs not yet finished,
//! then the report with `--dependency=afterany:ARRAY_JOB` (it starts once every task has ended,
//! whatever its state). The cluster's options ([`Options`]) come from the sweep file's `[slurm]`
//! table or the command line; an option given in neither gets no `#SBATCH` line, so the
//! cluster's own default applies, and [`Cluster::describe`] says which those are.

use super::{Plan, finished};
use crate::config::{DeviceKind, Experiment};
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::Command;

/// A sweep file's `[slurm]` table, or the command line's cluster flags.
///
/// ```toml
/// [slurm]
/// partition = "gpu"
/// account = "my_project"
/// time = "2-00:00:00"         # per task: MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS
/// gpus_per_task = 1           # --gres=gpu:N
/// cpus_per_task = 8           # also the task's training threads
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
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra: Vec<String>,
}

/// The keys of `[slurm]`, for error messages.
pub const KEYS: &str = "partition, account, time, gpus_per_task, cpus_per_task, extra";

/// The cluster options sinklab knows, in `#SBATCH` order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClusterOption {
    Partition,
    Account,
    Time,
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
            ClusterOption::CpusPerTask => "--cpus-per-task",
            ClusterOption::GpusPerTask => "--gpus-per-task",
        }
    }

    /// The `#SBATCH` option for `value`.
    pub fn sbatch(self, value: &str) -> String {
        match self {
            ClusterOption::GpusPerTask => format!("--gres=gpu:{value}"),
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
    /// Derived from the runs: the GPUs that `run.devices` asks for on a GPU backend.
    Runs,
}

impl Source {
    fn describe(self) -> &'static str {
        match self {
            Source::Flag => "command line",
            Source::SweepFile => "sweep file",
            Source::Runs => "runs' run.devices",
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
    // The GPUs a run needs: run.devices on a GPU backend.
    let needs = exps
        .iter()
        .filter(|e| e.run.device != DeviceKind::Flex)
        .max_by_key(|e| e.run.devices);
    let given = [
        (O::Partition, pick(&file.partition, &flags.partition)),
        (O::Account, pick(&file.account, &flags.account)),
        (O::Time, pick(&file.time, &flags.time)),
        (
            O::CpusPerTask,
            pick(&file.cpus_per_task, &flags.cpus_per_task),
        ),
        (
            O::GpusPerTask,
            pick(&file.gpus_per_task, &flags.gpus_per_task)
                .or_else(|| needs.map(|e| (e.run.devices.to_string(), Source::Runs))),
        ),
    ];
    let mut cluster = Cluster {
        set: Vec::new(),
        unset: Vec::new(),
        extra: file.extra.clone(),
    };
    let mut errors = Vec::new();
    for (option, value) in given {
        let Some((value, source)) = value else {
            cluster.unset.push(option);
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
            O::CpusPerTask | O::GpusPerTask if value == "0" => {
                Some("expected at least 1 (leave it out for none or the cluster's default)".into())
            }
            O::GpusPerTask => needs
                .filter(|e| value.parse::<usize>().is_ok_and(|g| g < e.run.devices))
                .map(|e| {
                    format!(
                        "run `{}` uses run.devices = {} on {}",
                        e.run.name,
                        e.run.devices,
                        e.run.device.name()
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
    /// The options written and those left to the cluster, for the terminal.
    pub fn describe(&self) -> String {
        let mut lines: Vec<String> = self
            .set
            .iter()
            .map(|s| {
                format!(
                    "  #SBATCH {}  ({}, from the {})",
                    s.line(),
                    s.option.what(),
                    s.source.describe()
                )
            })
            .collect();
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

/// How the tasks call sinklab: the binary, the working directory (relative paths of the sweep
/// resolve from it) and `--out-dir` if given.
#[derive(Debug, Clone, Copy)]
pub struct Invocation<'a> {
    pub exe: &'a Path,
    pub cwd: &'a Path,
    pub out_dir: Option<&'a Path>,
}

impl Invocation<'_> {
    /// `path` as the tasks see it: absolute, from the working directory.
    fn absolute(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.cwd.join(path)
        }
    }
}

/// The array script's file in the sweep directory.
pub fn array_script_path(plan: &Plan) -> PathBuf {
    plan.dir.join("slurm.sh")
}

/// The report script's file in the sweep directory.
pub fn report_script_path(plan: &Plan) -> PathBuf {
    plan.dir.join("slurm-report.sh")
}

/// A path written into a script: refused if it holds a character that `#SBATCH` lines, the shell
/// or the JSON status written by a task that cannot start would misread.
fn script_path(what: &str, p: &Path) -> Result<String> {
    let s = p
        .to_str()
        .ok_or_else(|| anyhow!("{what} {}: not UTF-8", p.display()))?;
    if let Some(c) = s
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "\"'\\%$`!*?[]{}()<>|&;#~".contains(*c))
    {
        bail!(
            "{what} {s}: the SLURM scripts cannot hold the character {c:?}; move the sweep \
             (--out-dir) or the files to a path of letters, digits and / . _ - , : + = @"
        );
    }
    Ok(s.to_string())
}

/// The `#SBATCH` lines of the cluster options (without GPUs for the report) and the header
/// comment naming those not set.
fn cluster_lines(cluster: &Cluster, with_gpus: bool) -> (String, String) {
    let unset = if cluster.unset.is_empty() {
        String::new()
    } else {
        format!(
            "# Not set, so the cluster's default applies: {}.\n",
            cluster
                .unset
                .iter()
                .map(|o| o.what())
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let lines = cluster
        .set
        .iter()
        .filter(|s| with_gpus || s.option != ClusterOption::GpusPerTask)
        .map(|s| format!("#SBATCH {}\n", s.line()))
        .chain(cluster.extra.iter().map(|x| format!("#SBATCH {x}\n")))
        .collect();
    (unset, lines)
}

/// The job-array script: one task per run of `plan`.
pub fn array_script(plan: &Plan, cluster: &Cluster, inv: &Invocation) -> Result<String> {
    let exe = script_path("the sinklab binary", inv.exe)?;
    let cwd = script_path("the working directory", inv.cwd)?;
    let file = script_path("the sweep file", &plan.file)?;
    let dir = script_path("the sweep directory", &inv.absolute(&plan.dir))?;
    let out = match inv.out_dir {
        Some(d) => format!(" --out-dir {}", script_path("--out-dir", d)?),
        None => String::new(),
    };
    let runs: Vec<&str> = plan.runs.iter().map(|r| r.name.as_str()).collect();
    let (unset, lines) = cluster_lines(cluster, true);
    Ok(format!(
        r#"#!/bin/bash
# SLURM job array for sinklab sweep `{name}` ({n} runs), written by `sinklab sweep --emit slurm`.
# Submit with `sinklab sweep {file}{out} --submit` (the unfinished runs, then the report), or
# `sbatch {dir}/slurm.sh` (every run; finished ones are skipped).
# Task I runs run I: a finished run is skipped, an unfinished one resumes from its newest
# checkpoint. `scancel`, the time limit or pre-emption send SIGTERM: the run checkpoints and the
# task exits within KillWait; the next submission resumes it exactly.
# Cluster options come from the sweep file's [slurm] table or sinklab's flags, not from edits here.
{unset}#SBATCH --job-name=sinklab-{name}
#SBATCH --array=0-{last}
#SBATCH --output={dir}/logs/slurm-%A_%a.out
{lines}set -uo pipefail
task=${{SLURM_ARRAY_TASK_ID:?not a SLURM array task: submit this script with sbatch}}
runs=({runs})
# A task that cannot start exits 1 with the reason here and in its run's status (the report).
cannot_start() {{
  echo "sinklab sweep {name}, array task $task: cannot start: $1" >&2
  if [ -n "${{runs[$task]:-}}" ] && [ -d {dir}/status ]; then
    printf '{{"state": "failed", "attempts": 0, "error": "SLURM job %s task %s on %s could not start: %s", "exit_code": 1, "seconds": 0.0}}\n' \
      "${{SLURM_ARRAY_JOB_ID:-?}}" "$task" "$(hostname)" "$1" > "{dir}/status/${{runs[$task]}}.json"
  fi
  exit 1
}}
cd {cwd} || cannot_start "cannot enter the working directory {cwd}"
[ -x {exe} ] || cannot_start "the sinklab binary {exe} is missing or not executable on this node"
[ -r {file} ] || cannot_start "the sweep file {file} is missing or unreadable (from {cwd})"
shopt -s execfail
# exec: sinklab replaces this shell, so the scheduler's SIGTERM reaches it.
exec {exe} sweep {file}{out} --index "$SLURM_ARRAY_TASK_ID"
cannot_start "exec {exe} failed"
"#,
        name = plan.name,
        n = runs.len(),
        last = runs.len().saturating_sub(1),
        runs = runs.join(" "),
    ))
}

/// The report script: `sinklab report DIR`, on the array's partition and account, without GPUs.
pub fn report_script(plan: &Plan, cluster: &Cluster, inv: &Invocation) -> Result<String> {
    let exe = script_path("the sinklab binary", inv.exe)?;
    let cwd = script_path("the working directory", inv.cwd)?;
    let dir = script_path("the sweep directory", &inv.absolute(&plan.dir))?;
    let (unset, lines) = cluster_lines(cluster, false);
    Ok(format!(
        r#"#!/bin/bash
# The report of sinklab sweep `{name}`, written by `sinklab sweep --emit slurm`. `sinklab sweep
# --submit` submits it with --dependency=afterany:ARRAY_JOB: it starts when every task has ended,
# whatever its state, and lists the runs that did not finish.
{unset}#SBATCH --job-name=sinklab-{name}-report
#SBATCH --output={dir}/logs/slurm-report-%j.out
{lines}set -uo pipefail
cd {cwd} || {{ echo "sinklab report {name}: cannot enter the working directory {cwd}" >&2; exit 1; }}
exec {exe} report {dir}
"#,
        name = plan.name,
    ))
}

/// What [`emit`] wrote.
#[derive(Debug, Clone)]
pub struct Emitted {
    pub array_script: PathBuf,
    pub report_script: PathBuf,
    /// Where the tasks' and the report's SLURM output goes.
    pub logs: PathBuf,
}

/// Write the plan, the HParams experiment, `logs/`, `status/` and both scripts: everything the
/// tasks need before the first one starts.
pub fn emit(
    plan: &Plan,
    exps: &[Experiment],
    cluster: &Cluster,
    inv: &Invocation,
) -> Result<Emitted> {
    let array = array_script(plan, cluster, inv)?;
    let report = report_script(plan, cluster, inv)?;
    super::write_plan(plan, exps)?;
    // Written once here, not by tasks that start together.
    super::hparams::write_experiment(plan)?;
    let logs = plan.dir.join("logs");
    for d in [&logs, &plan.dir.join("status")] {
        std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
    }
    let emitted = Emitted {
        array_script: array_script_path(plan),
        report_script: report_script_path(plan),
        logs,
    };
    for (p, text) in [
        (&emitted.array_script, array),
        (&emitted.report_script, report),
    ] {
        crate::checkpoint::write_atomic(p, text.as_bytes())?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))?;
        }
    }
    Ok(emitted)
}

/// What [`submit`] submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct Submission {
    /// The array's job id and the run indices it runs; `None` when every run had finished.
    pub array: Option<(String, Vec<usize>)>,
    /// The report's job id.
    pub report: Option<String>,
    /// The runs skipped because they had finished.
    pub finished: Vec<String>,
}

/// Indices as an `--array` list: `0-2,5,7-8`.
pub fn array_ranges(indices: &[usize]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < indices.len() {
        let mut j = i;
        while j + 1 < indices.len() && indices[j + 1] == indices[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            indices[i].to_string()
        } else {
            format!("{}-{}", indices[i], indices[j])
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Run a SLURM client command; its stdout, or an error with its stderr.
fn slurm_command(program: &str, args: &[String]) -> Result<String> {
    let out = Command::new(program).args(args).output().map_err(|e| {
        anyhow!(
            "{program}: {e}; --submit needs SLURM's client commands (sbatch, squeue) on PATH \
             (the scripts are written: submit them where SLURM is)"
        )
    })?;
    if !out.status.success() {
        bail!(
            "{program} {}: {} {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `sbatch --parsable ARGS`; the job id.
fn sbatch(args: &[String]) -> Result<String> {
    let mut all = vec!["--parsable".to_string()];
    all.extend_from_slice(args);
    let out = slurm_command("sbatch", &all)?;
    // --parsable prints `JOBID` or `JOBID;CLUSTER`
    let id = out.split(';').next().unwrap_or("").trim();
    if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        bail!("sbatch {}: expected a job id, got `{out}`", args.join(" "));
    }
    Ok(id.to_string())
}

/// Submit the array over the runs not yet finished and, if `with_report`, the report after it.
/// Refuses while a job of this sweep is still queued or running, since two tasks of one run
/// would write the same run directory.
pub fn submit(
    plan: &Plan,
    exps: &[Experiment],
    emitted: &Emitted,
    with_report: bool,
) -> Result<Submission> {
    let (done, todo): (Vec<usize>, Vec<usize>) =
        (0..plan.runs.len()).partition(|&i| finished(plan, &plan.runs[i], &exps[i]));
    let finished: Vec<String> = done.iter().map(|&i| plan.runs[i].name.clone()).collect();
    if todo.is_empty() {
        return Ok(Submission {
            array: None,
            report: None,
            finished,
        });
    }
    let job_name = format!("sinklab-{}", plan.name);
    let queued = slurm_command(
        "squeue",
        &[
            "--noheader".into(),
            "--me".into(),
            format!("--name={job_name}"),
            "--states=PENDING,RUNNING,SUSPENDED,CONFIGURING,REQUEUED".into(),
            "--format=%i".into(),
        ],
    )?;
    if !queued.is_empty() {
        bail!(
            "jobs of sweep {} are still queued or running ({}); wait for them or scancel them \
             before submitting again",
            plan.name,
            queued.split_whitespace().collect::<Vec<_>>().join(", ")
        );
    }
    let array = sbatch(&[
        format!("--array={}", array_ranges(&todo)),
        emitted.array_script.display().to_string(),
    ])?;
    let report = if with_report {
        Some(sbatch(&[
            format!("--dependency=afterany:{array}"),
            emitted.report_script.display().to_string(),
        ])?)
    } else {
        None
    };
    Ok(Submission {
        array: Some((array, todo)),
        report,
        finished,
    })
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
    fn gpus_follow_run_devices_unless_given_and_too_few_are_refused() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/gu60m.toml");
        let mut exp = crate::config::load(&path, &[]).unwrap();
        assert_eq!(exp.run.device, DeviceKind::Cuda);
        exp.run.devices = 2;
        let exps = [exp];
        let c = resolve(&Options::default(), &Options::default(), &exps).unwrap();
        let gpus = c
            .set
            .iter()
            .find(|s| s.option == ClusterOption::GpusPerTask)
            .unwrap();
        assert_eq!(
            (gpus.line(), gpus.source),
            ("--gres=gpu:2".to_string(), Source::Runs)
        );
        let one = Options {
            gpus_per_task: Some(1),
            ..Options::default()
        };
        let e = resolve(&Options::default(), &one, &exps)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("--gpus-per-task: found `1`, run `gu60m` uses run.devices = 2 on cuda"),
            "{e}"
        );
    }

    #[test]
    fn array_lists_are_ranges() {
        assert_eq!(array_ranges(&[0, 1, 2]), "0-2");
        assert_eq!(array_ranges(&[0, 2, 3, 4, 7]), "0,2-4,7");
        assert_eq!(array_ranges(&[5]), "5");
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
