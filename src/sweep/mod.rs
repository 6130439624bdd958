//! Sweeps: one TOML file expands into many training runs, run reliably and resumably.
//!
//! ```toml
//! base = "../../natural_text.toml"       # the experiment every run starts from (relative path)
//! name = "lr"                          # optional: the sweep directory's name (default: file stem)
//! out_dir = "runs/sweeps"              # optional (default runs/sweeps)
//! combine = "grid"                     # "grid" (every combination) or "zip" (i-th values together)
//! seeds = [0, 1]                       # every setting runs once per seed (run.seed)
//! [set]                                # optional: a delta merged into every run (like an experiment file)
//! train = { steps = 400 }
//! [axes]                               # TOML path → values; nested tables or quoted dotted keys
//! "optim.lr" = [1e-3, 3e-3, 1e-2]
//! "model.positions" = [{ kind = "nope" }, { kind = "rope" }]
//! base = ["../../skipless/pre_ln.toml", "../../skipless/sas.toml"]  # axis over experiment files
//! [labels]                             # optional: short names of axes in run names
//! "optim.lr" = "lr"
//! ```
//!
//! Run names are `label-value` for every axis (sorted by path, `base` first) and `seedS`,
//! joined by `_`, e.g. `lr-0.001_seed0`; the label defaults to the last path segment. Values
//! print as TOML scalars, tables as their `kind` plus `-keyvalue` for other fields (e.g.
//! `mask-sliding_window-w64`), arrays joined by `x` (`[]` is `none`), files as their stem;
//! anything outside `[A-Za-z0-9._-]` becomes `_`. A setting name longer than 80 characters
//! (tables with many keys) keeps its first 64 and gets `-` plus 12 hex digits of a hash of the
//! whole name. Two runs with the same name are an error.
//!
//! The sweep directory `OUT_DIR/NAME/` holds `sweep.json` (the expanded plan), `plans/RUN.toml`
//! (each run's resolved experiment), `RUN/` (the run directories, side by side for
//! `tensorboard --logdir OUT_DIR/NAME`), `logs/RUN.log` and `status/RUN.json`. Every run is a
//! child `sinklab train plans/RUN.toml --resume` process: a crash or divergence marks that run
//! failed (with the tail of its log) and harms no other; re-running the sweep skips finished
//! runs and resumes the others from their newest checkpoint; Ctrl-C (SIGINT/SIGTERM) makes every
//! child checkpoint and stop, and the sweep stops launching runs; if the sweep process itself
//! is killed (even with kill -9) its children die with it (PR_SET_PDEATHSIG) and everything
//! resumes from the checkpoints. The sweep root and every finished run also get TensorBoard's
//! HParams data ([`hparams`]), so the HPARAMS tab compares the runs. On a SLURM cluster, each run
//! is one task of a job array ([`slurm`]; the sweep file's optional `[slurm]` table holds the
//! cluster's options).

mod hparams;
pub mod slurm;

use crate::config::{self, Experiment};
use crate::rundir::RunDir;
use crate::train::TrainSummary;
use anyhow::{Context, Result, anyhow, bail};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

/// How axes combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// Every combination of the axes' values.
    #[default]
    Grid,
    /// The i-th values of all axes together (axes of equal length).
    Zip,
}

/// A sweep file (see the module docs).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    pub base: String,
    pub name: Option<String>,
    #[serde(default = "default_out")]
    pub out_dir: PathBuf,
    #[serde(default)]
    pub combine: Combine,
    #[serde(default = "default_seeds")]
    pub seeds: Vec<u64>,
    #[serde(default)]
    pub set: toml::Table,
    pub axes: toml::Table,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The cluster's options for `--emit slurm` / `--submit`.
    #[serde(default)]
    pub slurm: slurm::Options,
}

fn default_out() -> PathBuf {
    PathBuf::from("runs/sweeps")
}

fn default_seeds() -> Vec<u64> {
    vec![0]
}

/// One run of an expanded sweep.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunPlan {
    pub index: usize,
    pub name: String,
    pub seed: u64,
    /// Axis path → the value as written in TOML.
    pub values: BTreeMap<String, String>,
    /// The experiment file the run starts from.
    pub base: PathBuf,
}

/// An expanded sweep.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Plan {
    pub name: String,
    pub file: PathBuf,
    pub dir: PathBuf,
    pub combine: Combine,
    pub seeds: Vec<u64>,
    /// Axis paths in name order, with their labels and values.
    pub axes: Vec<(String, String, Vec<String>)>,
    pub runs: Vec<RunPlan>,
    /// The sweep file's `[slurm]` table.
    #[serde(default)]
    pub slurm: slurm::Options,
}

/// Flatten nested tables down to array leaves: `{optim: {lr: [..]}}` → `optim.lr`.
fn flatten_axes(
    t: &toml::Table,
    prefix: &str,
    out: &mut Vec<(String, Vec<toml::Value>)>,
) -> Result<()> {
    for (k, v) in t {
        let path = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            toml::Value::Array(a) => out.push((path, a.clone())),
            toml::Value::Table(sub) => flatten_axes(sub, &path, out)?,
            other => bail!(
                "axes.{path}: expected an array of values, found `{other}` (write `{path} = [{other}]` \
                 for a single value)"
            ),
        }
    }
    Ok(())
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || ".-".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Longest run name (the setting part) kept as is; longer ones (tables with many keys) are cut
/// and made unique with a hash of the full name, since file names are limited to 255 bytes.
const MAX_SETTING_NAME: usize = 80;

/// `SETTING_seedS`, with a setting name longer than [`MAX_SETTING_NAME`] cut to its first 64
/// characters, `-` and 12 hex digits of the FNV-1a hash of the whole setting name (stable
/// across platforms and versions).
fn shorten(setting: &str, seed: u64) -> String {
    if setting.len() <= MAX_SETTING_NAME {
        return format!("{setting}_seed{seed}");
    }
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in setting.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{}-{:012x}_seed{seed}", &setting[..64], h >> 16)
}

/// How a value appears in a run name.
pub fn value_label(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        toml::Value::Array(a) if a.is_empty() => "none".into(),
        toml::Value::Array(a) => a.iter().map(value_label).collect::<Vec<_>>().join("x"),
        toml::Value::Table(t) => {
            let mut parts = Vec::new();
            if let Some(k) = t.get("kind") {
                parts.push(value_label(k));
            }
            for (k, x) in t.iter().filter(|(k, _)| *k != "kind") {
                parts.push(format!("{k}{}", value_label(x)));
            }
            parts.join("-")
        }
        other => other.to_string(),
    }
}

/// Set `path` (dotted) to `value` in `table` with the experiment-delta semantics (tables merge,
/// a table with a different `kind` replaces).
fn assign(table: &mut toml::Table, path: &str, value: toml::Value) {
    let segs: Vec<&str> = path.split('.').collect();
    let mut over = toml::Table::new();
    let mut cursor = &mut over;
    for seg in &segs[..segs.len() - 1] {
        cursor = cursor
            .entry(seg.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .expect("fresh table");
    }
    cursor.insert(segs[segs.len() - 1].to_string(), value);
    config::deep_merge(table, over);
}

/// Read and expand a sweep file; every run's experiment is built and validated here, so a bad
/// value fails before anything runs.
pub fn expand(file: &Path) -> Result<(Plan, Vec<Experiment>)> {
    expand_into(file, None)
}

/// [`expand`], with the file's `out_dir` replaced by `out_dir` when given (`--out-dir`).
pub fn expand_into(file: &Path, out_dir: Option<&Path>) -> Result<(Plan, Vec<Experiment>)> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let de = toml::Deserializer::new(&text);
    let sweep: SweepFile = serde_path_to_error::deserialize(de).map_err(|e| {
        let path = e.path().to_string();
        anyhow!(
            "{}: {}{}\n  valid keys: base, name, out_dir, combine (\"grid\" | \"zip\"), seeds, [set], \
             [axes], [labels], [slurm] ({})",
            file.display(),
            if path == "." { String::new() } else { format!("{path}: ") },
            e.into_inner().message().trim(),
            slurm::KEYS
        )
    })?;
    let dir_of = file.parent().unwrap_or(Path::new("."));
    let mut axes = Vec::new();
    flatten_axes(&sweep.axes, "", &mut axes).map_err(|e| anyhow!("{}: {e}", file.display()))?;
    if axes.is_empty() {
        bail!(
            "{}: [axes] is empty; name at least one TOML path with a list of values",
            file.display()
        );
    }
    if let Some((p, _)) = axes.iter().find(|(_, v)| v.is_empty()) {
        bail!("{}: axes.{p} has no values", file.display());
    }
    if sweep.seeds.is_empty() {
        bail!("{}: seeds is empty; give at least one seed", file.display());
    }
    for p in sweep.labels.keys() {
        if !axes.iter().any(|(a, _)| a == p) {
            bail!(
                "{}: labels.{p} names no axis; axes are {}",
                file.display(),
                axes.iter()
                    .map(|(a, _)| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    // `base` first, then the others by path.
    axes.sort_by(|a, b| (a.0 != "base", &a.0).cmp(&(b.0 != "base", &b.0)));
    let label = |p: &str| -> String {
        sweep
            .labels
            .get(p)
            .cloned()
            .unwrap_or_else(|| p.rsplit('.').next().unwrap_or(p).to_string())
    };
    let n_settings = match sweep.combine {
        Combine::Grid => axes.iter().map(|(_, v)| v.len()).product(),
        Combine::Zip => {
            let n = axes[0].1.len();
            if let Some((p, v)) = axes.iter().find(|(_, v)| v.len() != n) {
                bail!(
                    "{}: combine = \"zip\" needs axes of equal length; axes.{} has {n} values but axes.{p} has {}",
                    file.display(),
                    axes[0].0,
                    v.len()
                );
            }
            n
        }
    };
    let name = sweep.name.clone().unwrap_or_else(|| {
        file.file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "sweep".into())
    });
    if !config::is_plain_name(&name) {
        bail!(
            "{}: name: found `{name}`, expected a non-empty name of letters, digits, '-', '_' or \
             '.', not only dots (the sweep directory is out_dir/name and must stay inside it)",
            file.display()
        );
    }
    let dir = out_dir.unwrap_or(&sweep.out_dir).join(&name);
    let mut runs = Vec::new();
    let mut exps = Vec::new();
    for setting in 0..n_settings {
        // Value index per axis.
        let mut rem = setting;
        let picks: Vec<usize> = match sweep.combine {
            Combine::Zip => vec![setting; axes.len()],
            Combine::Grid => {
                let mut p = vec![0; axes.len()];
                for (i, (_, v)) in axes.iter().enumerate().rev() {
                    p[i] = rem % v.len();
                    rem /= v.len();
                }
                p
            }
        };
        for &seed in &sweep.seeds {
            let mut base = dir_of.join(&sweep.base);
            let mut parts = Vec::new();
            let mut values = BTreeMap::new();
            let mut assignments: Vec<(String, toml::Value)> = Vec::new();
            for ((path, vals), &i) in axes.iter().zip(&picks) {
                let v = &vals[i];
                values.insert(path.clone(), v.to_string());
                if path == "base" {
                    let f = v.as_str().ok_or_else(|| {
                        anyhow!(
                            "{}: axes.base values must be experiment file paths",
                            file.display()
                        )
                    })?;
                    base = dir_of.join(f);
                    let stem = Path::new(f)
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    parts.push(format!("{}-{}", label(path), stem));
                } else {
                    assignments.push((path.clone(), v.clone()));
                    parts.push(format!("{}-{}", label(path), value_label(v)));
                }
            }
            let run_name = shorten(&sanitize(&parts.join("_")), seed);
            let mut table = config::load_table(&base)
                .map_err(|e| anyhow!("{}: base {}: {e}", file.display(), base.display()))?;
            config::deep_merge(&mut table, sweep.set.clone());
            for (p, v) in assignments {
                assign(&mut table, &p, v);
            }
            assign(&mut table, "run.seed", toml::Value::Integer(seed as i64));
            assign(
                &mut table,
                "run.name",
                toml::Value::String(run_name.clone()),
            );
            assign(
                &mut table,
                "run.out_dir",
                toml::Value::String(dir.display().to_string()),
            );
            let label_text = format!("{} (run {run_name})", file.display());
            let exp = config::from_table(&label_text, table).map_err(|e| anyhow!("{e}"))?;
            runs.push(RunPlan {
                index: runs.len(),
                name: run_name,
                seed,
                values,
                base: base.clone(),
            });
            exps.push(exp);
        }
    }
    let mut seen = std::collections::HashSet::new();
    for r in &runs {
        if !seen.insert(&r.name) {
            bail!(
                "{}: two runs are named `{}`; give the axes distinct [labels] or values",
                file.display(),
                r.name
            );
        }
    }
    let plan = Plan {
        name,
        file: file.to_path_buf(),
        dir,
        combine: sweep.combine,
        seeds: sweep.seeds.clone(),
        axes: axes
            .iter()
            .map(|(p, v)| {
                (
                    p.clone(),
                    label(p),
                    v.iter().map(|x| x.to_string()).collect(),
                )
            })
            .collect(),
        runs,
        slurm: sweep.slurm,
    };
    Ok((plan, exps))
}

/// A run's state as the sweep records it in `status/RUN.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunStatus {
    /// `done`, `failed`, `interrupted` or `running`.
    pub state: String,
    pub attempts: u32,
    /// The error (tail of the log) of a failed run.
    pub error: Option<String>,
    pub exit_code: Option<i32>,
    pub seconds: f64,
}

fn status_path(plan_dir: &Path, name: &str) -> PathBuf {
    plan_dir.join("status").join(format!("{name}.json"))
}

/// The recorded status of a run, if any.
pub fn read_status(plan_dir: &Path, name: &str) -> Option<RunStatus> {
    serde_json::from_str(&std::fs::read_to_string(status_path(plan_dir, name)).ok()?).ok()
}

/// Whether a run finished: recorded done and its newest checkpoint is the last step.
pub fn finished(plan: &Plan, run: &RunPlan, exp: &Experiment) -> bool {
    let done = read_status(&plan.dir, &run.name).is_some_and(|s| s.state == "done");
    let last = crate::checkpoint::list_checkpoints(&exp.run_dir())
        .last()
        .map(|(s, _)| *s);
    done && last == Some(exp.train.steps)
}

/// Write `sweep.json` and every run's resolved experiment. A file that already holds the same
/// text is left alone, so that SLURM tasks starting together do not rewrite the plan.
pub fn write_plan(plan: &Plan, exps: &[Experiment]) -> Result<()> {
    std::fs::create_dir_all(plan.dir.join("plans"))
        .with_context(|| format!("creating {}", plan.dir.display()))?;
    let write_changed = |path: &Path, text: &str| -> Result<()> {
        if std::fs::read(path).is_ok_and(|old| old == text.as_bytes()) {
            return Ok(());
        }
        crate::checkpoint::write_atomic(path, text.as_bytes())
    };
    for (r, e) in plan.runs.iter().zip(exps) {
        write_changed(
            &plan.dir.join("plans").join(format!("{}.toml", r.name)),
            &e.to_toml(),
        )?;
    }
    write_changed(
        &plan.dir.join("sweep.json"),
        &serde_json::to_string_pretty(plan)?,
    )
}

/// Read a sweep directory's `sweep.json`.
pub fn read_plan(dir: &Path) -> Result<Plan> {
    let p = dir.join("sweep.json");
    let text = std::fs::read_to_string(&p)
        .with_context(|| format!("{}: not a sweep directory (no sweep.json)", dir.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// Set by the signal handler of `sinklab sweep`.
pub static STOP: AtomicBool = AtomicBool::new(false);

/// What `run` did.
#[derive(Debug, Default, Clone)]
pub struct SweepOutcome {
    pub done: Vec<String>,
    pub skipped: Vec<String>,
    pub failed: Vec<(String, String)>,
    pub interrupted: Vec<String>,
    /// Runs another process was training (name, holder).
    pub busy: Vec<(String, String)>,
}

/// The last `lines` non-blank lines of `path` written after byte `from` (this attempt's output).
fn tail(path: &Path, from: u64, lines: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let start = usize::try_from(from).unwrap_or(usize::MAX).min(bytes.len());
    let text = String::from_utf8_lossy(&bytes[start..]);
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// Run one run as a child process (`sinklab train`, or `srun` of its MPI ranks when `ranks`
/// says so); returns its final status.
fn run_child(
    exe: &Path,
    plan: &Plan,
    run: &RunPlan,
    (threads, ranks): (usize, Option<&slurm::RankLaunch>),
    skip_memory_check: bool,
    children: &Mutex<Vec<u32>>,
) -> Result<RunStatus> {
    let log_path = plan.dir.join("logs").join(format!("{}.log", run.name));
    std::fs::create_dir_all(log_path.parent().expect("logs dir"))?;
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)?;
    // A run another process trains (a second launcher, a re-queued SLURM task) is left to it:
    // its status is that process's to write.
    let busy = |holder: String| RunStatus {
        state: "busy".into(),
        attempts: 0,
        error: Some(holder),
        exit_code: Some(crate::lock::EXIT_BUSY),
        seconds: 0.0,
    };
    if let Some(h) = crate::lock::holder(&plan.dir.join(&run.name)) {
        return Ok(busy(format!(
            "pid {} on host {} since {}",
            h.pid, h.host, h.since
        )));
    }
    let previous = read_status(&plan.dir, &run.name);
    let attempts = previous.as_ref().map_or(0, |s| s.attempts) + 1;
    {
        use std::io::Write;
        writeln!(log, "=== sinklab sweep: attempt {attempts} ===")?;
    }
    let log_start = log.metadata()?.len();
    let write_status = |s: &RunStatus| -> Result<()> {
        crate::checkpoint::write_atomic(
            &status_path(&plan.dir, &run.name),
            serde_json::to_string_pretty(s)?.as_bytes(),
        )
    };
    write_status(&RunStatus {
        state: "running".into(),
        attempts,
        error: None,
        exit_code: None,
        seconds: 0.0,
    })?;
    let t0 = std::time::Instant::now();
    let mut cmd = match ranks {
        None => std::process::Command::new(exe),
        Some(l) => {
            let mut c = std::process::Command::new("srun");
            c.args(l.srun_args()).arg(exe);
            c
        }
    };
    cmd.arg("train")
        .arg(plan.dir.join("plans").join(format!("{}.toml", run.name)))
        .arg("--resume")
        .args(skip_memory_check.then_some(crate::memory::SKIP_FLAG))
        .env("RAYON_NUM_THREADS", threads.to_string())
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; the closure only makes that one call.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().with_context(|| match ranks {
        None => format!("starting {}", exe.display()),
        Some(_) => "starting srun (a run with [slurm] ranks runs inside a SLURM job)".into(),
    })?;
    children.lock().expect("children lock").push(child.id());
    let status = child.wait()?;
    children
        .lock()
        .expect("children lock")
        .retain(|&p| p != child.id());
    let code = status.code();
    if code == Some(crate::lock::EXIT_BUSY) {
        // Lost the race for the run's lock: the holder (named in the log) trains it.
        write_status(&RunStatus {
            state: "running".into(),
            attempts: attempts - 1,
            error: None,
            exit_code: None,
            seconds: 0.0,
        })?;
        return Ok(busy(tail(&log_path, log_start, 1)));
    }
    let summary: Option<TrainSummary> =
        std::fs::read_to_string(RunDir(&plan.dir.join(&run.name)).summary())
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok());
    let was_interrupted = summary.is_some_and(|s| s.interrupted) && code == Some(130);
    let (state, error) = if status.success() {
        ("done", None)
    } else if was_interrupted || STOP.load(Ordering::SeqCst) {
        ("interrupted", None)
    } else {
        ("failed", Some(tail(&log_path, log_start, 6)))
    };
    let s = RunStatus {
        state: state.into(),
        attempts,
        error,
        exit_code: code,
        seconds: t0.elapsed().as_secs_f64(),
    };
    write_status(&s)?;
    Ok(s)
}

/// CPU threads each run gets when `jobs` run at a time: the cores over `jobs`. A SLURM task
/// uses the CPUs it was given (--cpus-per-task): a cluster that does not bind tasks to CPUs
/// leaves the whole node visible.
pub fn threads_per_run(jobs: usize) -> usize {
    let cores = std::env::var("SLURM_CPUS_PER_TASK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    (cores / jobs.max(1)).max(1)
}

/// Run (or continue) a sweep with `jobs` runs at a time; `only` restricts it to one run index
/// (a SLURM array task), `ranks` starts each run as MPI ranks with srun (a task of a sweep with
/// `[slurm] ranks`). `skip_memory_check` is passed on to every run
/// ([`crate::memory::SKIP_FLAG`]).
pub fn run(
    plan: &Plan,
    exps: &[Experiment],
    (jobs, only, ranks): (usize, Option<usize>, Option<&slurm::RankLaunch>),
    skip_memory_check: bool,
    log: &(dyn Fn(&str) + Sync),
) -> Result<SweepOutcome> {
    write_plan(plan, exps)?;
    hparams::write_experiment(plan)?;
    let exe = std::env::current_exe().context("locating the sinklab binary")?;
    let jobs = jobs.max(1);
    let threads = threads_per_run(jobs);
    let mut queue: Vec<usize> = match only {
        Some(i) if i >= plan.runs.len() => {
            bail!("--index {i}: the sweep has runs 0..{}", plan.runs.len())
        }
        Some(i) => vec![i],
        None => (0..plan.runs.len()).collect(),
    };
    let outcome = Mutex::new(SweepOutcome::default());
    queue.retain(|&i| {
        if finished(plan, &plan.runs[i], &exps[i]) {
            outcome
                .lock()
                .expect("outcome")
                .skipped
                .push(plan.runs[i].name.clone());
            false
        } else {
            true
        }
    });
    let total = queue.len();
    let skipped = outcome.lock().expect("outcome").skipped.len();
    log(&format!(
        "sweep {}: {} ({skipped} already finished, {total} to run), {jobs} at a time × {}; directory {}",
        plan.name,
        crate::progress::count(plan.runs.len(), "run", None),
        crate::progress::count(threads, "thread", None),
        plan.dir.display()
    ));
    let queue = Mutex::new(queue.into_iter());
    let children = Mutex::new(Vec::<u32>::new());
    // a bar on a terminal; without one its lines and about 20 progress lines still print
    let bar = crate::progress::Progress::new(total as u64, "sweep runs");
    let active = std::sync::atomic::AtomicUsize::new(0);
    // srun takes a first SIGINT as a request for its status: it gets SIGTERM, which it
    // forwards to the ranks.
    let signal = if ranks.is_some() {
        libc::SIGTERM
    } else {
        libc::SIGINT
    };
    std::thread::scope(|scope| {
        let workers = jobs.min(total.max(1));
        active.store(workers, Ordering::SeqCst);
        for _ in 0..workers {
            scope.spawn(|| {
                loop {
                    if STOP.load(Ordering::SeqCst) {
                        break;
                    }
                    let Some(i) = queue.lock().expect("queue").next() else {
                        break;
                    };
                    let run = &plan.runs[i];
                    bar.println(&format!("start {}", run.name));
                    let how = (threads, ranks);
                    let res = run_child(&exe, plan, run, how, skip_memory_check, &children);
                    let mut o = outcome.lock().expect("outcome");
                    match res {
                        Ok(s) if s.state == "done" => {
                            bar.println(&format!("done  {} ({:.0} s)", run.name, s.seconds));
                            if let Err(e) =
                                hparams::write_session(&exps[i].run_dir(), run, s.seconds)
                            {
                                bar.println(&format!("warning: {}: {e:#}", run.name));
                            }
                            o.done.push(run.name.clone());
                        }
                        Ok(s) if s.state == "busy" => {
                            let h = s.error.unwrap_or_default();
                            bar.println(&format!(
                                "busy  {}: another process trains it ({h})",
                                run.name
                            ));
                            o.busy.push((run.name.clone(), h));
                        }
                        Ok(s) if s.state == "interrupted" => {
                            bar.println(&format!("interrupted {}", run.name));
                            o.interrupted.push(run.name.clone());
                        }
                        Ok(s) => {
                            let e = s.error.unwrap_or_default();
                            bar.println(&format!(
                                "FAILED {}: {}",
                                run.name,
                                e.lines().last().unwrap_or("")
                            ));
                            o.failed.push((run.name.clone(), e));
                        }
                        Err(e) => {
                            bar.println(&format!("FAILED {}: {e:#}", run.name));
                            o.failed.push((run.name.clone(), format!("{e:#}")));
                        }
                    }
                    bar.inc(1);
                }
                active.fetch_sub(1, Ordering::SeqCst);
            });
        }
        // Forward a stop request to the children (they checkpoint and exit), including children
        // started while the request arrived.
        scope.spawn(|| {
            let mut signalled = std::collections::HashSet::new();
            while active.load(Ordering::SeqCst) > 0 {
                if STOP.load(Ordering::SeqCst) {
                    for &pid in children.lock().expect("children").iter() {
                        if signalled.insert(pid) {
                            // SAFETY: sending a signal to our own child process id.
                            unsafe {
                                libc::kill(pid as libc::pid_t, signal);
                            }
                        }
                    }
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        });
    });
    bar.finish();
    let o = outcome.into_inner().expect("outcome");
    Ok(o)
}
