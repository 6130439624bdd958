//! The command line as a user meets it: help text, `check` on good and bad files, clear errors
//! for unsupported devices, and every shipped experiment file validating.

use crate::common::{self, sinklab_in};
use std::path::Path;

/// Every experiment file under `dir`, searched recursively, except sweep files.
fn all_experiments_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    collect_experiments(dir, &mut out);
    out
}

fn collect_experiments(dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        // experiments/sweeps holds sweep files (tests/sweep.rs expands them) beside their bases
        let sweep_file = p
            .parent()
            .and_then(|d| d.parent())
            .is_some_and(|d| d.ends_with("sweeps"))
            && !p.ends_with("base.toml");
        if p.is_dir() {
            collect_experiments(&p, out);
        } else if p.extension().is_some_and(|x| x == "toml") && !sweep_file {
            out.push(p.display().to_string());
        }
    }
}

#[test]
fn every_shipped_experiment_checks() {
    let files = all_experiments_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"));
    assert!(files.len() >= 3, "{files:?}");
    // the files only: some are meant for a GPU or need the built corpus
    let args: Vec<&str> = ["check", "--schema-only"]
        .into_iter()
        .chain(files.iter().map(String::as_str))
        .collect();
    let (code, out, err) = sinklab_in(None, &args);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        out.lines().filter(|l| l.starts_with("ok: ")).count(),
        files.len()
    );
}

#[test]
fn check_reports_every_error_with_file_path_and_valid_values() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "base = \"../../experiments/natural_text.toml\"\n[model]\nn_head = 4\nd_model = 130\n[optim]\ndecay = \"some\"\nlr = \"fast\"\n[metrics]\neps = [0.3, 1.5]\n",
    )
    .unwrap();
    // The base path is relative to the file, so point it at the real natural-text experiment.
    let quick = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/natural_text.toml");
    let text = std::fs::read_to_string(&bad).unwrap().replace(
        "../../experiments/natural_text.toml",
        quick.to_str().unwrap(),
    );
    std::fs::write(&bad, text).unwrap();
    let (code, _, err) = sinklab_in(None, &["check", bad.to_str().unwrap()]);
    assert_eq!(code, 1);
    for want in [
        "`model.n_head`: unknown key",
        "`optim.decay`: unknown choice `some`, expected `all` or `matrices_only`",
        "`optim.lr`: wrong type: string \"fast\", expected a number",
        "bad.toml",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
    // Semantic errors are reported once the structure is valid.
    std::fs::write(
        &bad,
        format!(
            "base = {:?}\n[model]\nd_model = 130\n[metrics]\neps = [0.3, 1.5]\nprobe_len = 200\n",
            quick.to_str().unwrap()
        ),
    )
    .unwrap();
    let (code, _, err) = sinklab_in(
        None,
        &[
            "check",
            bad.to_str().unwrap(),
            "--set",
            "train.micro_batch=5",
        ],
    );
    assert_eq!(code, 1);
    for want in [
        "`model.n_heads`",
        "`metrics.eps.1`",
        "`metrics.probe_len`",
        "`train.batch_tokens`",
    ] {
        assert!(err.contains(want), "missing {want:?} in:\n{err}");
    }
}

#[test]
fn unsupported_device_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = format!("run.out_dir=\"{}\"", dir.path().display());
    let (code, _, err) = sinklab_in(
        None,
        &[
            "train",
            "experiments/ci/wgpu_smoke.toml",
            "--device",
            "cuda",
            "--set",
            &out,
            "--quiet",
        ],
    );
    if cfg!(feature = "cuda") {
        return; // a CUDA build would try the GPU instead
    }
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("without the `cuda` cargo feature"), "{err}");
    assert!(err.contains("--features cuda"), "{err}");
    let (code, _, err) = sinklab_in(
        None,
        &["train", "experiments/ci/wgpu_smoke.toml", "--device", "tpu"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("valid: flex, wgpu, cuda"), "{err}");
}

#[test]
fn help_names_every_command() {
    let (code, out, _) = sinklab_in(None, &["--help"]);
    assert_eq!(code, 0);
    // The first word of every line of the "Commands:" section, exactly.
    let listed: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        listed,
        [
            "train",
            "check",
            "eval",
            "analyze",
            "dark",
            "heads",
            "ablate",
            "patch",
            "data",
            "import",
            "export",
            "generate",
            "stream-eval",
            "sweep",
            "report",
            "init-check",
            "bench",
            "help"
        ],
        "{out}"
    );
    let (code, out, _) = sinklab_in(None, &["train", "--help"]);
    assert_eq!(code, 0);
    for flag in ["--resume", "--set", "--device", "--stop-after", "--quiet"] {
        assert!(
            out.lines().any(|l| l.trim_start().starts_with(flag)),
            "{flag} in {out}"
        );
    }
}

#[test]
fn bench_times_training_inference_and_cached_decoding() {
    let args = |extra: &[&str]| -> serde_json::Value {
        let mut a = vec![
            "bench",
            "experiments/natural_text.toml",
            "--warmup",
            "0",
            "--steps",
            "1",
            "--rounds",
            "1",
            "--json",
        ];
        a.extend_from_slice(extra);
        let (code, out, err) = sinklab_in(None, &a);
        assert_eq!(code, 0, "{out}{err}");
        serde_json::from_str(out.lines().last().unwrap()).unwrap()
    };
    for (extra, mode, batch) in [
        (&[][..], "train", 16),
        (&["--forward"][..], "forward", 16),
        (&["--decode", "16"][..], "decode 16", 1),
    ] {
        let r = args(extra);
        assert_eq!(r["mode"], mode);
        assert_eq!(r["batch"], batch);
        let tps = r["median_tokens_per_s"].as_f64().unwrap();
        assert!(tps > 1.0 && tps.is_finite(), "{mode}: {tps}");
    }
    // the median of 2 rounds is their mean, not the larger
    let (code, out, err) = sinklab_in(
        None,
        &[
            "bench",
            "experiments/natural_text.toml",
            "--warmup",
            "0",
            "--steps",
            "1",
            "--rounds",
            "2",
            "--forward",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    let r: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let rounds: Vec<f64> = r["rounds_tokens_per_s"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(rounds.len(), 2);
    let median = r["median_tokens_per_s"].as_f64().unwrap();
    let mean = 0.5 * (rounds[0] + rounds[1]);
    assert!(
        (median - mean).abs() <= 1e-9 * mean,
        "{median} vs {rounds:?}"
    );
    let (code, out, err) = sinklab_in(
        None,
        &["bench", "experiments/natural_text.toml", "--rounds", "0"],
    );
    assert_eq!(code, 1);
    assert!(
        format!("{out}{err}").contains("--rounds 0: need at least 1"),
        "{out}{err}"
    );
    let (code, out, err) = sinklab_in(
        None,
        &["bench", "experiments/natural_text.toml", "--decode", "129"],
    );
    assert_eq!(code, 1);
    assert!(
        format!("{out}{err}").contains("--decode 129: need 1 ≤ tokens ≤ model.ctx = 128"),
        "{out}{err}"
    );
}

#[test]
fn check_reports_every_problem_of_this_machine_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // a tokenizer file without the named begin-of-sequence token
    sinklab::tokenizer::Tokenizer::byte()
        .unwrap()
        .save(&d.join("tokenizer.json"))
        .unwrap();
    let exp = d.join("machine.toml");
    let device = if cfg!(feature = "cuda") {
        ""
    } else {
        "device = \"cuda\"\n"
    };
    std::fs::write(
        &exp,
        format!(
            "[run]\n{device}[data]\ntokenizer = {{ kind = \"file\", path = \"{0}/tokenizer.json\", \
             bos = \"<s>\", eot = \"<|endoftext|>\" }}\n[data.sources.web]\nfiles = \
             [\"{0}/pile/parts\", \"{0}/*.parquet\"]\n",
            d.display()
        ),
    )
    .unwrap();
    let f = exp.to_str().unwrap();
    let (code, out, err) = sinklab_in(None, &["check", f]);
    assert_eq!(code, 1, "{out}{err}");
    let mut want = vec![
        (
            "`data.sources.web.files[0]`",
            "pile/parts\": no such file or directory",
        ),
        ("`data.sources.web.files[1]`", "*.parquet\" matches no file"),
        (
            "`data.tokenizer.path`",
            "lacks the begin-of-sequence token \"<s>\"",
        ),
    ];
    if !cfg!(feature = "cuda") {
        want.push(("`run.device`", "without the `cuda` cargo feature"));
    }
    let header = format!("machine.toml: {} problems on this machine", want.len());
    assert!(err.contains(&header), "{header:?} in {err}");
    for (key, message) in &want {
        assert!(
            err.lines()
                .any(|l| l.contains(f) && l.contains(key) && l.contains(message)),
            "{key} {message:?} in {err}"
        );
    }
    assert!(err.contains("error: 1 of 1 file has errors"), "{err}");
    // the file itself is fine
    let (code, out, err) = sinklab_in(None, &["check", "--schema-only", f]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("(4 layers × d 128, 1000 steps)"), "{out}");
    // one layer is "1 layer"
    let (code, out, _) = sinklab_in(None, &["check", "experiments/quickstart.toml"]);
    assert_eq!(code, 0);
    assert!(out.contains("(1 layer × d 64, 2000 steps)"), "{out}");
}

/// `kernel = "fused"` is accepted on every model; `check` says whether the fused attention
/// kernel runs or the explicit path does, and why.
#[test]
fn check_says_whether_the_fused_attention_kernel_covers_the_model() {
    let dir = tempfile::tempdir().unwrap();
    for (name, extra, tail, want) in [
        ("plain", "", "", "attention: the fused kernel"),
        (
            "alibi",
            "positions = { kind = \"alibi\" }\n",
            "",
            "attention: the fused kernel",
        ),
        (
            "relative",
            "positions = { kind = \"relative\" }\n",
            "",
            "does not cover this model (T5 relative positions add a learned logit bias): the \
             explicit path runs",
        ),
        (
            "bf16",
            "",
            "[train]\nprecision = \"bf16\"\n",
            "does not cover this model (precision bf16 on flex (the CPU attention kernel computes \
             in f32)): the explicit path runs",
        ),
    ] {
        let f = dir.path().join(format!("{name}.toml"));
        std::fs::write(
            &f,
            format!("[model]\n{extra}[model.attention]\nkernel = \"fused\"\n{tail}"),
        )
        .unwrap();
        let (code, out, err) = sinklab_in(None, &["check", f.to_str().unwrap()]);
        assert_eq!(code, 0, "{out}{err}");
        assert!(out.contains(want), "{name}: {out}");
    }
}

/// A sweep file given to `check` is named as one, with the command that checks its runs; a
/// run's report refuses the sweep report's --eps and --threshold and says why.
#[test]
fn check_names_a_sweep_file_and_a_runs_report_refuses_the_sweep_flags() {
    let sweep = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/sweeps/cpu/lr.toml");
    assert!(sweep.exists(), "{}", sweep.display());
    let (code, out) = common::sinklab_output(None, &["check", sweep.to_str().unwrap()]);
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("a sweep file (it has `"), "{out}");
    assert!(
        out.contains("sinklab sweep") && out.contains("--dry-run"),
        "{out}"
    );

    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(dir.path(), "r", &[]);
    sinklab::train::train(&exp, &common::quiet(), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    for flag in [["--eps", "0.3"], ["--threshold", "5"]] {
        let mut args = vec!["report", run.to_str().unwrap()];
        args.extend(flag);
        let (code, out) = common::sinklab_output(None, &args);
        assert_ne!(code, 0, "{out}");
        assert!(
            out.contains(&format!("{} applies to a sweep's report", flag[0])),
            "{out}"
        );
    }
    assert!(!run.join("plots").exists(), "a refused report wrote plots");
    let (code, out) = common::sinklab_output(None, &["report", run.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    assert!(run.join("plots").exists());
}
