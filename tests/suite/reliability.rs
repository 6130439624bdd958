//! Reliability (issue 17): names cannot escape their directory, sinklab never deletes files it
//! did not write for the run, `--resume` of a finished run changes nothing, and after a kill the
//! real TensorBoard reader sees every step exactly once with the values of `metrics.jsonl`.

use crate::common;

use common::*;
use sinklab::config;
use sinklab::train::{self, TrainOptions};
use std::path::Path;

fn opts(resume: bool) -> TrainOptions {
    TrainOptions {
        resume,
        quiet: true,
        ..TrainOptions::default()
    }
}

/// Every file under `dir` with its bytes, sorted by path; the lock file (which names the last
/// process that held it) aside.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if e.file_name() == sinklab::lock::LOCK_FILE {
                continue;
            } else {
                out.push((p.display().to_string(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn run_and_sweep_names_cannot_escape_their_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("e.toml");
    std::fs::write(&path, "[run]\nname = \"x\"\n").unwrap();
    for bad in [
        "\".\"",
        "\"..\"",
        "\"...\"",
        "\"\"",
        "\"a/b\"",
        "\"/tmp/x\"",
        "\"..\\\\x\"",
    ] {
        let err = config::load(&path, &[format!("run.name={bad}")])
            .err()
            .unwrap_or_else(|| panic!("run.name = {bad} was accepted"))
            .to_string();
        assert!(
            err.contains("run.name") && err.contains("inside"),
            "{bad}: {err}"
        );
    }
    assert!(config::load(&path, &["run.name=\"a.b-c_1\"".to_string()]).is_ok());
    // a sweep named ".." would put its runs next to out_dir
    let base = dir.path().join("base.toml");
    std::fs::write(&base, "").unwrap();
    let sweep = dir.path().join("s.toml");
    std::fs::write(
        &sweep,
        "base = \"base.toml\"\nname = \"..\"\n[axes]\n\"optim.lr\" = [1e-3]\n",
    )
    .unwrap();
    let err = format!("{:#}", sinklab::sweep::expand(&sweep).err().unwrap());
    assert!(err.contains("name") && err.contains("inside"), "{err}");
}

#[test]
fn a_fresh_run_never_deletes_files_it_did_not_write() {
    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(dir.path(), "mine", &[]);
    let run = exp.run_dir();
    std::fs::create_dir_all(&run).unwrap();
    std::fs::write(run.join("metrics.jsonl"), "my own notes\n").unwrap();
    std::fs::write(run.join("events.out.tfevents.1.host.1.0"), "not sinklab's").unwrap();
    let before = snapshot(&run);
    for resume in [false, true] {
        let err = format!(
            "{:#}",
            train::train(&exp, &opts(resume), &mut |_| {})
                .err()
                .unwrap()
        );
        assert!(err.contains("will not overwrite or delete"), "{err}");
        assert_eq!(snapshot(&run), before, "files changed (resume = {resume})");
    }
}

#[test]
fn resuming_a_finished_run_changes_nothing_and_extending_it_says_how() {
    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(dir.path(), "done", &[]);
    let first = train::train(&exp, &opts(false), &mut |_| {}).unwrap();
    assert_eq!(first.steps_done, 8);
    let before = snapshot(&exp.run_dir());
    let mut said = String::new();
    let again = train::train(&exp, &opts(true), &mut |l| said.push_str(l)).unwrap();
    assert!(said.contains("already finished all 8 steps"), "{said}");
    assert_eq!(again.last_loss, first.last_loss);
    assert!(again.last_loss.unwrap().is_finite());
    assert_eq!(
        snapshot(&exp.run_dir()),
        before,
        "a no-op resume touched the run"
    );
    let longer = tiny_experiment(dir.path(), "done", &["train.steps=16"]);
    let err = format!(
        "{:#}",
        train::train(&longer, &opts(true), &mut |_| {})
            .err()
            .unwrap()
    );
    assert!(
        err.contains("train.init_from") && err.contains("train.steps: 8 → 16"),
        "{err}"
    );
    assert_eq!(snapshot(&exp.run_dir()), before);
}

#[test]
fn after_a_kill_tensorboard_shows_every_step_once_with_the_values_of_metrics_jsonl() {
    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(
        dir.path(),
        "killed",
        &[
            "train.steps=20",
            "train.checkpoint_every=10",
            "train.eval_every=5",
            "metrics.every=5",
        ],
    );
    train::train(&exp, &opts(false), &mut |_| {}).unwrap();
    // A kill after step 20's records but before its checkpoint: the newest checkpoint is step
    // 10, and the events of steps 11..20 are on disk (flushed at every checkpoint and at the end).
    let run = exp.run_dir();
    std::fs::remove_dir_all(run.join("checkpoints/step_00000020")).unwrap();
    std::fs::remove_file(run.join("summary.json")).unwrap();
    let s = train::train(&exp, &opts(true), &mut |_| {}).unwrap();
    assert_eq!(s.steps_done, 20);
    // every logged (tag, step) once, in metrics.jsonl and in TensorBoard's Python reader
    let mut scalars: serde_json::Map<String, serde_json::Value> = serde_json::Map::new();
    let mut seen = std::collections::HashSet::new();
    for (step, rec) in read_metrics(&run) {
        for (tag, v) in rec {
            assert!(
                seen.insert((tag.clone(), step)),
                "{tag} at step {step} twice in metrics.jsonl"
            );
            let e = scalars.entry(tag).or_insert(serde_json::json!([]));
            e.as_array_mut().unwrap().push(serde_json::json!([step, v]));
        }
    }
    // the checkpoint step itself (10) and the re-run steps (15, 20) are there
    let val: Vec<u64> = series(&run, "val/loss").iter().map(|p| p.0).collect();
    assert_eq!(val, vec![0, 5, 10, 15, 20]);
    let expected = serde_json::json!({"scalars": scalars, "rel_tol": 1e-6});
    let exp_path = dir.path().join("expected.json");
    std::fs::write(&exp_path, expected.to_string()).unwrap();
    let (ok, out) = run_python(
        "check_tensorboard.py",
        &[run.to_str().unwrap(), exp_path.to_str().unwrap()],
    );
    assert!(ok, "TensorBoard after the kill and resume:\n{out}");
}

#[test]
fn a_start_that_fails_before_step_0_leaves_nothing_that_blocks_the_next() {
    let dir = tempfile::tempdir().unwrap();
    // The cuda backend is not compiled into the test build: the start fails after the run
    // directory was prepared (resolved.toml, provenance, tokenizer written).
    let bad = tiny_experiment(dir.path(), "stub", &["run.device=\"cuda\""]);
    let err = format!(
        "{:#}",
        train::train(&bad, &opts(false), &mut |_| {}).err().unwrap()
    );
    assert!(err.contains("cuda"), "{err}");
    assert!(
        !bad.run_dir().exists(),
        "the failed start left {:?}",
        snapshot(&bad.run_dir())
    );
    // a plain re-run and a --resume both start cleanly
    let good = tiny_experiment(dir.path(), "stub", &[]);
    for resume in [false, true] {
        let _ = std::fs::remove_dir_all(good.run_dir());
        train::train(&bad, &opts(resume), &mut |_| {})
            .err()
            .unwrap();
        let s = train::train(&good, &opts(resume), &mut |_| {}).unwrap();
        assert_eq!(s.steps_done, 8);
    }
}

#[test]
fn a_corrupt_checkpoint_is_detected_and_the_newest_good_one_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(dir.path(), "sums", &["train.keep_checkpoints=3"]);
    train::train(&exp, &opts(false), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    let want = series(&run, "train/loss");
    let sums = std::fs::read_to_string(run.join("checkpoints/step_00000008/SHA256SUMS")).unwrap();
    assert!(
        sums.contains("  model.safetensors") && sums.contains("  state.json"),
        "{sums}"
    );
    // flip one bit of the newest weights; leave a stale temporary from a killed write
    let w = run.join("checkpoints/step_00000008/model.safetensors");
    let mut bytes = std::fs::read(&w).unwrap();
    let n = bytes.len();
    bytes[n - 3] ^= 0x10;
    std::fs::write(&w, bytes).unwrap();
    std::fs::create_dir_all(run.join("checkpoints/.tmp_step_00000012_999")).unwrap();
    std::fs::remove_file(run.join("summary.json")).unwrap();
    let mut said = Vec::new();
    let s = train::train(&exp, &opts(true), &mut |l| said.push(l.to_string())).unwrap();
    let said = said.join("\n");
    assert!(
        said.contains("step_00000008/model.safetensors") && said.contains("corrupt"),
        "{said}"
    );
    assert!(
        said.contains("newest good checkpoint instead") && said.contains("step_00000004"),
        "{said}"
    );
    assert!(said.contains("from step 4"), "{said}");
    assert_eq!(s.steps_done, 8);
    assert!(!run.join("checkpoints/.tmp_step_00000012_999").exists());
    // resumed from step 4, the run ends exactly where the uninterrupted one did
    assert_eq!(series(&run, "train/loss"), want);
    // a garbage state.json is reported with its path
    std::fs::write(
        run.join("checkpoints/step_00000008/state.json"),
        "{ not json",
    )
    .unwrap();
    std::fs::remove_file(run.join("checkpoints/step_00000008/SHA256SUMS")).unwrap();
    let mut said = Vec::new();
    let longer = tiny_experiment(dir.path(), "sums", &["train.keep_checkpoints=3"]);
    train::train(&longer, &opts(true), &mut |l| said.push(l.to_string())).unwrap();
    let said = said.join("\n");
    assert!(
        said.contains("step_00000008/state.json") && said.contains("not a valid checkpoint state"),
        "{said}"
    );
}

#[test]
fn the_divergence_message_names_only_a_checkpoint_that_exists() {
    let dir = tempfile::tempdir().unwrap();
    for (name, every) in [("none", "1000"), ("some", "1")] {
        let mut exp = tiny_experiment(
            dir.path(),
            name,
            &["train.steps=50", &format!("train.checkpoint_every={every}")],
        );
        exp.optim.lr = 1e30;
        exp.optim.grad_clip = None;
        let err = format!(
            "{:#}",
            train::train(&exp, &opts(false), &mut |_| {}).err().unwrap()
        );
        assert!(err.contains("non-finite"), "{err}");
        match sinklab::checkpoint::list_checkpoints(&exp.run_dir()).pop() {
            None => assert!(
                err.contains("no checkpoint was written") && !err.contains("checkpoints"),
                "{err}"
            ),
            Some((s, d)) => assert!(
                err.contains(&format!("(step {s})")) && err.contains(&d.display().to_string()),
                "{err}"
            ),
        }
    }
}

#[test]
fn without_a_terminal_progress_is_plain_lines_and_quiet_prints_less() {
    let dir = tempfile::tempdir().unwrap();
    // the experiment file on disk (overrides go on the command line)
    tiny_experiment(dir.path(), "lines", &[]);
    let file = dir.path().join("lines.toml");
    let run = |name: &str, quiet: bool| {
        let mut args = vec![
            "train".to_string(),
            file.display().to_string(),
            "--set".into(),
            format!("run.name=\"{name}\""),
            "--set".into(),
            "train.steps=40".into(),
        ];
        if quiet {
            args.push("--quiet".into());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = sinklab_in(Some(dir.path()), &args);
        assert_eq!(code, 0, "{err}");
        (out, err)
    };
    // not a terminal (captured pipes): periodic step lines, at most ~20 of them, then "done:"
    let (out, err) = run("plain", false);
    let steps = err
        .lines()
        .filter(|l| l.starts_with("step ") && l.contains("/40 loss"))
        .count();
    assert!((2..=21).contains(&steps), "{steps} step lines:\n{err}");
    assert!(err.contains("step 40/40"), "{err}");
    assert!(out.starts_with("done: 40 steps"), "{out}");
    // --quiet: no step lines, fewer lines overall
    let (out_q, err_q) = run("quiet", true);
    let steps_q = err_q
        .lines()
        .filter(|l| l.starts_with("step ") && l.contains("/40 loss"))
        .count();
    assert_eq!(steps_q, 0, "{err_q}");
    assert!(err_q.lines().count() < err.lines().count());
    assert!(out_q.starts_with("done: 40 steps"), "{out_q}");
}

/// The short version of `scripts/fault_inject.py`: SIGKILLs at random moments and flipped
/// checkpoint bytes, then every metrics.jsonl value and every TensorBoard point must equal an
/// uninterrupted run's (whatever moments the kills hit, the result must be the same).
#[test]
fn random_kills_and_corrupted_checkpoints_leave_the_run_exact() {
    let (ok, out) = run_python(
        "fault_inject.py",
        &[
            "--kills",
            "6",
            "--corrupt-every",
            "3",
            "--steps",
            "150",
            "--exe",
            env!("CARGO_BIN_EXE_sinklab"),
        ],
    );
    assert!(ok, "{out}");
    assert!(
        out.contains("values equal the uninterrupted run's"),
        "{out}"
    );
    assert!(out.contains("TensorBoard: OK"), "{out}");
}

#[test]
fn check_catches_a_missing_backend_and_corpus_and_a_vocabulary_too_big_for_the_corpus() {
    let dir = tempfile::tempdir().unwrap();
    tiny_experiment(dir.path(), "pre", &[]);
    let file = dir.path().join("pre.toml");
    let f = file.to_str().unwrap();
    let (code, _, err) = sinklab_in(
        Some(dir.path()),
        &["check", f, "--set", "run.device=\"cuda\""],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("run.device") && err.contains("`cuda` cargo feature"),
        "{err}"
    );
    let (code, _, err) = sinklab_in(
        Some(dir.path()),
        &["check", f, "--set", "data.corpus=\"/no/such/corpus\""],
    );
    assert_ne!(code, 0);
    assert!(
        err.contains("data.corpus") && err.contains("/no/such/corpus/manifest.json"),
        "{err}"
    );
    let (code, out, _) = sinklab_in(Some(dir.path()), &["check", f]);
    assert_eq!(code, 0, "{out}");
    // training stops at the device before any tokenizer training or data preparation
    let exp = tiny_experiment(
        dir.path(),
        "pre",
        &[
            "run.device=\"cuda\"",
            "data.tokenizer={kind=\"bpe\", vocab_size=300}",
        ],
    );
    let err = format!(
        "{:#}",
        train::train(&exp, &opts(false), &mut |_| {}).err().unwrap()
    );
    assert!(err.contains("cuda"), "{err}");
    assert!(
        !dir.path().join("cache").exists(),
        "data was prepared before the device failed"
    );
    // a corpus too small for the vocabulary says so (no silent shrinking)
    let corpus = dir.path().join("small");
    std::fs::create_dir_all(&corpus).unwrap();
    std::fs::write(
        corpus.join("a.txt"),
        "to be or not to be, that is the question\n".repeat(40),
    )
    .unwrap();
    std::fs::write(
        corpus.join("manifest.json"),
        r#"{"name": "small", "domains": {"a": {"file": "a.txt"}}}"#,
    )
    .unwrap();
    let exp = tiny_experiment(
        dir.path(),
        "small",
        &[
            &format!("data.corpus={:?}", corpus.display().to_string()),
            "data.tokenizer={kind=\"bpe\", vocab_size=2048}",
        ],
    );
    let err = format!(
        "{:#}",
        train::train(&exp, &opts(false), &mut |_| {}).err().unwrap()
    );
    assert!(
        err.contains("vocab_size = 2048") && err.contains("yields only"),
        "{err}"
    );
}

#[test]
fn config_errors_name_the_file_or_set_flag_that_holds_the_mistake() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    p("base.toml", "[model]\nd_modle = 3\npositions = \"rope\"\n");
    let top = p("top.toml", "base = \"base.toml\"\n[run]\nname = \"x\"\n");
    let err = config::load(&top, &["optim.lr=\"fast\"".to_string()])
        .unwrap_err()
        .to_string();
    // mistakes in the base are the base's; the bad --set value is --set's
    assert!(
        err.contains("base.toml: `model.d_modle`: unknown key"),
        "{err}"
    );
    // a combination the base file got wrong is the base's too
    p("base2.toml", "[model]\nn_heads = 5\n");
    let top2 = p("top2.toml", "base = \"base2.toml\"\n");
    let err2 = config::load(&top2, &[]).unwrap_err().to_string();
    assert!(err2.contains("base2.toml: `model.n_heads`"), "{err2}");
    assert!(
        err.contains("--set `optim.lr=\"fast\"`: `optim.lr`: wrong type"),
        "{err}"
    );
    // no Rust type names; the valid choices instead
    assert!(
        !err.contains("PositionsConfig") && !err.contains("internally tagged"),
        "{err}"
    );
    assert!(
        err.contains("base.toml: `model.positions`")
            && err.contains(
                "expected a table like positions = { kind = \"rope\" }; valid kinds: nope, \
                 sinusoidal, learned, alibi, rope, relative"
            ),
        "{err}"
    );
    // a two-file cycle names both files
    let c = p("c.toml", "base = \"d.toml\"\n");
    p("d.toml", "base = \"c.toml\"\n");
    let err = config::load(&c, &[]).unwrap_err().to_string();
    assert!(
        err.contains("c.toml →") && err.contains("d.toml →"),
        "{err}"
    );
    // a syntax error gives line and column
    let e = p("e.toml", "[run]\nname = \"x\"\n[model\nd_model = 3\n");
    let err = config::load(&e, &[]).unwrap_err().to_string();
    assert!(err.contains("line 3, column 7"), "{err}");
}

#[test]
fn stop_after_says_it_stopped_how_to_resume_and_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let exp = tiny_experiment(dir.path(), "stop", &[]);
    let file = dir.path().join("stop.toml");
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &[
            "train",
            file.to_str().unwrap(),
            "--stop-after",
            "3",
            "--quiet",
        ],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("stopped after step 3 of 8 (--stop-after)")
            && out.contains("val loss")
            && out.contains("(step 0)")
            && out.contains("--quiet --resume`")
            && !out.contains("done:"),
        "{out}"
    );
    let s: sinklab::train::TrainSummary =
        serde_json::from_value(read_json(&exp.run_dir().join("summary.json"))).unwrap();
    assert!(s.interrupted);
    assert_eq!(s.stop_reason.as_deref(), Some("stop_after"));
    assert_eq!(
        (s.steps_done, s.total_steps, s.last_val_step),
        (3, 8, Some(0))
    );
    // the printed command continues the run to its end
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["train", file.to_str().unwrap(), "--quiet", "--resume"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("done: 8 steps") && out.contains("(step 8)"),
        "{out}"
    );
}
