//! Sweeps on a real SLURM scheduler. The test stands up a single-node cluster on localhost —
//! a munge key and `munged`, a minimal `slurm.conf`, `slurmctld` and `slurmd`, all in a
//! temporary directory, started by the test and stopped by their process ids, also when it
//! fails — and submits a sweep of tiny runs with `sinklab sweep --submit`: the job array
//! finishes every run, the dependent job writes the report, a re-submission skips everything, a
//! task cancelled mid-run with `scancel` (SIGTERM) checkpoints and, submitted again, ends with
//! the same losses as an uninterrupted run, and a task that cannot start fails with its reason
//! in its log and in the report. It needs Debian's `slurm-wlm` and `munge` (`.ci/run` installs
//! them) and fails, saying so, without them.

use crate::common;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Seconds between SIGTERM and SIGKILL when the cluster ends a job (SLURM's default).
pub(crate) const KILL_WAIT: u64 = 30;
/// The longest the test waits for the cluster or a job.
const PATIENCE: Duration = Duration::from_secs(180);

/// A SLURM program: on PATH or in the sbin directories (not on PATH for every user).
fn program(name: &str) -> PathBuf {
    let path = std::env::var("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "`{name}` not found: this test stands up a SLURM cluster on localhost and needs \
                 Debian's slurm-wlm and munge (`apt-get install -y slurm-wlm munge`, as .ci/run does)"
            )
        })
}

/// The last lines of a file, for failure messages.
pub(crate) fn tail(p: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    format!(
        "--- {} ---\n{}",
        p.display(),
        all[all.len().saturating_sub(lines)..].join("\n")
    )
}

/// This machine's name up to the first dot, as slurmd names its node.
fn short_hostname() -> String {
    let mut buf = [0u8; 256];
    // SAFETY: gethostname writes at most buf.len() bytes into buf.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    assert_eq!(rc, 0, "gethostname: {}", std::io::Error::last_os_error());
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    let name = String::from_utf8_lossy(&buf[..end]).into_owned();
    name.split('.').next().unwrap_or("localhost").to_string()
}

/// A free TCP port on localhost.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub(crate) fn stdout_of(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// One job (or array task) as `scontrol show job` reports it.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) state: String,
    pub(crate) exit_code: String,
    start: String,
    end: String,
    run_time: String,
}

/// A single-node SLURM cluster in a temporary directory (also the MPI tests', `crate::mpi`);
/// dropping it cancels its jobs and stops its daemons by their process ids.
pub(crate) struct Cluster {
    dir: tempfile::TempDir,
    pub(crate) conf: PathBuf,
    node: String,
    /// munged, slurmctld, slurmd, in start order.
    daemons: Vec<(&'static str, Child)>,
}

impl Cluster {
    pub(crate) fn start() -> Cluster {
        let (munged, slurmctld, slurmd) =
            (program("munged"), program("slurmctld"), program("slurmd"));
        for p in ["sbatch", "squeue", "scontrol", "scancel", "sinfo"] {
            program(p);
        }
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_path_buf();
        // munged refuses a socket directory that others cannot enter, and a readable key.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let key = d.join("munge.key");
        let mut bytes = vec![0u8; 1024];
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut bytes)
            .unwrap();
        std::fs::write(&key, &bytes).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o400)).unwrap();
        let socket = d.join("munge.socket");
        let mut c = Cluster {
            conf: d.join("slurm.conf"),
            node: short_hostname(),
            daemons: Vec::new(),
            dir,
        };
        let log = |name: &str| std::fs::File::create(d.join(name)).unwrap();
        let spawn = |cmd: &mut Command, out: &str| -> Child {
            use std::os::unix::process::CommandExt;
            // SAFETY: prctl is async-signal-safe; the closure only makes that one call. A
            // daemon gets SIGTERM if the test's thread dies without dropping the cluster.
            unsafe {
                cmd.pre_exec(|| {
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            cmd.stdin(Stdio::null())
                .stdout(log(out))
                .stderr(log(out))
                .spawn()
                .unwrap_or_else(|e| panic!("{cmd:?}: {e}"))
        };
        let m = spawn(
            Command::new(munged)
                .arg("--foreground")
                .arg(format!("--key-file={}", key.display()))
                .arg(format!("--socket={}", socket.display()))
                .arg(format!("--pid-file={}", d.join("munged.pid").display()))
                .arg(format!("--seed-file={}", d.join("munged.seed").display()))
                .arg(format!("--log-file={}", d.join("munged.log").display())),
            "munged.out",
        );
        c.daemons.push(("munged", m));
        c.wait_for("munged's socket", || socket.exists(), &["munged.out"]);
        let user = stdout_of(Command::new("id").arg("-un"));
        let conf = format!(
            "ClusterName=sinklabtest\n\
             SlurmctldHost={node}(127.0.0.1)\n\
             SlurmctldPort={ctld_port}\n\
             SlurmdPort={d_port}\n\
             SlurmUser={user}\n\
             SlurmdUser={user}\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={socket}\n\
             StateSaveLocation={d}/state\n\
             SlurmdSpoolDir={d}/spool\n\
             SlurmctldPidFile={d}/slurmctld.pid\n\
             SlurmdPidFile={d}/slurmd.pid\n\
             SlurmctldLogFile={d}/slurmctld.log\n\
             SlurmdLogFile={d}/slurmd.log\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_CPU\n\
             JobAcctGatherType=jobacct_gather/none\n\
             AccountingStorageType=accounting_storage/none\n\
             MpiDefault=none\n\
             MailProg=/bin/true\n\
             ReturnToService=2\n\
             SlurmdParameters=config_overrides\n\
             KillWait={KILL_WAIT}\n\
             MinJobAge=3600\n\
             NodeName={node} NodeAddr=127.0.0.1 CPUs=2 RealMemory=1000 State=UNKNOWN\n\
             PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP\n",
            node = c.node,
            ctld_port = free_port(),
            d_port = free_port(),
            socket = socket.display(),
            d = d.display(),
        );
        for sub in ["state", "spool"] {
            std::fs::create_dir(d.join(sub)).unwrap();
        }
        std::fs::write(&c.conf, conf).unwrap();
        let ctld = spawn(
            Command::new(slurmctld)
                .args(["-D", "-f"])
                .arg(&c.conf)
                .env("SLURM_CONF", &c.conf),
            "slurmctld.out",
        );
        c.daemons.push(("slurmctld", ctld));
        let sd = spawn(
            Command::new(slurmd)
                .args(["-D", "-f"])
                .arg(&c.conf)
                .env("SLURM_CONF", &c.conf),
            "slurmd.out",
        );
        c.daemons.push(("slurmd", sd));
        c.wait_for(
            "the node to be idle",
            || stdout_of(c.cmd("sinfo").args(["-h", "-N", "-n", &c.node, "-o", "%t"])) == "idle",
            &["slurmctld.out", "slurmd.out"],
        );
        c
    }

    /// A SLURM client command talking to this cluster.
    pub(crate) fn cmd(&self, name: &str) -> Command {
        let mut c = Command::new(program(name));
        c.env("SLURM_CONF", &self.conf);
        c
    }

    fn logs(&self, files: &[&str]) -> String {
        files
            .iter()
            .map(|f| tail(&self.dir.path().join(f), 15))
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub(crate) fn wait_for(&self, what: &str, mut ready: impl FnMut() -> bool, logs: &[&str]) {
        let t0 = Instant::now();
        while !ready() {
            if let Some((name, code)) = self.exited() {
                panic!(
                    "{name} exited ({code}) waiting for {what}\n{}",
                    self.logs(logs)
                );
            }
            assert!(
                t0.elapsed() < PATIENCE,
                "timed out waiting for {what}\n{}",
                self.logs(logs)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// A daemon that has exited, if any.
    fn exited(&self) -> Option<(&'static str, String)> {
        self.daemons.iter().find_map(|(name, child)| {
            // try_wait needs &mut; /proc tells whether the process still runs.
            let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).ok();
            match stat {
                Some(s) if !s.contains(") Z ") => None,
                _ => Some((*name, "see its log".to_string())),
            }
        })
    }

    /// Every job and array task of `ids` (`JOB` or `JOB_TASK`), by `scontrol show job`.
    fn jobs(&self, ids: &[&str]) -> BTreeMap<String, Job> {
        let mut out = BTreeMap::new();
        for id in ids {
            let text = stdout_of(self.cmd("scontrol").args(["-o", "show", "job", id]));
            for line in text.lines() {
                let f: BTreeMap<&str, &str> = line
                    .split_whitespace()
                    .filter_map(|kv| kv.split_once('='))
                    .collect();
                let key = match (f.get("ArrayJobId"), f.get("ArrayTaskId")) {
                    (Some(a), Some(t)) => format!("{a}_{t}"),
                    _ => f["JobId"].to_string(),
                };
                out.insert(
                    key,
                    Job {
                        state: f["JobState"].to_string(),
                        exit_code: f["ExitCode"].to_string(),
                        start: f["StartTime"].to_string(),
                        end: f["EndTime"].to_string(),
                        run_time: f["RunTime"].to_string(),
                    },
                );
            }
        }
        out
    }

    /// Wait until every job of `ids` has ended; their final records.
    pub(crate) fn wait_jobs(&self, ids: &[&str]) -> BTreeMap<String, Job> {
        let live = [
            "PENDING",
            "RUNNING",
            "CONFIGURING",
            "COMPLETING",
            "SUSPENDED",
            "REQUEUED",
        ];
        let mut last = BTreeMap::new();
        self.wait_for(
            &format!("jobs {ids:?} to end"),
            || {
                last = self.jobs(ids);
                !last.is_empty() && last.values().all(|j| !live.contains(&j.state.as_str()))
            },
            &["slurmctld.log", "slurmd.log"],
        );
        last
    }

    /// `sinklab ARGS` in `cwd`, as a user of this cluster; (exit code, stdout + stderr).
    fn sinklab(&self, cwd: &Path, args: &[&str]) -> (i32, String) {
        let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
            .args(args)
            .current_dir(cwd)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Cancel what is left (the tasks get SIGTERM, then SIGKILL after KillWait), wait for
        // the jobs to go, then stop the daemons newest first: SIGTERM, then SIGKILL.
        let user = stdout_of(Command::new("id").arg("-un"));
        self.cmd("scancel").args(["-u", &user]).status().ok();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(KILL_WAIT + 10)
            && !stdout_of(self.cmd("squeue").arg("-h")).is_empty()
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        for (_, child) in self.daemons.iter_mut().rev() {
            // SAFETY: signalling a child process this test started, by its id.
            unsafe {
                libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
            }
            let t0 = Instant::now();
            while child.try_wait().ok().flatten().is_none() {
                if t0.elapsed() > Duration::from_secs(10) {
                    child.kill().ok();
                    child.wait().ok();
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// `prefix` followed by a number in `text`: the job id it names.
pub(crate) fn job_id(text: &str, prefix: &str) -> String {
    let at = text
        .find(prefix)
        .unwrap_or_else(|| panic!("no `{prefix}` in:\n{text}"));
    text[at + prefix.len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect()
}

/// Every scalar of a run's `metrics.jsonl` in file order, except the throughput (wall clock).
fn logged_values(run_dir: &Path) -> Vec<(u64, String, f64)> {
    common::read_metrics(run_dir)
        .into_iter()
        .flat_map(|(step, scalars)| {
            scalars
                .into_iter()
                .filter(|(k, _)| k != "train/tokens_per_s")
                .map(move |(k, v)| (step, k, v.as_f64().unwrap()))
        })
        .collect()
}

fn checkpoint_steps(run_dir: &Path) -> Vec<u64> {
    sinklab::checkpoint::list_checkpoints(run_dir)
        .into_iter()
        .map(|(s, _)| s)
        .collect()
}

const STEPS: u64 = 500;

#[test]
fn a_sweep_runs_on_a_real_slurm_cluster_and_resumes_after_scancel() {
    let t_start = Instant::now();
    let cluster = Cluster::start();
    let t_cluster = t_start.elapsed();
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    common::tiny_experiment(w, "tinybase", &[]);
    // Two runs of 500 steps (a few seconds each), checkpoints every 200 steps.
    let sweep = |name: &str, seeds: &str| {
        format!(
            "base = \"tinybase.toml\"\nname = \"{name}\"\nout_dir = \"sweeps\"\nseeds = {seeds}\n\
             [set]\ntrain = {{ steps = {STEPS}, checkpoint_every = 200, eval_every = 100 }}\n\
             metrics = {{ every = 100 }}\n[axes]\n\"optim.lr\" = [3e-3]\n\
             [slurm]\npartition = \"debug\"\ntime = \"10:00\"\n"
        )
    };
    std::fs::write(w.join("s.toml"), sweep("onslurm", "[0, 1]")).unwrap();
    let runs = ["lr-0.003_seed0", "lr-0.003_seed1"];

    // A task that cannot start (its sweep file is gone) fails with the reason in its log and in
    // its run's status, which the report lists.
    std::fs::write(w.join("gone.toml"), sweep("gone", "[0]")).unwrap();
    let (code, out) = cluster.sinklab(w, &["sweep", "gone.toml", "--emit", "slurm"]);
    assert_eq!(code, 0, "{out}");
    std::fs::remove_file(w.join("gone.toml")).unwrap();
    let gone = stdout_of(
        cluster
            .cmd("sbatch")
            .arg("--parsable")
            .arg(w.join("sweeps/gone/slurm.sh")),
    );

    // `sinklab sweep s.toml --submit --cpus-per-task 1`, with further arguments
    let submit = |extra: &[&str]| {
        let mut args = vec!["sweep", "s.toml", "--submit", "--cpus-per-task", "1"];
        args.extend_from_slice(extra);
        cluster.sinklab(w, &args)
    };
    // 1. Submit: the array over both runs and the report after it.
    let t_submit = Instant::now();
    let (code, out) = submit(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("--partition=debug  (partition, from the sweep file)")
            && out.contains("--cpus-per-task=1  (CPUs per task, from the command line)")
            && out.contains("not set, so the cluster's default applies: account, GPUs per task"),
        "the cluster options and their sources: {out}"
    );
    let array = job_id(&out, "submitted job array ");
    let report = job_id(&out, "submitted report job ");
    let jobs = cluster.wait_jobs(&[&array, &report, &gone]);
    let t_sweep = t_submit.elapsed();
    let dir = w.join("sweeps/onslurm");
    let slurm_log = |d: &Path, name: &str| tail(&d.join("logs").join(name), 40);
    for t in 0..2 {
        let j = &jobs[&format!("{array}_{t}")];
        assert_eq!(
            (j.state.as_str(), j.exit_code.as_str()),
            ("COMPLETED", "0:0"),
            "task {t}: {j:?}\n{}",
            slurm_log(&dir, &format!("slurm-{array}_{t}.out"))
        );
    }
    for (i, run) in runs.iter().enumerate() {
        let s = sinklab::sweep::read_status(&dir, run).unwrap();
        assert_eq!((s.state.as_str(), s.attempts), ("done", 1), "{run}: {s:?}");
        assert_eq!(
            checkpoint_steps(&dir.join(run)).last(),
            Some(&STEPS),
            "{run}"
        );
        let task_log =
            std::fs::read_to_string(dir.join(format!("logs/slurm-{array}_{i}.out"))).unwrap();
        assert!(task_log.contains("1 done, 0 skipped"), "{task_log}");
    }
    // The report: written by the dependent job, which started after the last task ended.
    let r = &jobs[&report];
    assert_eq!(
        (r.state.as_str(), r.exit_code.as_str()),
        ("COMPLETED", "0:0"),
        "{r:?}"
    );
    let last_end = (0..2)
        .map(|t| jobs[&format!("{array}_{t}")].end.clone())
        .max()
        .unwrap();
    assert!(
        r.start >= last_end,
        "the report started before the array ended: {jobs:?}"
    );
    let report_log = slurm_log(&dir, &format!("slurm-report-{report}.out"));
    assert!(
        report_log.contains("wrote") && report_log.contains("report.md"),
        "{report_log}"
    );
    let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(md.contains("| 0.003 | 2/2 |"), "{md}");
    // The task that could not start.
    let g = &jobs[&format!("{gone}_0")];
    assert_eq!(
        (g.state.as_str(), g.exit_code.as_str()),
        ("FAILED", "1:0"),
        "{g:?}"
    );
    let gone_log = slurm_log(&w.join("sweeps/gone"), &format!("slurm-{gone}_0.out"));
    assert!(
        gone_log.contains("cannot start: the sweep file gone.toml is missing"),
        "{gone_log}"
    );
    let s = sinklab::sweep::read_status(&w.join("sweeps/gone"), "lr-0.003_seed0").unwrap();
    assert_eq!(s.state, "failed");
    assert!(s.error.unwrap().contains("could not start"));

    // 2. Submitting again skips everything: --submit submits nothing, and the script submitted
    // by hand runs tasks that skip their finished runs.
    let (code, out) = submit(&[]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("has finished (2 runs); nothing submitted"),
        "{out}"
    );
    let again = stdout_of(
        cluster
            .cmd("sbatch")
            .arg("--parsable")
            .arg(dir.join("slurm.sh")),
    );
    let jobs_again = cluster.wait_jobs(&[&again]);
    for t in 0..2 {
        let j = &jobs_again[&format!("{again}_{t}")];
        assert_eq!(j.state, "COMPLETED", "{j:?}");
        let log = slurm_log(&dir, &format!("slurm-{again}_{t}.out"));
        assert!(log.contains("0 done, 1 skipped"), "{log}");
    }
    for run in runs {
        assert_eq!(sinklab::sweep::read_status(&dir, run).unwrap().attempts, 1);
    }

    // 3. A task cancelled mid-run (scancel: SIGTERM, SIGKILL after KillWait) checkpoints; the
    // next submission resumes it and it ends with the uninterrupted run's numbers.
    let (code, out) = submit(&["--out-dir", "cancel"]);
    assert_eq!(code, 0, "{out}");
    let (array_c, report_c) = (
        job_id(&out, "submitted job array "),
        job_id(&out, "submitted report job "),
    );
    // While they are queued or running, the sweep is not submitted a second time.
    let (code, again) = cluster.sinklab(w, &["sweep", "s.toml", "--submit", "--out-dir", "cancel"]);
    assert_eq!(code, 1, "{again}");
    assert!(again.contains("still queued or running"), "{again}");
    let cdir = w.join("cancel/onslurm");
    let run_log = cdir.join("logs").join(format!("{}.log", runs[0]));
    cluster.wait_for(
        "run 0 to train",
        || std::fs::read_to_string(&run_log).is_ok_and(|l| l.contains("\nstep ")),
        &["slurmd.log"],
    );
    let t_cancel = Instant::now();
    let status = cluster
        .cmd("scancel")
        .arg(format!("{array_c}_0"))
        .status()
        .unwrap();
    assert!(status.success());
    let jobs_c = cluster.wait_jobs(&[&array_c, &report_c]);
    let t_cancelled = t_cancel.elapsed();
    let c0 = &jobs_c[&format!("{array_c}_0")];
    assert_eq!(c0.state, "CANCELLED", "{jobs_c:?}");
    assert_eq!(
        jobs_c[&format!("{array_c}_1")].state,
        "COMPLETED",
        "{jobs_c:?}"
    );
    assert_eq!(jobs_c[&report_c].state, "COMPLETED", "{jobs_c:?}");
    let s = sinklab::sweep::read_status(&cdir, runs[0]).unwrap();
    assert_eq!(
        (s.state.as_str(), s.exit_code),
        ("interrupted", Some(130)),
        "{s:?}\n{}",
        tail(&run_log, 10)
    );
    let ckpts = checkpoint_steps(&cdir.join(runs[0]));
    let stopped = *ckpts.last().expect("a checkpoint written on SIGTERM");
    assert!(
        stopped > 0 && stopped < STEPS,
        "the run was cancelled mid-run, not after its last step: {ckpts:?}"
    );
    let log = std::fs::read_to_string(&run_log).unwrap();
    assert!(
        log.contains(&format!(
            "stopped after step {stopped} of {STEPS} (interrupted)"
        )),
        "{log}"
    );
    let md = std::fs::read_to_string(cdir.join("report.md")).unwrap();
    assert!(md.contains(&format!("`{}`: interrupted", runs[0])), "{md}");
    let (code, out) = submit(&["--out-dir", "cancel"]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("1 of 2 runs (1 finished, skipped), tasks 0;"),
        "{out}"
    );
    let (array_r, report_r) = (
        job_id(&out, "submitted job array "),
        job_id(&out, "submitted report job "),
    );
    let jobs_r = cluster.wait_jobs(&[&array_r, &report_r]);
    assert!(
        jobs_r.values().all(|j| j.state == "COMPLETED"),
        "{jobs_r:?}\n{}",
        tail(&run_log, 10)
    );
    let s = sinklab::sweep::read_status(&cdir, runs[0]).unwrap();
    assert_eq!((s.state.as_str(), s.attempts), ("done", 2), "{s:?}");
    assert!(
        std::fs::read_to_string(&run_log).unwrap().contains("resum"),
        "the second attempt resumed from the checkpoint"
    );
    for run in runs {
        let (a, b) = (
            logged_values(&dir.join(run)),
            logged_values(&cdir.join(run)),
        );
        assert!(a.len() > 1000, "{run}: {} values", a.len());
        assert_eq!(
            a, b,
            "{run}: the cancelled-and-resumed sweep differs from the first"
        );
    }
    let md = std::fs::read_to_string(cdir.join("report.md")).unwrap();
    assert!(md.contains("| 0.003 | 2/2 |"), "{md}");

    let describe = |jobs: &BTreeMap<String, Job>| {
        jobs.iter()
            .map(|(id, j)| format!("{id} {} {} {}", j.state, j.exit_code, j.run_time))
            .collect::<Vec<_>>()
            .join("; ")
    };
    eprintln!(
        "SLURM end to end: cluster up in {:.1} s; sweep submitted and reported in {:.1} s ({}); \
         re-submission: {}; scancel of {array_c}_0 after step {stopped}, jobs ended {:.1} s later \
         ({}); resubmitted: {}; total {:.1} s",
        t_cluster.as_secs_f64(),
        t_sweep.as_secs_f64(),
        describe(&jobs),
        describe(&jobs_again),
        t_cancelled.as_secs_f64(),
        describe(&jobs_c),
        describe(&jobs_r),
        t_start.elapsed().as_secs_f64()
    );
}
