//! One writer per run directory (issue 28): a second process that would train, report into or
//! import over a directory that another process is writing stops at once, naming the holder;
//! the kernel releases the lock when the holder dies (SIGKILL); a start killed before its
//! first checkpoint never blocks the next start; a sweep launched twice at once trains each
//! run exactly once. Every metrics.jsonl afterwards holds each step once and equals a lone
//! run's.

use crate::common::{self, sinklab_output};
use sinklab::lock;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `sinklab` binary started in `cwd` with `args`, output captured.
fn spawn(cwd: &Path, args: &[&str]) -> Child {
    Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Exit code and stdout + stderr of a finished child.
fn finish(child: Child) -> (i32, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Wait (up to 120 s) until `cond` holds.
fn wait_for(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(120), "waited for {what}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The settings that make the tiny experiment long enough (a few seconds) for a second process
/// to meet the first.
const LONG: [&str; 5] = [
    "train.steps=400",
    "train.checkpoint_every=50",
    "train.eval_every=100",
    "train.log_every=1",
    "metrics.every=100",
];

/// A tiny experiment file `dir/NAME.toml`, and the command line that trains it with [`LONG`]
/// and `extra` as `--set` flags, then `flags`.
fn long_tiny(dir: &Path, name: &str, extra: &[&str], flags: &[&str]) -> Vec<String> {
    common::tiny_experiment(dir, name, &[]);
    let mut args = vec![
        "train".to_string(),
        dir.join(format!("{name}.toml")).display().to_string(),
    ];
    for s in LONG.iter().chain(extra) {
        args.push("--set".into());
        args.push(s.to_string());
    }
    args.extend(flags.iter().map(|f| f.to_string()));
    args
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// (step, scalars without the timing ones) of every record: what a lone run must reproduce.
fn records(run: &Path) -> Vec<(u64, Vec<(String, f64)>)> {
    common::read_metrics(run)
        .into_iter()
        .map(|(step, rec)| {
            let mut v: Vec<(String, f64)> = rec
                .into_iter()
                .filter(|(k, _)| k != "train/tokens_per_s")
                .map(|(k, v)| (k, v.as_f64().unwrap_or(f64::NAN)))
                .collect();
            v.sort_by(|a, b| a.0.cmp(&b.0));
            (step, v)
        })
        .collect()
}

/// Each (tag, step) once in a run's metrics.jsonl.
fn assert_each_step_once(run: &Path) {
    let mut seen = std::collections::HashSet::new();
    for (step, rec) in records(run) {
        for (tag, _) in rec {
            assert!(
                seen.insert((tag.clone(), step)),
                "{}: {tag} at step {step} twice",
                run.display()
            );
        }
    }
    assert!(!seen.is_empty(), "{}: no records", run.display());
}

#[test]
fn a_second_trainer_stops_at_once_naming_the_first_and_the_run_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("runs/shared");
    let first = spawn(
        dir.path(),
        &strs(&long_tiny(dir.path(), "shared", &[], &["--quiet"])),
    );
    wait_for("the first trainer's lock", || lock::is_held(&run));
    // The scenario: the same experiment with --resume in a second terminal.
    let t0 = Instant::now();
    let again = long_tiny(dir.path(), "shared", &[], &["--resume", "--quiet"]);
    let (code, out) = sinklab_output(Some(dir.path()), &strs(&again));
    let waited = t0.elapsed();
    assert_eq!(code, lock::EXIT_BUSY, "{out}");
    assert!(
        out.contains(&format!("pid {}", first.id()))
            && out.contains("is in use by another sinklab process")
            && out.contains("train")
            && out.contains(&lock::hostname())
            && out.contains("UTC"),
        "{out}"
    );
    assert!(waited < Duration::from_secs(20), "took {waited:?}");
    // A fresh start and a report are writers too.
    let fresh = long_tiny(dir.path(), "shared", &[], &[]);
    let (code, out) = sinklab_output(Some(dir.path()), &strs(&fresh));
    assert_eq!(code, lock::EXIT_BUSY, "{out}");
    let (code, out) = sinklab_output(Some(dir.path()), &["report", run.to_str().unwrap()]);
    assert_eq!(code, lock::EXIT_BUSY, "{out}");
    assert!(out.contains("--out DIR"), "{out}");
    assert!(
        !run.join("plots").exists(),
        "the refused report wrote plots"
    );
    // ...while a report written elsewhere only reads the run
    wait_for("the first records", || {
        std::fs::metadata(run.join("metrics.jsonl")).is_ok_and(|m| m.len() > 0)
    });
    let elsewhere = dir.path().join("report_elsewhere");
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &[
            "report",
            run.to_str().unwrap(),
            "--out",
            elsewhere.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(elsewhere.join("loss.png").exists(), "{out}");
    assert!(!run.join("plots").exists());
    let (code, out) = finish(first);
    assert_eq!(code, 0, "{out}");
    assert!(!lock::is_held(&run), "the lock outlived its holder");
    assert_each_step_once(&run);
    // the same numbers as a run that trained alone
    let alone = long_tiny(dir.path(), "alone", &[], &["--quiet"]);
    let (code, out) = sinklab_output(Some(dir.path()), &strs(&alone));
    assert_eq!(code, 0, "{out}");
    assert_eq!(records(&run), records(&dir.path().join("runs/alone")));
    // once the first has finished the directory is free again (a report now works)
    let (code, out) = sinklab_output(Some(dir.path()), &["report", run.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn sigkill_releases_the_lock_and_resume_continues_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("runs/killed");
    let mut first = spawn(
        dir.path(),
        &strs(&long_tiny(dir.path(), "killed", &[], &["--quiet"])),
    );
    wait_for("the first checkpoint", || {
        !sinklab::checkpoint::list_checkpoints(&run).is_empty()
    });
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    assert!(!lock::is_held(&run), "a dead holder's lock is still held");
    let resume = long_tiny(dir.path(), "killed", &[], &["--resume", "--quiet"]);
    let (code, out) = sinklab_output(Some(dir.path()), &strs(&resume));
    assert_eq!(code, 0, "{out}");
    assert_each_step_once(&run);
    let alone = long_tiny(dir.path(), "alone", &[], &["--quiet"]);
    let (code, out) = sinklab_output(Some(dir.path()), &strs(&alone));
    assert_eq!(code, 0, "{out}");
    assert_eq!(records(&run), records(&dir.path().join("runs/alone")));
}

#[test]
fn a_start_killed_before_its_first_checkpoint_never_blocks_the_next() {
    let dir = tempfile::tempdir().unwrap();
    // A real SIGKILL as soon as the start has written its resolved.toml (long before the first
    // checkpoint at step 50).
    let big = long_tiny(
        dir.path(),
        "stub",
        &["model.d_model=64", "model.d_ff=128"],
        &[],
    );
    let run = dir.path().join("runs/stub");
    let mut first = spawn(dir.path(), &strs(&big));
    wait_for("resolved.toml", || run.join("resolved.toml").exists());
    first.kill().unwrap();
    first.wait().unwrap();
    assert!(run.join("resolved.toml").exists());
    assert!(sinklab::checkpoint::list_checkpoints(&run).is_empty());
    // A foreign file beside the stub: refused, and nothing is touched.
    std::fs::write(run.join("notes.txt"), "mine").unwrap();
    let (code, out) = sinklab_output(Some(dir.path()), &strs(&big));
    assert_ne!(code, 0, "{out}");
    assert!(
        out.contains("notes.txt") && out.contains("did not write"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(run.join("notes.txt")).unwrap(),
        "mine"
    );
    assert!(run.join("resolved.toml").exists());
    std::fs::remove_file(run.join("notes.txt")).unwrap();
    // The intended, smaller configuration: with --resume (nothing to resume) and without.
    for resume in [true, false] {
        let mut small = long_tiny(
            dir.path(),
            "stub",
            &["train.steps=6", "train.checkpoint_every=3"],
            &["--quiet"],
        );
        if resume {
            small.push("--resume".into());
        }
        let (code, out) = sinklab_output(Some(dir.path()), &strs(&small));
        assert_eq!(code, 0, "resume = {resume}: {out}");
        assert!(out.contains("never reached a checkpoint"), "{out}");
        let steps: Vec<u64> = common::series(&run, "train/loss")
            .iter()
            .map(|p| p.0)
            .collect();
        assert_eq!(steps, (1..=6).collect::<Vec<_>>(), "resume = {resume}");
        // make it a stub again for the next round
        std::fs::remove_dir_all(run.join("checkpoints")).unwrap();
    }
}

#[test]
fn a_foreign_file_in_an_otherwise_empty_run_directory_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(dir.path(), "notes", &[]);
    std::fs::create_dir_all(exp.run_dir()).unwrap();
    std::fs::write(exp.run_dir().join("notes.txt"), "mine").unwrap();
    for resume in [false, true] {
        let opts = sinklab::train::TrainOptions {
            resume,
            ..common::quiet()
        };
        let err = format!(
            "{:#}",
            sinklab::train::train(&exp, &opts, &mut |_| {})
                .err()
                .unwrap()
        );
        assert!(
            err.contains("notes.txt") && err.contains("did not write"),
            "{err}"
        );
    }
    let left: Vec<String> = std::fs::read_dir(exp.run_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(left, vec!["notes.txt".to_string()]);
}

#[test]
fn a_sweep_started_twice_at_once_trains_each_run_once() {
    let dir = tempfile::tempdir().unwrap();
    common::tiny_experiment(dir.path(), "tinybase", &[]);
    let sweep = dir.path().join("twice.toml");
    std::fs::write(
        &sweep,
        format!(
            "base = \"tinybase.toml\"\nname = \"twice\"\nout_dir = \"{}\"\nseeds = [0]\n\
             [set]\ntrain = {{ steps = 150, checkpoint_every = 50, eval_every = 100, log_every = 1 }}\n\
             metrics = {{ every = 100 }}\n[axes]\n\"optim.lr\" = [3e-3, 1e-3]\n",
            dir.path().join("sweeps").display()
        ),
    )
    .unwrap();
    let plan_dir = dir.path().join("sweeps/twice");
    // Two launchers: the second stops at once, naming the first.
    let first = spawn(dir.path(), &["sweep", sweep.to_str().unwrap()]);
    wait_for("the first launcher's lock", || lock::is_held(&plan_dir));
    let (code, out) = sinklab_output(Some(dir.path()), &["sweep", sweep.to_str().unwrap()]);
    assert_eq!(code, lock::EXIT_BUSY, "{out}");
    assert!(out.contains(&format!("pid {}", first.id())), "{out}");
    // Two SLURM-style tasks for the same index while the launcher runs: a run has one trainer.
    let a = spawn(
        dir.path(),
        &["sweep", sweep.to_str().unwrap(), "--index", "1"],
    );
    let b = spawn(
        dir.path(),
        &["sweep", sweep.to_str().unwrap(), "--index", "1"],
    );
    let (ca, oa) = finish(a);
    let (cb, ob) = finish(b);
    let (c0, o0) = finish(first);
    let codes = [ca, cb, c0];
    assert!(
        codes.iter().all(|&c| c == 0 || c == lock::EXIT_BUSY),
        "{codes:?}\n{oa}\n{ob}\n{o0}"
    );
    assert!(
        codes.contains(&lock::EXIT_BUSY) && codes.contains(&0),
        "{codes:?}\n{oa}\n{ob}\n{o0}"
    );
    // Without a terminal the launcher still says what it does, run by run.
    assert!(
        o0.contains("start lr-0.003_seed0") && o0.contains("done  lr-0.003_seed0"),
        "{o0}"
    );
    // A third launch finishes whatever was left to a holder that has gone, or skips it.
    let (code, out) = sinklab_output(Some(dir.path()), &["sweep", sweep.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    for (name, lr) in [("lr-0.003_seed0", "3e-3"), ("lr-0.001_seed0", "1e-3")] {
        let run = plan_dir.join(name);
        assert_each_step_once(&run);
        assert_eq!(
            sinklab::sweep::read_status(&plan_dir, name).unwrap().state,
            "done",
            "{name}"
        );
        let alone_name = format!("alone_{name}");
        let lr_set = format!("optim.lr={lr}");
        let alone = long_tiny(
            dir.path(),
            &alone_name,
            &["train.steps=150", &lr_set, "run.seed=0"],
            &["--quiet"],
        );
        let (code, out) = sinklab_output(Some(dir.path()), &strs(&alone));
        assert_eq!(code, 0, "{out}");
        assert_eq!(
            records(&run),
            records(&dir.path().join("runs").join(&alone_name)),
            "{name}"
        );
    }
}
