//! The memory check (`src/memory/`): the parameter count from the configuration equals the
//! built model's for every shipped experiment; the estimate brackets the measured peak RSS of
//! real training runs (child processes; the `VmHWM` each prints when done) within [0.5×, 2×]; a
//! model that cannot fit is refused by `train`, `check` and `sweep` before anything is built or
//! prepared.

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::Tensor;
use sinklab::config::{self, Experiment};
use sinklab::memory::{self, Available};
use sinklab::model::Lm;
use std::path::{Path, PathBuf};

/// The test's bounds on measured peak RSS / estimate (`src/memory/estimate.rs` gives the ratios
/// measured on 20 runs, 0.77–1.11; these three measured 0.78–0.82).
const RATIO_BOUNDS: (f64, f64) = (0.5, 2.0);

/// The huge model of issue 28 (d 32768, d_ff 131072, 48 layers: 824.8G parameters).
const HUGE: [&str; 3] = [
    "model.d_model=32768",
    "model.d_ff=131072",
    "model.n_layers=48",
];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every experiment file shipped under `experiments/` (sweep files and results excluded).
fn shipped_experiments() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() && name != "sweeps" && name != "results" {
                walk(&p, out);
            } else if name.ends_with(".toml") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    walk(&repo().join("experiments"), &mut out);
    out.sort();
    out
}

/// (trainable, constant) parameter elements of a built model.
fn built_params(m: &Lm) -> (u64, u64) {
    struct V(u64, u64);
    impl ModuleVisitor for V {
        fn visit_float<const D: usize>(&mut self, p: &Param<Tensor<D>>) {
            let t = p.val();
            let n = t.shape().num_elements() as u64;
            if t.is_require_grad() {
                self.0 += n;
            } else {
                self.1 += n;
            }
        }
    }
    let mut v = V(0, 0);
    m.visit(&mut v);
    (v.0, v.1)
}

#[test]
fn parameter_count_equals_the_built_models_for_every_shipped_experiment() {
    let device = crate::common::device().autodiff();
    let files = shipped_experiments();
    assert!(files.len() > 60, "{} experiment files", files.len());
    let mut problems = Vec::new();
    let mut built = 0;
    for f in &files {
        let exp = config::load(f, &[]).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        // the structure, not the vocabulary, is under test: a tokenizer file may be absent
        let vocab = memory::planned_vocab(&exp).unwrap_or(1000);
        let counted = memory::param_count(&exp.model, vocab);
        let shapes = Lm::param_shapes(&exp.model, vocab, &device);
        let total: u64 = shapes
            .values()
            .map(|s| s.iter().product::<usize>() as u64)
            .sum();
        let largest = shapes
            .values()
            .map(|s| s.iter().product::<usize>() as u64)
            .max()
            .unwrap();
        if (counted.total(), counted.largest) != (total, largest) {
            problems.push(format!(
                "{}: counted {} (largest {}), model {total} (largest {largest})",
                f.display(),
                counted.total(),
                counted.largest
            ));
        }
        // trainable vs constant from a built model (small ones: it allocates every weight)
        if total < 5_000_000 {
            built += 1;
            let m = Lm::new(&exp.model, vocab, 0, &device);
            let (t, c) = built_params(&m);
            if (counted.trainable, counted.constant) != (t, c) {
                problems.push(format!(
                    "{}: counted trainable {} constant {}, model {t} and {c}",
                    f.display(),
                    counted.trainable,
                    counted.constant
                ));
            }
        }
    }
    assert!(built > 50, "{built} models built");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn eval_logit_block_is_evals() {
    assert_eq!(
        memory::estimate::EVAL_LOGITS_BLOCK,
        sinklab::eval::MAX_EVAL_LOGITS as u64
    );
}

/// Run the binary in the repository root; (exit code, stdout + stderr).
fn run(args: &[&str]) -> (i32, String) {
    crate::common::sinklab_output(None, args)
}

/// A figure `sinklab` printed after `prefix` ("451 MiB", "1.2 GiB"), in bytes.
fn printed_bytes(text: &str, prefix: &str) -> u64 {
    let rest = text
        .split(prefix)
        .nth(1)
        .unwrap_or_else(|| panic!("no `{prefix}` printed:\n{text}"));
    let mut words = rest.split_whitespace();
    let x: f64 = words.next().unwrap().trim_end_matches(',').parse().unwrap();
    let unit = match words
        .next()
        .unwrap()
        .trim_end_matches(|c: char| !c.is_alphabetic())
    {
        "B" => 1u64,
        "KiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        "TiB" => 1 << 40,
        u => panic!("unit {u}"),
    };
    (x * unit as f64) as u64
}

/// The estimated peak a start line or `check` printed ("memory: estimated peak 451 MiB = …").
fn printed_estimate(text: &str) -> u64 {
    printed_bytes(text, "memory: estimated peak ")
}

fn set_args(sets: &[String]) -> Vec<&str> {
    sets.iter().flat_map(|s| ["--set", s.as_str()]).collect()
}

#[test]
fn estimate_brackets_the_measured_peak_rss_of_training_runs() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    // a few steps each (RSS is at its plateau after ~4 steps), probes at step 0 and at the end
    // (file, --set, whether it has a corpus to prepare)
    let cases: [(&str, &[&str], bool); 3] = [
        (
            "experiments/quickstart.toml",
            &["train.steps=30", "train.eval_every=10"],
            false, // Bigram-Backcopy: generated by `train`, a few MB
        ),
        (
            "experiments/zoo/gate_elementwise.toml",
            &[
                "train.steps=8",
                "optim.schedule={kind=\"constant\",warmup=0}",
            ],
            true,
        ),
        (
            // the natural-text model at ctx 256: activations and attention dominate
            "experiments/natural_text.toml",
            &[
                "train.steps=5",
                "optim.schedule={kind=\"constant\",warmup=0}",
                "model.ctx=256",
                "train.batch_tokens=4096",
                "train.eval_sequences=16",
            ],
            true,
        ),
    ];
    let mut table = Vec::new();
    for (i, (exp, extra, prepare)) in cases.iter().enumerate() {
        let mut sets = vec![
            format!("run.name=\"mem{i}\""),
            format!("run.out_dir=\"{d}/runs\""),
            format!("data.cache_dir=\"{d}/cache\""),
        ];
        sets.extend(extra.iter().map(|s| s.to_string()));
        // the corpus (and a BPE) prepared first, in its own process: not part of training
        if *prepare {
            let mut prep = vec!["data", "prepare", exp];
            prep.extend(set_args(&sets));
            let (code, text) = run(&prep);
            assert_eq!(code, 0, "{text}");
        }
        let mut train = vec!["train", exp, "--quiet"];
        train.extend(set_args(&sets));
        let (code, text) = run(&train);
        assert_eq!(code, 0, "{text}");
        // the run's own VmHWM (`ru_maxrss` of a child spawned by this large, multi-threaded
        // test process starts at the parent's peak: Linux carries it across exec)
        let rss = printed_bytes(&text, "peak RSS ");
        // the estimate is printed right after the model line
        let model_line = text.lines().position(|l| l.starts_with("model: ")).unwrap();
        assert!(
            text.lines()
                .nth(model_line + 1)
                .unwrap()
                .starts_with("memory: estimated peak "),
            "{text}"
        );
        let est = printed_estimate(&text);
        let ratio = rss as f64 / est as f64;
        table.push(format!(
            "{exp} {extra:?}: peak RSS {} MiB, estimate {} MiB, ratio {ratio:.2}",
            rss >> 20,
            est >> 20
        ));
        assert!(
            (RATIO_BOUNDS.0..=RATIO_BOUNDS.1).contains(&ratio),
            "{}",
            table.join("\n")
        );
    }
    eprintln!("{}", table.join("\n"));
}

fn huge_sets(dir: &Path) -> Vec<String> {
    let mut sets: Vec<String> = HUGE.iter().map(|s| s.to_string()).collect();
    sets.push(format!("run.out_dir=\"{}/runs\"", dir.display()));
    sets.push(format!("data.cache_dir=\"{}/cache\"", dir.display()));
    sets
}

#[test]
fn a_model_that_cannot_fit_is_refused_before_anything_is_built() {
    let dir = tempfile::tempdir().unwrap();
    let sets = huge_sets(dir.path());
    let mut args = vec!["train", "experiments/natural_text.toml"];
    args.extend(set_args(&sets));
    let (code, text) = run(&args);
    assert_ne!(code, 0, "{text}");
    for want in [
        "memory: this run does not fit on flex",
        "824.771G parameters",
        "No train.micro_batch, model.ctx or worker count fits",
        "lower model.d_model, model.d_ff or model.n_layers",
        memory::SKIP_FLAG,
    ] {
        assert!(text.contains(want), "missing `{want}` in:\n{text}");
    }
    // refused before the run directory, the corpus or the model (the unchecked run grew to
    // 23.9 GB in 302 s before the OOM killer): no run directory, no corpus cache
    assert!(!dir.path().join("runs").exists());
    assert!(!dir.path().join("cache").exists());

    // `check` reports it as an error of that file
    let mut args = vec!["check", "experiments/natural_text.toml"];
    args.extend(set_args(&sets[..3]));
    let (code, text) = run(&args);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("experiments/natural_text.toml: `model`: memory: this run does not fit"),
        "{text}"
    );
    assert!(text.contains("1 of 1 file has errors"), "{text}");
    // --schema-only makes no machine check
    args.insert(1, "--schema-only");
    let (code, text) = run(&args);
    assert_eq!(code, 0, "{text}");
    assert!(!text.contains("memory:"), "{text}");
}

#[test]
fn check_prints_the_estimate_and_the_memory_it_was_checked_against() {
    let (code, text) = run(&["check", "experiments/quickstart.toml"]);
    assert_eq!(code, 0, "{text}");
    let est = printed_estimate(&text);
    // 62k parameters: the runtime's 120 MiB and a few tens of MiB of activations and probes
    assert!((120 << 20..400 << 20).contains(&est), "{text}");
    assert!(text.contains("fits in"), "{text}");
    assert!(text.contains("available ("), "{text}");
}

#[test]
fn a_sweep_with_a_run_that_cannot_fit_is_refused_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let base = repo().join("experiments/natural_text.toml");
    let sweep = dir.path().join("huge.toml");
    std::fs::write(
        &sweep,
        format!(
            "base = \"{}\"\nname = \"huge\"\nout_dir = \"{}\"\n[set]\nmodel = {{ d_model = 32768, \
             d_ff = 131072, n_layers = 48 }}\n[axes]\n\"optim.lr\" = [1e-3, 3e-3]\n",
            base.display(),
            dir.path().join("sweeps").display()
        ),
    )
    .unwrap();
    let (code, text) = run(&["sweep", sweep.to_str().unwrap()]);
    assert_ne!(code, 0, "{text}");
    assert!(text.contains("memory: this run does not fit"), "{text}");
    assert!(text.contains("run lr-0.001"), "{text}");
    // no run was started
    assert!(!dir.path().join("sweeps/huge/lr-0.001_seed0").exists());
}

#[test]
fn the_override_lets_a_refused_run_through_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut e: Experiment = config::load(
        &repo().join("experiments/natural_text.toml"),
        &huge_sets(dir.path()),
    )
    .unwrap();
    e.run.name = "huge".into();
    let refused = memory::preflight(&e, false, None).unwrap_err().to_string();
    assert!(refused.contains("does not fit"), "{refused}");
    let c = memory::preflight(&e, true, None).unwrap();
    assert_eq!(c.fits(), Some(false));
    assert!(c.line().contains("DOES NOT FIT in"), "{}", c.line());
    // a device that reports no memory: the estimate is printed, the check is not made
    let unknown = memory::Check::with(
        &e,
        2,
        Available::Unknown {
            why: "the wgpu runtime (CubeCL 0.11) reports no memory size for its adapter".into(),
        },
        None,
    )
    .unwrap();
    assert_eq!(unknown.fits(), None);
    assert!(
        unknown
            .line()
            .contains("not checked: the wgpu runtime (CubeCL 0.11) reports no memory size"),
        "{}",
        unknown.line()
    );
}
