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
//! With `[slurm] ranks = R` (and `nodes = N`) every run is one job of R MPI ranks on N machines
//! (`#SBATCH --ntasks=R --nodes=N`): task I runs `sinklab sweep FILE --index I --ranks R --mpi
//! P`, which starts the run as `srun --mpi=P --ntasks=R --kill-on-bad-exit=1 sinklab train …`
//! (a sinklab built with the `mpi` feature; docs/distributed.md). `P` is the cluster's MPI
//! plugin for the MPI library sinklab was built with (`pmix` by default: OpenMPI 4/5, MPICH
//! with PMIx; `srun --mpi=list` names the cluster's). GPUs are then per rank
//! (`--gpus-per-task`), and so are CPUs (`--cpus-per-task`).
//!
//! `sinklab sweep FILE --submit` also calls `sbatch`: the array over the runs not yet finished,
//! then the report with `--dependency=afterany:ARRAY_JOB` (it starts once every task has ended,
//! whatever its state). The cluster's options ([`Options`]) come from the sweep file's `[slurm]`
//! table or the command line; an option given in neither gets no `#SBATCH` line, so the
//! cluster's own default applies, and [`Cluster::describe`] says which those are.

mod options;

pub use options::*;

use super::{Plan, finished};
use crate::config::Experiment;
use anyhow::{Context, Result, anyhow, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

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

/// The `#SBATCH` lines of the cluster options (without GPUs and ranks for the report) and the header
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
    // the report is one process without GPUs
    let lines = cluster
        .set
        .iter()
        .filter(|s| {
            with_gpus
                || !matches!(
                    s.option,
                    ClusterOption::GpusPerTask | ClusterOption::Ranks | ClusterOption::Nodes
                )
        })
        .map(|s| format!("#SBATCH {}\n", cluster.line(s)))
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
    // several ranks: the task starts the run with srun (RankLaunch::srun_args)
    let launch = match &cluster.launch {
        Some(l) => format!(" --ranks {} --mpi {}", l.ranks, l.mpi),
        None => String::new(),
    };
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
exec {exe} sweep {file}{out} --index "$SLURM_ARRAY_TASK_ID"{launch}
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
    fn array_lists_are_ranges() {
        assert_eq!(array_ranges(&[0, 1, 2]), "0-2");
        assert_eq!(array_ranges(&[0, 2, 3, 4, 7]), "0,2-4,7");
        assert_eq!(array_ranges(&[5]), "5");
    }
}
