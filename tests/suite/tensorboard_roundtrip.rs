//! Round trip through TensorBoard's own reader: events written by
//! `sinklab::tensorboard::EventWriter` are read back by `scripts/check_tensorboard.py`, which
//! uses the `tensorboard` Python package, and compared with what was written.
//!
//! The Python interpreter is `$SINKLAB_PYTHON` (default `python3`); it needs the packages of
//! `scripts/requirements.txt`. Without them these tests fail (they are never skipped).

use serde_json::{Value, json};
use sha2::Digest;
use sinklab::plot::{Heatmap, heatmap, png_size};
use sinklab::tensorboard::EventWriter;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const SETUP_HINT: &str = "run `bash scripts/setup_python.sh` (or point SINKLAB_PYTHON at a Python \
                          with the packages of scripts/requirements.txt)";

fn python() -> String {
    std::env::var("SINKLAB_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

fn checker() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_tensorboard.py")
}

/// Fails (never skips) when the interpreter or its `tensorboard` package is missing.
fn require_python_tensorboard() {
    let py = python();
    let out = Command::new(&py)
        .args([
            "-c",
            "import tensorboard, numpy; print(tensorboard.__version__)",
        ])
        .output()
        .unwrap_or_else(|e| panic!("cannot run Python interpreter `{py}` ({e}); {SETUP_HINT}"));
    assert!(
        out.status.success(),
        "Python interpreter `{py}` cannot import tensorboard/numpy ({}); {SETUP_HINT}",
        String::from_utf8_lossy(&out.stderr)
            .trim()
            .lines()
            .last()
            .unwrap_or("")
    );
}

fn run_checker(logdir: &Path, expected: &Path) -> Output {
    require_python_tensorboard();
    Command::new(python())
        .arg(checker())
        .arg(logdir)
        .arg(expected)
        .output()
        .expect("running check_tensorboard.py")
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Writes a log directory with every kind of summary (two event files, as two writers opened
/// in the same second) and returns the expectation the checker should confirm.
fn write_events(logdir: &Path) -> Value {
    let mut w = EventWriter::create(logdir).unwrap();
    let mut loss = Vec::new();
    let mut lr = Vec::new();
    for step in 0..25i64 {
        let l = 4.0 * (-0.07 * step as f64).exp() + 0.01;
        let r = 1e-3 * (1.0 + (step as f64 * 0.3).cos()) / 2.0;
        w.add_scalars(
            step * 4,
            &[("train/loss".to_string(), l), ("train/lr".to_string(), r)],
        )
        .unwrap();
        loss.push(json!([step * 4, l]));
        lr.push(json!([step * 4, r]));
    }
    w.add_scalar("val/loss", 2.5, 100).unwrap();
    w.add_scalar("val/loss", 0.0, 200).unwrap();

    // Non-square images: 7 wide x 3 high, and a rendered 3 x 5 heat map (a chart's PNG, as
    // the training run's sink map), expected byte for byte.
    let gray: Vec<u8> = (0..21u8).map(|i| i * 12).collect();
    w.add_image_gray("img/gray", 1, 7, 3, &gray).unwrap();
    let rgb: Vec<u8> = (0..63u8).map(|i| i * 4).collect();
    w.add_image_rgb("img/rgb", 1, 7, 3, &rgb).unwrap();
    let cells: Vec<Vec<f64>> = (0..3)
        .map(|r| (0..5).map(|c| (r * 5 + c) as f64 / 14.0).collect())
        .collect();
    let png = heatmap(&Heatmap {
        title: "first-token importance α₁ (probe set)",
        x_label: "head",
        y_label: "layer",
        rows: &cells,
        x_ticks: None,
        y_ticks: None,
        range: Some((0.0, 1.0)),
        annotate: true,
        colours: sinklab::plot::Colours::Sequential,
    })
    .unwrap();
    let (hw, hh) = png_size(&png).unwrap();
    assert!(hw > hh && hh > 150, "{hw} x {hh}");
    let sha = sinklab::checkpoint::hex(&sha2::Sha256::digest(&png));
    w.add_png("img/heatmap", 2, hw, hh, png).unwrap();

    let values: Vec<f64> = (0..500)
        .map(|i| ((i * 37) % 500) as f64 / 50.0 - 3.0)
        .collect();
    w.add_histogram("hist/weights", 10, &values).unwrap();
    let (mn, mx) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
    let sum: f64 = values.iter().sum();

    let text = "## Run\n\n| key | value |\n|---|---|\n| heads | 4 |\n\nnon-ASCII: ü ✓";
    w.add_text("run/config", 0, text).unwrap();
    w.flush().unwrap();

    // A second writer on the same directory within the same second gets its own file.
    let mut w2 = EventWriter::create(logdir).unwrap();
    assert_ne!(w.path(), w2.path());
    w2.add_scalar("other/metric", 7.0, 1).unwrap();
    w2.add_scalar("other/metric", -7.0, 2).unwrap();
    drop(w2);
    drop(w);
    let files = std::fs::read_dir(logdir).unwrap().count();
    assert_eq!(files, 2, "expected two event files in {}", logdir.display());

    json!({
        "scalars": {
            "train/loss": loss,
            "train/lr": lr,
            "val/loss": [[100, 2.5], [200, 0.0]],
            "other/metric": [[1, 7.0], [2, -7.0]],
        },
        "images": {
            "img/gray": [[1, 7, 3]],
            "img/rgb": [[1, 7, 3]],
            "img/heatmap": [[2, hw, hh, sha]],
        },
        "histograms": {"hist/weights": [[10, 500, mn, mx, sum]]},
        "texts": {"run/config": [[0, text]]},
        "rel_tol": 1e-6,
    })
}

#[test]
fn tensorboard_reads_back_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("tb");
    let expected = write_events(&logdir);
    let expected_path = dir.path().join("expected.json");
    std::fs::write(
        &expected_path,
        serde_json::to_string_pretty(&expected).unwrap(),
    )
    .unwrap();
    let out = run_checker(&logdir, &expected_path);
    assert!(
        out.status.success(),
        "checker rejected the events: {}",
        describe(&out)
    );
}

#[test]
fn checker_rejects_a_perturbed_expectation() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("tb");
    let mut expected = write_events(&logdir);
    // 1e-4 relative is far above float32 rounding and the 1e-6 tolerance.
    let point = &mut expected["scalars"]["train/loss"][5][1];
    *point = json!(point.as_f64().unwrap() * (1.0 + 1e-4));
    let expected_path = dir.path().join("expected.json");
    std::fs::write(
        &expected_path,
        serde_json::to_string_pretty(&expected).unwrap(),
    )
    .unwrap();
    let out = run_checker(&logdir, &expected_path);
    // Exit 1 is a mismatch; anything else (2: missing package or bad usage) is not the
    // failure this test wants to see.
    assert_eq!(
        out.status.code(),
        Some(1),
        "checker should report a mismatch: {}",
        describe(&out)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("train/loss") && stderr.contains("step 20"),
        "diff should name the tag and step: {}",
        describe(&out)
    );
}

#[test]
fn checker_rejects_an_image_with_other_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("tb");
    let mut expected = write_events(&logdir);
    expected["images"]["img/heatmap"][0][3] = json!("0".repeat(64));
    let expected_path = dir.path().join("expected.json");
    std::fs::write(&expected_path, expected.to_string()).unwrap();
    let out = run_checker(&logdir, &expected_path);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("img/heatmap") && stderr.contains("SHA-256"),
        "{}",
        describe(&out)
    );
}
