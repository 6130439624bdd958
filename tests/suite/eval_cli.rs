//! `eval` and `stream-eval` as a user meets them: `eval --sequences/--len` evaluate exactly the
//! windows they name, progress shows as plain lines without a terminal (the tests' stderr is a
//! pipe), and `eval --text` counts the tokens its tokenizer cannot represent, warning on a few
//! and refusing a text made of them.

use crate::common::{quiet, sinklab_in, tiny_experiment};
use sinklab::train;
use std::path::{Path, PathBuf};

/// A tiny byte-tokenizer run trained for 8 steps (ctx 32, eval 8 × 32, probes 8 × 16).
fn byte_run(dir: &Path) -> PathBuf {
    let exp = tiny_experiment(dir, "bytes", &[]);
    train::train(&exp, &quiet(), &mut |_| {}).unwrap();
    exp.run_dir()
}

/// (done, total) of every progress line `WHAT: D/T (P%), R/s, eta S s` in `err`, checking that
/// each has a positive rate and an eta.
fn progress(err: &str, what: &str) -> Vec<(u64, u64)> {
    err.lines()
        .filter_map(|l| l.strip_prefix(&format!("{what}: ")))
        .map(|rest| {
            let (frac, tail) = rest.split_once(" (").unwrap();
            let (d, t) = frac.split_once('/').unwrap();
            let rate: f64 = tail
                .split_once("), ")
                .and_then(|(_, r)| r.split_once("/s, eta "))
                .map(|(r, _)| r.parse().unwrap())
                .unwrap_or_else(|| panic!("no rate in {rest:?}"));
            assert!(rate > 0.0 && rate.is_finite(), "{rest}");
            assert!(tail.ends_with(" s"), "no eta in {rest:?}");
            (d.parse().unwrap(), t.parse().unwrap())
        })
        .collect()
}

fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out.lines().last().unwrap()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

#[test]
fn eval_evaluates_the_sequences_it_is_told_with_progress_lines() {
    let dir = tempfile::tempdir().unwrap();
    let run = byte_run(dir.path());
    let r = run.to_str().unwrap();
    let (code, out, err) = sinklab_in(
        None,
        &["eval", r, "--json", "--sequences", "3", "--len", "16"],
    );
    assert_eq!(code, 0, "{err}");
    let small = json(&out);
    assert_eq!(small["precision"], "f32", "{small}");
    for (k, v) in [
        ("val_sequences", 3),
        ("val_len", 16),
        ("probe_sequences", 3),
        ("probe_len", 16),
    ] {
        assert_eq!(small[k], v, "{k}: {small}");
    }
    // the loss is the library's on exactly those 3 windows of 16 tokens
    let device = crate::common::device();
    let (exp, model, _, _) = sinklab::run::load_checkpoint(&run, &device).unwrap();
    let data = sinklab::data::Dataset::prepare(&exp.data, &mut |_| {}).unwrap();
    let vb = sinklab::data::validation_batch(&data, 3, 16, exp.data.bos).unwrap();
    let want = sinklab::eval::eval_loss(&model, &vb, 4, &device);
    let got = small["val_loss"].as_f64().unwrap();
    assert!((got - want).abs() <= 1e-6 * want.abs(), "{got} vs {want}");
    // without a terminal: at most 5 plain lines per phase, each ending its phase
    let val = progress(&err, "eval: validation sequences of 16 tokens");
    assert!((1..=5).contains(&val.len()), "{err}");
    assert_eq!(val.last(), Some(&(3, 3)), "{err}");
    let probe = progress(&err, "eval: probe (3 × 16) blocks");
    assert_eq!(probe, [(1, 2), (2, 2)], "{err}");
    // the defaults: train.eval_sequences × model.ctx, metrics' probe set
    let (code, out, err) = sinklab_in(None, &["eval", r, "--json"]);
    assert_eq!(code, 0, "{err}");
    let full = json(&out);
    assert_eq!(
        (
            &full["val_sequences"],
            &full["val_len"],
            &full["probe_sequences"],
            &full["probe_len"]
        ),
        (&8.into(), &32.into(), &8.into(), &16.into())
    );
    assert!(
        (full["val_loss"].as_f64().unwrap() - got).abs() > 1e-4,
        "{full} vs {small}"
    );
    // the terminal form names the sizes
    let (code, out, _) = sinklab_in(None, &["eval", r, "--sequences", "2"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("validation loss on 2 × 32 tokens, products in f32: "),
        "{out}"
    );
    assert!(out.contains("probe 2 × 16"), "{out}");
    for (args, want) in [
        (
            &["--len", "33"][..],
            "--len 33: expected 2 ≤ len ≤ model.ctx = 32",
        ),
        (
            &["--len", "1"][..],
            "--len 1: expected 2 ≤ len ≤ model.ctx = 32",
        ),
        (
            &["--sequences", "0"][..],
            "--sequences 0: expected at least 1",
        ),
    ] {
        let (code, _, err) = sinklab_in(None, &[&["eval", r][..], args].concat());
        assert_eq!(code, 1, "{args:?}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
    // a byte-level tokenizer represents any text
    let text = dir.path().join("licence.txt");
    std::fs::write(
        &text,
        "The GNU General Public License is a free, copyleft licence. 東京 🙂\n",
    )
    .unwrap();
    let t = text.to_str().unwrap();
    let (code, out, err) = sinklab_in(None, &["eval", r, "--text", t, "--json"]);
    assert_eq!(code, 0, "{err}");
    let j = json(&out);
    assert_eq!(
        (&j["unknown_tokens"], &j["byte_fallback_tokens"]),
        (&0.into(), &0.into())
    );
    assert_eq!(j["unrepresented_share"], 0.0);
    assert!(!err.contains("warning"), "{err}");
    // --sequences takes the first windows of the text
    let (code, out, _) = sinklab_in(
        None,
        &["eval", r, "--text", t, "--len", "8", "--sequences", "2"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("(16 predicted, the first 2 of "), "{out}");
}

#[test]
fn eval_text_counts_unknown_tokens_warns_on_a_few_and_refuses_a_text_of_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // the quickstart's task, briefly: a word-level vocabulary t0 … t63
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/quickstart.toml");
    let exp = sinklab::config::load(
        &path,
        &[
            "run.name=\"task\"".into(),
            format!("run.out_dir={:?}", d.join("runs").display().to_string()),
            format!("data.cache_dir={:?}", d.join("cache").display().to_string()),
            "data.synthetic.sequences=256".into(),
            "train.steps=4".into(),
            "train.eval_every=4".into(),
            "train.checkpoint_every=4".into(),
            "metrics.every=4".into(),
        ],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    train::train(&exp, &quiet(), &mut |_| {}).unwrap();
    let run = exp.run_dir().display().to_string();
    let write = |name: &str, text: &str| {
        let p = d.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    let english = write(
        "english.txt",
        &"the licence grants everyone the freedom to share and change the work ".repeat(4),
    );
    let words = 12 * 4;
    // refused: every token is the unknown token
    let (code, _, err) = sinklab_in(None, &["eval", &run, "--text", &english]);
    assert_eq!(code, 1, "{err}");
    for want in [
        &format!(
            "{words} of its {words} tokens (100.0%) are not in the tokenizer's vocabulary ({words} unknown, 0 byte-fallback)"
        )[..],
        "at 50% or more",
        "--allow-unknown",
    ] {
        assert!(err.contains(want), "want {want:?} in {err}");
    }
    // overridden: evaluated, counted, warned
    let (code, out, err) = sinklab_in(
        None,
        &[
            "eval",
            &run,
            "--text",
            &english,
            "--allow-unknown",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let j = json(&out);
    assert_eq!(
        (&j["unknown_tokens"], &j["tokens"]),
        (&words.into(), &words.into())
    );
    assert!(
        (j["unrepresented_share"].as_f64().unwrap() - 1.0).abs() < 1e-12,
        "{j}"
    );
    assert!(err.contains("warning: "), "{err}");
    // 1 unknown in 20: a warning, and the count, but an evaluation
    let mut mixed: Vec<String> = (0..19).map(|i| format!("t{}", (i * 7) % 64)).collect();
    mixed.insert(5, "zzz".into());
    let mixed = write("mixed.txt", &mixed.join(" "));
    let (code, out, err) = sinklab_in(None, &["eval", &run, "--text", &mixed, "--json"]);
    assert_eq!(code, 0, "{err}");
    let j = json(&out);
    assert_eq!(j["unknown_tokens"], 1);
    assert!(
        (j["unrepresented_share"].as_f64().unwrap() - 0.05).abs() < 1e-12,
        "{j}"
    );
    assert!(
        err.contains("warning: ") && err.contains("1 of its 20 tokens (5.0%) is not"),
        "{err}"
    );
    // the task's own tokens: nothing to say
    let own: Vec<String> = (0..20).map(|i| format!("t{}", (i * 5) % 64)).collect();
    let own = write("own.txt", &own.join(" "));
    let (code, out, err) = sinklab_in(None, &["eval", &run, "--text", &own]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("0 unknown, 0 byte-fallback"), "{out}");
    assert!(!err.contains("warning"), "{err}");
}

#[test]
fn stream_eval_without_a_terminal_prints_about_20_progress_lines() {
    let dir = tempfile::tempdir().unwrap();
    let run = byte_run(dir.path());
    let out_dir = dir.path().join("stream");
    let (code, out, err) = sinklab_in(
        None,
        &[
            "stream-eval",
            run.to_str().unwrap(),
            "--tokens",
            "96",
            "--out",
            out_dir.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let lines = progress(&err, "stream-eval tokens scored");
    // one line per twentieth crossed; the dense row and the shared prefix are scored in one
    // forward each, so they advance many tokens at once
    assert!((10..=20).contains(&lines.len()), "{err}");
    let total = lines[0].1;
    assert!(total > 96, "every policy decodes the text: {total}");
    assert_eq!(lines.last(), Some(&(total, total)), "{err}");
    assert!(
        lines.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 == total),
        "{err}"
    );
}

/// `eval` of a run directory that has no checkpoint yet says so (and how to continue it),
/// unlike a path that is not a run at all; the plain output names the products' dtype.
#[test]
fn eval_tells_a_run_without_a_checkpoint_from_a_path_that_is_not_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let run = byte_run(dir.path());
    let r = run.to_str().unwrap();
    let (code, out, err) = sinklab_in(None, &["eval", r]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("products in f32"), "{out}");

    let young = dir.path().join("young");
    std::fs::create_dir(&young).unwrap();
    std::fs::copy(run.join("resolved.toml"), young.join("resolved.toml")).unwrap();
    let (code, _, err) = sinklab_in(None, &["eval", young.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(err.contains("this run has no checkpoint yet"), "{err}");
    assert!(err.contains("train.checkpoint_every = "), "{err}");
    assert!(err.contains("--resume"), "{err}");

    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, _, err) = sinklab_in(None, &["eval", empty.to_str().unwrap()]);
    assert_ne!(code, 0);
    assert!(
        err.contains("no checkpoint found: expected a run directory"),
        "{err}"
    );
}
