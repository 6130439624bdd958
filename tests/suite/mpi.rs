//! One run over several MPI ranks (`crate::dist`, docs/distributed.md). Built with the `mpi`
//! feature (`cargo test --release --features mpi --test suite mpi::`, which scripts/test.sh
//! runs after the default suite), the tests start real ranks with OpenMPI's `mpirun` over
//! loopback, and with SLURM's `srun` on the test cluster of `crate::slurm`: 2 ranks against 1
//! process on the natural-text model and on attention variants, the weights check at every
//! checkpoint (and a rank made to diverge), a rank killed mid-run and the run resumed with 2
//! ranks and with 1, a 2-rank run of a sweep submitted to SLURM. Without the feature, a binary
//! started as one of several ranks refuses.
//!
//! OpenMPI as root needs `--allow-run-as-root` (here the two `OMPI_ALLOW_RUN_AS_ROOT*`
//! variables), and in containers `OMPI_MCA_btl_vader_single_copy_mechanism=none`
//! ([`mpi_env`]).

use crate::common;
use std::path::Path;
use std::process::Command;

/// `sinklab ARGS` in `cwd` with the environment of one rank of a launcher that is not there:
/// what a sinklab started by `mpirun -np 2` sees.
fn as_fake_rank(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(args)
        .envs(env.iter().copied())
        .current_dir(cwd)
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

/// Commands other than `train` (and `bench --allreduce`) refuse to run once per rank.
#[test]
fn other_commands_refuse_to_run_as_several_ranks() {
    let w = tempfile::tempdir().unwrap();
    common::tiny_experiment(w.path(), "t", &[]);
    let (code, out) = as_fake_rank(
        w.path(),
        &[("PMI_SIZE", "2"), ("PMI_RANK", "1")],
        &["check", "t.toml"],
    );
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("rank 1 of 2 started by mpirun (Hydra): only `sinklab train`"),
        "{out}"
    );
}

/// Without the `mpi` feature, `mpirun -np 2 sinklab train` would train the run twice into one
/// directory: each copy refuses, saying how to build the feature, before writing anything.
#[cfg(not(feature = "mpi"))]
#[test]
fn without_the_mpi_feature_a_launch_of_several_ranks_is_refused() {
    let w = tempfile::tempdir().unwrap();
    common::tiny_experiment(w.path(), "t", &[]);
    let env = [
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_RANK", "0"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "0"),
    ];
    let (code, out) = as_fake_rank(w.path(), &env, &["train", "t.toml"]);
    assert_eq!(code, 1, "{out}");
    for needle in [
        "rank 0 of 2 (mpirun (OpenMPI) set OMPI_COMM_WORLD_SIZE=2)",
        "built without the `mpi` cargo feature",
        "--features mpi",
    ] {
        assert!(out.contains(needle), "{needle}: {out}");
    }
    assert!(!w.path().join("runs").exists(), "nothing is written");
}

#[cfg(feature = "mpi")]
mod with_mpi {
    use crate::common;
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    /// OpenMPI's settings for this machine: as root (`--allow-run-as-root`), and without the
    /// single-copy (CMA) transport, which containers forbid.
    pub(crate) fn mpi_env(cmd: &mut Command) -> &mut Command {
        cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .env("OMPI_MCA_btl_vader_single_copy_mechanism", "none")
    }

    /// `mpirun -np N sinklab ARGS` in `cwd` (`--oversubscribe`: a CI machine with one core
    /// still runs 2 ranks).
    fn mpirun(np: usize, cwd: &Path) -> Command {
        let mut c = Command::new("mpirun");
        mpi_env(&mut c)
            .args(["-np", &np.to_string(), "--oversubscribe"])
            .arg(env!("CARGO_BIN_EXE_sinklab"))
            .current_dir(cwd);
        c
    }

    fn output(cmd: &mut Command) -> (i32, String) {
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("{cmd:?}: {e} (mpirun: apt-get install openmpi-bin)"));
        (
            out.status.code().unwrap_or(-1),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        )
    }

    /// `sinklab train ARGS` in `cwd`: one process, or `np` ranks.
    fn train(np: usize, cwd: &Path, args: &[&str]) -> (i32, String, f64) {
        let t0 = Instant::now();
        let (code, out) = if np == 1 {
            common::sinklab_output(Some(cwd), &[&["train"], args].concat())
        } else {
            output(mpirun(np, cwd).arg("train").args(args))
        };
        (code, out, t0.elapsed().as_secs_f64())
    }

    /// The largest differences between two runs' logged scalars (every step and tag but the
    /// throughput): relative on the losses (`train/loss`, `val/*`), absolute elsewhere.
    #[derive(Debug)]
    struct Diff {
        values: usize,
        loss_rel: f64,
        other_abs: f64,
        sink_abs: f64,
    }

    fn diff(a: &Path, b: &Path) -> Diff {
        let load = |p: &Path| -> BTreeMap<(u64, String), f64> {
            common::read_metrics(p)
                .into_iter()
                .flat_map(|(s, m)| {
                    m.into_iter()
                        .filter(|(k, _)| k != "train/tokens_per_s")
                        .map(move |(k, v)| ((s, k), v.as_f64().unwrap()))
                })
                .collect()
        };
        let (x, y) = (load(a), load(b));
        let keys: Vec<_> = x.keys().collect();
        assert_eq!(
            keys,
            y.keys().collect::<Vec<_>>(),
            "{} and {} log different scalars",
            a.display(),
            b.display()
        );
        let mut d = Diff {
            values: x.len(),
            loss_rel: 0.0,
            other_abs: 0.0,
            sink_abs: 0.0,
        };
        for (k, u) in &x {
            let v = y[k];
            if k.1 == "train/loss" || k.1.starts_with("val/") {
                d.loss_rel = d.loss_rel.max((u - v).abs() / u.abs().max(1e-12));
            } else if k.1.starts_with("sink/") {
                d.sink_abs = d.sink_abs.max((u - v).abs());
            } else {
                d.other_abs = d.other_abs.max((u - v).abs() / u.abs().max(1.0));
            }
        }
        d
    }

    /// The tolerances of docs/distributed.md: losses to 1e-5 relative, sink metrics to 1e-4,
    /// every other scalar to 1e-4 (relative above 1).
    fn assert_same_run(a: &Path, b: &Path, what: &str) -> Diff {
        let d = diff(a, b);
        assert!(d.values > 20, "{what}: {d:?}");
        assert!(
            d.loss_rel <= 1e-5 && d.sink_abs <= 1e-4 && d.other_abs <= 1e-4,
            "{what}: {d:?}"
        );
        eprintln!("{what}: {d:?}");
        d
    }

    /// `"KEY=VALUE"` arguments as `--set` pairs.
    fn sets(pairs: &[String]) -> Vec<String> {
        pairs
            .iter()
            .flat_map(|p| ["--set".to_string(), p.clone()])
            .collect()
    }

    /// `(step, sha256 prefix)` of every "weights identical" line rank 0 logged.
    fn identical_lines(out: &str) -> Vec<(u64, String)> {
        out.lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("step ")?;
                let (step, rest) =
                    rest.split_once(": weights identical on all 2 ranks (sha256 ")?;
                Some((step.parse().ok()?, rest.trim_end_matches("…)").to_string()))
            })
            .collect()
    }

    /// The natural-text model (experiments/natural_text.toml, 1.4M parameters, 2 micro-batches
    /// per step) for 100 steps: 2 ranks log what 1 process logs (on this 2-core machine bit for
    /// bit: one micro-batch per rank, each on one thread as in one process, and the sum of two
    /// is one addition), rank 0 alone writes, every checkpoint's weights are compared across
    /// the ranks and are the ones written.
    #[test]
    fn two_ranks_train_the_natural_text_model_like_one_process() {
        let w = tempfile::tempdir().unwrap();
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/natural_text.toml");
        let file = file.to_str().unwrap();
        let base = sets(&[
            "train.steps=100".into(),
            "train.checkpoint_every=25".into(),
            "train.keep_checkpoints=10".into(),
            format!("run.out_dir=\"{}\"", w.path().join("runs").display()),
            format!("data.cache_dir=\"{}\"", w.path().join("cache").display()),
        ]);
        let args = |name: &str| -> Vec<String> {
            let mut a = vec![file.to_string(), "--quiet".into()];
            a.extend(base.iter().cloned());
            a.extend(sets(&[format!("run.name=\"{name}\"")]));
            a
        };
        let (a1, a2) = (args("one"), args("two"));
        fn refs(v: &[String]) -> Vec<&str> {
            v.iter().map(String::as_str).collect()
        }
        let (code, out1, t1) = train(1, w.path(), &refs(&a1));
        assert_eq!(code, 0, "{out1}");
        let (code, out2, t2) = train(2, w.path(), &refs(&a2));
        assert_eq!(code, 0, "{out2}");
        assert!(
            out2.contains("2 micro-batches of 8 sequences per step over 2 MPI ranks"),
            "{out2}"
        );
        // rank 0 speaks for the run: one result line, not two
        assert_eq!(out2.matches("done: 100 steps").count(), 1, "{out2}");
        let (one, two) = (w.path().join("runs/one"), w.path().join("runs/two"));
        assert_same_run(&one, &two, "natural text, 2 ranks vs 1 process");
        // The weights check at the start and at every checkpoint, and its digest is that of the
        // weights rank 0 wrote.
        let checks = identical_lines(&out2);
        let steps: Vec<u64> = checks.iter().map(|c| c.0).collect();
        assert_eq!(steps, [0, 25, 50, 75, 100], "{out2}");
        let device = common::device();
        for (step, digest) in &checks[1..] {
            let ckpt = sinklab::checkpoint::step_dir(&two, *step);
            let (_, model, _, _) = sinklab::run::load_checkpoint(&ckpt, &device).unwrap();
            assert!(
                sinklab::dist::weights_sha256(&model).starts_with(digest.as_str()),
                "step {step}"
            );
        }
        // One writer: one event file; the provenance names both ranks.
        let events = std::fs::read_dir(&two)
            .unwrap()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().starts_with("events.out"))
            .count();
        assert_eq!(events, 1);
        let prov = common::read_json(&two.join("provenance.json"));
        assert_eq!(prov["world_size"], 2, "{prov}");
        let ranks = prov["ranks"].as_array().unwrap();
        assert_eq!(ranks.len(), 2, "{prov}");
        for (r, info) in ranks.iter().enumerate() {
            assert_eq!(info["rank"], r as u64);
            assert!(!info["host"].as_str().unwrap().is_empty());
            assert!(
                info["device"].as_str().unwrap().starts_with("flex ("),
                "{info}"
            );
        }
        assert_eq!(
            common::read_json(&one.join("provenance.json"))["world_size"],
            1
        );
        eprintln!("natural text, 100 steps: 1 process {t1:.1} s, 2 ranks {t2:.1} s");
    }

    /// Attention variants (a learned sink logit, a learned k*, v* slot) with 4 micro-batches
    /// per step, 2 per rank: the ranks' sums regroup the additions, so the runs agree to f32
    /// rounding, not bit for bit. The kv-bias run also sums in buckets of 1000 values (1 f32
    /// `MPI_Allreduce` per bucket).
    #[test]
    fn two_ranks_train_attention_variants_like_one_process() {
        for (slot, bucket) in [("sink_logit", None), ("kv_bias", Some("1000"))] {
            let w = tempfile::tempdir().unwrap();
            common::tiny_experiment(w.path(), "v", &[]);
            let mut args: Vec<String> = vec!["v.toml".into(), "--quiet".into()];
            args.extend(sets(&[
                format!("model.attention.slot={{ kind = \"{slot}\" }}"),
                "train.steps=100".into(),
                "train.batch_tokens=512".into(),
                "train.checkpoint_every=50".into(),
                "train.eval_every=25".into(),
                "metrics.every=25".into(),
            ]));
            let with = |name: &str| {
                let mut a: Vec<String> = args.clone();
                a.extend(sets(&[format!("run.name=\"{name}\"")]));
                a
            };
            let a1 = with("one");
            let refs1: Vec<&str> = a1.iter().map(String::as_str).collect();
            let (code, out, _) = train(1, w.path(), &refs1);
            assert_eq!(code, 0, "{out}");
            let a2 = with("two");
            let refs2: Vec<&str> = a2.iter().map(String::as_str).collect();
            let mut cmd = mpirun(2, w.path());
            cmd.arg("train").args(&refs2);
            if let Some(b) = bucket {
                cmd.env(sinklab::dist::BUCKET_VAR, b);
            }
            let (code, out) = output(&mut cmd);
            assert_eq!(code, 0, "{out}");
            assert!(
                out.contains(
                    "4 micro-batches of 4 sequences per step over 2 MPI ranks (2 on rank 0)"
                ),
                "{out}"
            );
            assert_eq!(identical_lines(&out).len(), 3, "{out}");
            let d = assert_same_run(
                &w.path().join("runs/one"),
                &w.path().join("runs/two"),
                &format!("{slot}, 2 ranks vs 1 process"),
            );
            assert!(d.values > 500, "{d:?}");
        }
    }

    /// A rank whose weights leave the others' (the test-only fault `SINKLAB_TEST_DIVERGE=1:3`
    /// adds 1e-3 to one gradient value on rank 1 at step 3) is caught at the next checkpoint:
    /// the run stops naming both ranks, and writes no checkpoint of the diverged weights.
    #[test]
    fn a_rank_whose_weights_differ_stops_the_run_at_the_next_checkpoint() {
        let w = tempfile::tempdir().unwrap();
        common::tiny_experiment(w.path(), "d", &[]);
        let mut cmd = mpirun(2, w.path());
        cmd.env("SINKLAB_TEST_DIVERGE", "1:3").args([
            "train",
            "d.toml",
            "--quiet",
            "--set",
            "train.checkpoint_every=2",
        ]);
        let (code, out) = output(&mut cmd);
        assert_ne!(code, 0, "{out}");
        assert!(
            out.contains("the weights differ across ranks after step 4: rank 0 has sha256 ")
                && out.contains(", rank 1 has "),
            "{out}"
        );
        // reported once (rank 0), not once per rank
        assert_eq!(out.matches("the weights differ").count(), 1, "{out}");
        let run = w.path().join("runs/d");
        let steps: Vec<u64> = sinklab::checkpoint::list_checkpoints(&run)
            .into_iter()
            .map(|(s, d)| {
                sinklab::checkpoint::verify_checkpoint(&d).unwrap();
                s
            })
            .collect();
        assert_eq!(steps, [2], "{out}");
    }

    /// Process ids of `parent`'s children whose environment holds `var=value`.
    fn child_with_env(parent: u32, var: &str, value: &str) -> Option<u32> {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            let ppid: u32 = stat.rsplit(") ").next()?.split(' ').nth(1)?.parse().ok()?;
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let want = format!("{var}={value}");
            (ppid == parent && env.split(|&b| b == 0).any(|kv| kv == want.as_bytes()))
                .then_some(pid)
        })
    }

    fn copy_dir(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                copy_dir(&p, &to.join(e.file_name()));
            } else {
                std::fs::copy(&p, to.join(e.file_name())).unwrap();
            }
        }
    }

    /// A tiny experiment with relative run and cache directories, in `dir`.
    fn relative_tiny(dir: &Path, name: &str) {
        common::tiny_experiment(dir, name, &[]);
        let p = dir.join(format!("{name}.toml"));
        let text = std::fs::read_to_string(&p)
            .unwrap()
            .replace(&format!("{}/", dir.display()), "");
        std::fs::write(p, text).unwrap();
    }

    /// `kill -9` of rank 1 mid-run ends the job within seconds (mpirun names the rank), the
    /// checkpoints written before stay intact, and `--resume` with 2 ranks and with 1 gives the
    /// uninterrupted run's numbers.
    #[test]
    fn a_killed_rank_ends_the_job_and_the_run_resumes_with_two_ranks_or_one() {
        let w = tempfile::tempdir().unwrap();
        let steps = 600u64;
        let dirs: Vec<PathBuf> = ["ref", "killed", "res2", "res1"]
            .iter()
            .map(|d| w.path().join(d))
            .collect();
        for d in &dirs {
            std::fs::create_dir_all(d).unwrap();
            relative_tiny(d, "k");
        }
        let set = sets(&[
            format!("train.steps={steps}"),
            "train.checkpoint_every=100".into(),
            "train.keep_checkpoints=10".into(),
            "train.eval_every=100".into(),
            "metrics.every=100".into(),
            "train.log_every=10".into(),
        ]);
        let mut args: Vec<&str> = vec!["k.toml", "--quiet"];
        args.extend(set.iter().map(String::as_str));
        let (code, out, t_ref) = train(1, &dirs[0], &args);
        assert_eq!(code, 0, "{out}");

        // 2 ranks, rank 1 killed once the first checkpoint is there
        let log = dirs[1].join("mpirun.log");
        let mut job = mpirun(2, &dirs[1])
            .arg("train")
            .args(&args)
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(dirs[1].join("mpirun.err")).unwrap())
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        let run = dirs[1].join("runs/k");
        let t0 = Instant::now();
        while !sinklab::checkpoint::step_dir(&run, 100).exists() {
            assert!(
                t0.elapsed() < Duration::from_secs(300),
                "no checkpoint at step 100"
            );
            assert!(job.try_wait().unwrap().is_none(), "the run ended early");
            std::thread::sleep(Duration::from_millis(20));
        }
        let rank1 = child_with_env(job.id(), "OMPI_COMM_WORLD_RANK", "1").expect("rank 1's pid");
        // SAFETY: signalling a process this test started (a rank of its mpirun), by its id.
        unsafe {
            libc::kill(rank1 as libc::pid_t, libc::SIGKILL);
        }
        let killed_at = Instant::now();
        let status = loop {
            if let Some(s) = job.try_wait().unwrap() {
                break s;
            }
            assert!(
                killed_at.elapsed() < Duration::from_secs(60),
                "the job did not end within 60 s of a rank's death"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        let t_exit = killed_at.elapsed().as_secs_f64();
        let said = format!(
            "{}{}",
            std::fs::read_to_string(&log).unwrap(),
            std::fs::read_to_string(dirs[1].join("mpirun.err")).unwrap()
        );
        assert!(!status.success(), "{said}");
        assert!(
            said.contains("process rank 1 "),
            "mpirun names the rank: {said}"
        );
        assert!(t_exit < 20.0, "ended {t_exit:.1} s after the kill");
        let ckpts = sinklab::checkpoint::list_checkpoints(&run);
        let newest = ckpts.last().unwrap().0;
        assert!((100..steps).contains(&newest), "{ckpts:?}");
        for (_, d) in &ckpts {
            sinklab::checkpoint::verify_checkpoint(d).unwrap();
        }

        // Resumed with 2 ranks and with 1, from copies of the killed run.
        let mut resume = args.clone();
        resume.push("--resume");
        for (np, d) in [(2, &dirs[2]), (1, &dirs[3])] {
            copy_dir(&dirs[1].join("runs"), &d.join("runs"));
            let (code, out, _) = train(np, d, &resume);
            assert_eq!(code, 0, "{np} rank(s): {out}");
            assert!(out.contains(&format!("from step {newest}")), "{out}");
            assert_same_run(
                &dirs[0].join("runs/k"),
                &d.join("runs/k"),
                &format!("killed at step >= {newest}, resumed with {np} rank(s), vs uninterrupted"),
            );
        }
        eprintln!(
            "kill -9 of rank 1 after step {newest}: mpirun exited {t_exit:.2} s later \
             ({status}); uninterrupted run {t_ref:.1} s"
        );
    }

    /// The process id of the sinklab rank `rank` of an srun step of array job `array`.
    fn srun_rank(array: &str, rank: usize) -> Option<u32> {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
            let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            let has = |kv: String| env.split(|&b| b == 0).any(|x| x == kv.as_bytes());
            (comm.trim() == "sinklab"
                && has(format!("SLURM_ARRAY_JOB_ID={array}"))
                && has(format!("SLURM_PROCID={rank}"))
                && has("SLURM_STEP_NUM_TASKS=2".into()))
            .then_some(pid)
        })
    }

    /// A sweep with `[slurm] ranks = 2` submitted to the test cluster: the task starts its run
    /// as `srun --mpi=pmix --ntasks=2`, the run finishes with two ranks, the report is written,
    /// and the numbers are those of one process. Then a rank killed under srun: the step ends
    /// (srun names the task) within the cluster's KillWait, the checkpoints stay intact, and the
    /// next submission resumes the run to the uninterrupted numbers.
    #[test]
    fn a_two_rank_run_of_a_sweep_finishes_on_slurm_and_resumes_after_a_rank_dies() {
        use crate::slurm::{Cluster, KILL_WAIT, job_id, tail};
        let cluster = Cluster::start();
        let w = tempfile::tempdir().unwrap();
        let w = w.path();
        common::tiny_experiment(w, "tinybase", &[]);
        let sweep = |name: &str, steps: u64| {
            format!(
                "base = \"tinybase.toml\"\nname = \"{name}\"\nout_dir = \"sweeps\"\nseeds = [0]\n\
                 [set]\ntrain = {{ steps = {steps}, checkpoint_every = 100, eval_every = 50 }}\n\
                 metrics = {{ every = 50 }}\n[axes]\n\"optim.lr\" = [3e-3]\n[slurm]\n\
                 partition = \"debug\"\ntime = \"10:00\"\nranks = 2\ncpus_per_task = 1\n"
            )
        };
        std::fs::write(w.join("s.toml"), sweep("ranks", 200)).unwrap();
        std::fs::write(w.join("k.toml"), sweep("ranks_kill", 1500)).unwrap();
        let submit = |file: &str| {
            output(
                mpi_env(&mut Command::new(env!("CARGO_BIN_EXE_sinklab")))
                    .args(["sweep", file, "--submit"])
                    .current_dir(w)
                    .env("SLURM_CONF", &cluster.conf),
            )
        };
        // The same plan as one process, for the numbers.
        let one_process = |dir: &Path, run: &str| {
            let plan = dir.join("plans").join(format!("{run}.toml"));
            let out_dir = format!("run.out_dir=\"{}\"", dir.join("one").display());
            let (code, out) = common::sinklab_output(
                Some(w),
                &[
                    "train",
                    plan.to_str().unwrap(),
                    "--quiet",
                    "--set",
                    &out_dir,
                ],
            );
            assert_eq!(code, 0, "{out}");
            dir.join("one").join(run)
        };
        let (code, out) = submit("s.toml");
        assert_eq!(code, 0, "{out}");
        for needle in [
            "#SBATCH --ntasks=2  (MPI ranks per run, from the sweep file)",
            "each run: srun --mpi=pmix --ntasks=2 --kill-on-bad-exit=1",
        ] {
            assert!(out.contains(needle), "{needle}: {out}");
        }
        let dir = w.join("sweeps/ranks");
        let script = std::fs::read_to_string(dir.join("slurm.sh")).unwrap();
        assert!(
            script.contains("--index \"$SLURM_ARRAY_TASK_ID\" --ranks 2 --mpi pmix"),
            "{script}"
        );
        let (array, report) = (
            job_id(&out, "submitted job array "),
            job_id(&out, "submitted report job "),
        );
        let jobs = cluster.wait_jobs(&[&array, &report]);
        let run = "lr-0.003_seed0";
        let task_log = tail(&dir.join(format!("logs/slurm-{array}_0.out")), 30);
        let run_log = tail(&dir.join(format!("logs/{run}.log")), 40);
        let j = &jobs[&format!("{array}_0")];
        assert_eq!(
            (j.state.as_str(), j.exit_code.as_str()),
            ("COMPLETED", "0:0"),
            "{task_log}\n{run_log}"
        );
        assert_eq!(jobs[&report].state, "COMPLETED", "{jobs:?}");
        let s = sinklab::sweep::read_status(&dir, run).unwrap();
        assert_eq!(s.state, "done", "{s:?}\n{run_log}");
        assert!(run_log.contains("over 2 MPI ranks"), "{run_log}");
        assert_eq!(identical_lines(&run_log).len(), 3, "{run_log}");
        let prov = common::read_json(&dir.join(run).join("provenance.json"));
        assert_eq!(prov["world_size"], 2, "{prov}");
        let md = std::fs::read_to_string(dir.join("report.md")).unwrap();
        assert!(md.contains("| 0.003 | 1/1 |"), "{md}");
        assert_same_run(
            &one_process(&dir, run),
            &dir.join(run),
            "sweep run on SLURM, 2 ranks vs 1 process",
        );

        // kill -9 of rank 1 under srun
        let (code, out) = submit("k.toml");
        assert_eq!(code, 0, "{out}");
        let array = job_id(&out, "submitted job array ");
        let kdir = w.join("sweeps/ranks_kill");
        let krun = kdir.join(run);
        cluster.wait_for(
            "the first checkpoint",
            || sinklab::checkpoint::step_dir(&krun, 100).exists(),
            &["slurmd.log"],
        );
        let pid = srun_rank(&array, 1).expect("rank 1 of the srun step");
        // SAFETY: signalling a rank of a job this test submitted, by its id.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
        let t0 = Instant::now();
        let jobs = cluster.wait_jobs(&[&array]);
        let t_end = t0.elapsed().as_secs_f64();
        let klog = std::fs::read_to_string(kdir.join(format!("logs/{run}.log"))).unwrap();
        assert!(
            klog.contains("task 1: Killed"),
            "srun names the rank: {klog}"
        );
        assert!(
            t_end < (KILL_WAIT + 20) as f64,
            "the job ended {t_end:.1} s after the kill: {jobs:?}"
        );
        let s = sinklab::sweep::read_status(&kdir, run).unwrap();
        assert_eq!(s.state, "failed", "{s:?}");
        let ckpts = sinklab::checkpoint::list_checkpoints(&krun);
        let newest = ckpts.last().unwrap().0;
        assert!((100..1500).contains(&newest), "{ckpts:?}");
        for (_, d) in &ckpts {
            sinklab::checkpoint::verify_checkpoint(d).unwrap();
        }
        let (code, out) = submit("k.toml");
        assert_eq!(code, 0, "{out}");
        let again = job_id(&out, "submitted job array ");
        let jobs = cluster.wait_jobs(&[&again]);
        let s = sinklab::sweep::read_status(&kdir, run).unwrap();
        assert_eq!(
            (s.state.as_str(), s.attempts),
            ("done", 2),
            "{s:?} {jobs:?}"
        );
        assert_same_run(
            &one_process(&kdir, run),
            &krun,
            "sweep run on SLURM, rank 1 killed after step >= 100, resubmitted, vs 1 process",
        );
        eprintln!(
            "srun: kill -9 of rank 1 after step {newest}: the job ended {t_end:.1} s later \
             (KillWait {KILL_WAIT} s)"
        );
    }
}
