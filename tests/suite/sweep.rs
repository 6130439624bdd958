//! Sweeps (`sinklab sweep`, `sinklab report`): expansion (grid, zip, seeds, `base` axis,
//! `[set]`), stable readable names, clear errors, failure isolation, skipping finished runs,
//! resuming an interrupted run to the same numbers, Ctrl-C, SLURM array scripts, the report.

use crate::common::{self, sinklab_output};

use sinklab::sweep::{self, value_label};
use std::path::Path;
use std::process::Command;

/// A tiny base experiment and a sweep file over it; returns the sweep file.
fn sweep_file(dir: &Path, name: &str, body: &str) -> std::path::PathBuf {
    common::tiny_experiment(dir, "tinybase", &[]);
    let text = format!(
        "base = \"tinybase.toml\"\nname = \"{name}\"\nout_dir = \"{}\"\n{body}",
        dir.join("sweeps").display()
    );
    let p = dir.join(format!("{name}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn grid_zip_seeds_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let f = sweep_file(
        dir.path(),
        "grid",
        "seeds = [0, 7]\n[set]\noptim = { weight_decay = 0.2 }\n[axes]\n\"optim.lr\" = [1e-3, 3e-3]\n\
         model.positions = [{ kind = \"nope\" }, { kind = \"alibi\" }, { kind = \"rope\", base = 500.0 }]\n",
    );
    let (plan, exps) = sweep::expand(&f).unwrap();
    assert_eq!(plan.runs.len(), 2 * 3 * 2);
    let names: Vec<&str> = plan.runs.iter().map(|r| r.name.as_str()).collect();
    // axes in path order (model.positions before optim.lr), the last axis varying fastest
    assert_eq!(names[0], "positions-nope_lr-0.001_seed0");
    assert_eq!(names[1], "positions-nope_lr-0.001_seed7");
    assert_eq!(names[3], "positions-nope_lr-0.003_seed7");
    assert_eq!(names[9], "positions-rope-base500.0_lr-0.001_seed7");
    assert_eq!(names[11], "positions-rope-base500.0_lr-0.003_seed7");
    // every run carries its values, the [set] delta, its seed and lives in the sweep directory
    assert_eq!(exps[9].run.seed, 7);
    assert!((exps[9].optim.lr - 1e-3).abs() < 1e-15);
    assert!((exps[11].optim.weight_decay - 0.2).abs() < 1e-15);
    assert_eq!(exps[5].run_dir(), plan.dir.join(&plan.runs[5].name));
    assert_eq!(plan.dir, dir.path().join("sweeps").join("grid"));
    // expansion is deterministic
    let (again, _) = sweep::expand(&f).unwrap();
    assert_eq!(again.runs, plan.runs);

    let z = sweep_file(
        dir.path(),
        "zipped",
        "combine = \"zip\"\n[labels]\n\"train.steps\" = \"n\"\n[axes]\n\"optim.lr\" = [1e-3, 2e-3]\n\"train.steps\" = [8, 4]\n",
    );
    let (plan, exps) = sweep::expand(&z).unwrap();
    let names: Vec<&str> = plan.runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["lr-0.001_n-8_seed0", "lr-0.002_n-4_seed0"]);
    assert_eq!(exps[1].train.steps, 4);

    assert_eq!(value_label(&toml::Value::Array(vec![])), "none");
    let v: toml::Table = toml::from_str("v = [1, 2]").unwrap();
    assert_eq!(value_label(&v["v"]), "1x2");
}

#[test]
fn every_shipped_sweep_expands_into_valid_runs() {
    // Both sizes ship the same matrix; every run of every sweep builds a valid experiment.
    let mut stems = Vec::new();
    for size in ["cpu", "gu60m"] {
        let mut here = Vec::new();
        for f in common::experiment_files(&format!("experiments/sweeps/{size}")) {
            let stem = f.file_stem().unwrap().to_string_lossy().into_owned();
            if stem == "base" {
                continue;
            }
            let (plan, exps) =
                sweep::expand(&f).unwrap_or_else(|e| panic!("{}: {e:#}", f.display()));
            assert_eq!(plan.name, format!("{size}_{stem}"), "{}", f.display());
            assert!(plan.runs.len() >= 2, "{}", f.display());
            assert_eq!(exps.len(), plan.runs.len());
            assert!(
                plan.runs.iter().all(|r| r.name.len() <= 100),
                "{}",
                f.display()
            );
            here.push(stem);
        }
        stems.push(here);
    }
    assert_eq!(stems[0], stems[1], "cpu and gu60m ship different sweeps");
    // The Bigram-Backcopy sweeps (Guo et al.'s mitigations, Gu et al.'s directions).
    let bb: Vec<String> = common::experiment_files("experiments/sweeps/bb")
        .iter()
        .filter(|f| f.file_stem().unwrap() != "base")
        .map(|f| {
            let (plan, exps) =
                sweep::expand(f).unwrap_or_else(|e| panic!("{}: {e:#}", f.display()));
            assert!(
                plan.seeds.len() >= 2 && plan.runs.len() >= 4,
                "{}",
                f.display()
            );
            assert!(exps.iter().all(|e| e.data.synthetic.is_some()));
            plan.name
        })
        .collect();
    for needed in [
        "normaliser",
        "optimiser",
        "lr",
        "weight_decay",
        "data_first",
    ] {
        assert!(
            bb.contains(&format!("bb_{needed}")),
            "missing sweep bb_{needed}"
        );
    }
    for needed in [
        "lr",
        "weight_decay",
        "data_fixed_token",
        "data_mixture",
        "sas",
        "slots",
    ] {
        assert!(
            stems[0].iter().any(|s| s == needed),
            "missing sweep {needed}"
        );
    }
}

/// The shipped sweeps follow the papers: Gu et al.'s sigmoid attention has no bias (the −ln T
/// variant of Ramapuram et al. is its own, labelled row), and the 60M LR sweep has the paper's
/// 20k-step points for every LR plus the two step-compensated ones.
#[test]
fn shipped_sweeps_match_the_papers_settings() {
    use sinklab::config::{NormaliserConfig, SigmoidBias};
    for size in ["cpu", "gu60m"] {
        let f = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("experiments/sweeps/{size}/attention_ops.toml"));
        let (plan, exps) = sweep::expand(&f).unwrap();
        let sigmoid: Vec<(&str, f64)> = plan
            .runs
            .iter()
            .zip(&exps)
            .filter(|(r, _)| r.seed == 0)
            .filter_map(|(r, e)| match &e.model.attention.normaliser {
                NormaliserConfig::Sigmoid { bias } => {
                    Some((r.name.as_str(), bias.resolve(e.model.ctx).unwrap()))
                }
                _ => None,
            })
            .collect();
        assert_eq!(sigmoid.len(), 2, "{size}: {sigmoid:?}");
        assert_eq!(sigmoid[0], ("attn-sigmoid_seed0", 0.0), "{size}");
        assert!(sigmoid[1].0.contains("ln"), "{size}: {sigmoid:?}");
        let ctx = exps[0].model.ctx as f64;
        assert!((sigmoid[1].1 + ctx.ln()).abs() < 1e-12, "{size}");
        assert!(exps.iter().all(|e| match &e.model.attention.normaliser {
            NormaliserConfig::Sigmoid { bias } => {
                *bias == SigmoidBias::Value(0.0) || *bias == SigmoidBias::Named("-ln(T)".into())
            }
            _ => true,
        }));
    }
    let f = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/sweeps/gu60m/lr.toml");
    let (_, exps) = sweep::expand(&f).unwrap();
    let points: Vec<(f64, u64)> = exps.iter().map(|e| (e.optim.lr, e.train.steps)).collect();
    for lr in [8e-4, 4e-4, 2e-4, 1e-4] {
        assert!(
            points.contains(&(lr, 20000)),
            "{lr} at 20k steps: {points:?}"
        );
    }
    assert!(points.contains(&(2e-4, 40000)) && points.contains(&(1e-4, 80000)));
    // Gu et al.'s W_down init, 1/sqrt(d_ff)/n_layers.
    let e = &exps[0];
    let want = 1.0 / (e.model.d_ff as f64).sqrt() / e.model.n_layers as f64;
    assert!((e.model.w_down_init_std.unwrap() - want).abs() < 1e-6);
}

/// The remedies comparison (issue 52) holds every normaliser kind and gate kind of the model zoo
/// (and Guo et al.'s ReLU attention) on both tasks: Bigram-Backcopy with 3 seeds, natural text with 2.
#[test]
fn the_remedies_sweeps_cover_every_normaliser_and_gate_of_the_zoo() {
    use sinklab::config::{gate_name, normaliser_name};
    use std::collections::BTreeSet;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (mut norms, mut gates) = (BTreeSet::new(), BTreeSet::new());
    for f in std::fs::read_dir(root.join("experiments/zoo")).unwrap() {
        let e = sinklab::config::load(&f.unwrap().path(), &[]).unwrap();
        norms.insert(normaliser_name(&e.model.attention.normaliser));
        gates.insert(gate_name(&e.model.attention.gate));
    }
    for n in ["softpick", "clipped_softmax", "scalable_softmax", "linear"] {
        assert!(norms.contains(n), "the zoo has {n}: {norms:?}");
    }
    assert!(
        gates.contains("per_token") && gates.contains("sparse"),
        "{gates:?}"
    );
    for (file, seeds) in [
        ("bb/remedies.toml", vec![0, 1, 2]),
        ("cpu/remedies.toml", vec![0, 1]),
    ] {
        let (plan, exps) = sweep::expand(&root.join("experiments/sweeps").join(file)).unwrap();
        assert_eq!(plan.seeds, seeds, "{file}");
        let n: BTreeSet<_> = exps
            .iter()
            .map(|e| normaliser_name(&e.model.attention.normaliser))
            .collect();
        let g: BTreeSet<_> = exps
            .iter()
            .map(|e| gate_name(&e.model.attention.gate))
            .collect();
        assert!(norms.is_subset(&n), "{file}: {n:?} lacks some of {norms:?}");
        assert_eq!(g, gates, "{file}: gates");
    }
}

#[test]
fn long_setting_names_are_cut_with_a_stable_hash() {
    // Two tables with many keys: their full names share the first 64 characters. Expected names
    // from FNV-1a 64 (top 48 bits) computed in Python.
    let dir = tempfile::tempdir().unwrap();
    let keys = |d: f64| {
        format!(
            "{{ aaaaaaaaaaaaaaaaaaaa = 1.0, bbbbbbbbbbbbbbbbbbbb = 1.0, cccccccccccccccccccc = 1.0, dddddddddddddddddddd = {d:.1} }}"
        )
    };
    let f = sweep_file(
        dir.path(),
        "long",
        &format!(
            "[labels]\n\"data.mixture\" = \"mix\"\n[axes]\n\"data.mixture\" = [{}, {}]\n",
            keys(1.0),
            keys(2.0)
        ),
    );
    let (plan, _) = sweep::expand(&f).unwrap();
    let names: Vec<&str> = plan.runs.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "mix-aaaaaaaaaaaaaaaaaaaa1.0-bbbbbbbbbbbbbbbbbbbb1.0-cccccccccccc-30ce06239055_seed0",
            "mix-aaaaaaaaaaaaaaaaaaaa1.0-bbbbbbbbbbbbbbbbbbbb1.0-cccccccccccc-3882b123946c_seed0",
        ]
    );
}

#[test]
fn bad_sweeps_fail_before_running_with_the_file_and_what_is_valid() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "zip_len",
            "combine = \"zip\"\n[axes]\n\"optim.lr\" = [1e-3, 2e-3]\n\"train.steps\" = [8]\n",
            "equal length",
        ),
        (
            "scalar",
            "[axes]\n\"optim.lr\" = 1e-3\n",
            "expected an array",
        ),
        (
            "unknown",
            "axis = 3\n[axes]\n\"optim.lr\" = [1e-3]\n",
            "valid keys",
        ),
        (
            "badvalue",
            "[axes]\n\"optim.lr\" = [1e-3, -1.0]\n",
            "optim.lr",
        ),
        ("nokey", "[axes]\n\"optim.lrr\" = [1e-3]\n", "optim.lrr"),
        (
            "combine",
            "combine = \"cartesian\"\n[axes]\n\"optim.lr\" = [1e-3]\n",
            "combine",
        ),
        (
            "label",
            "[labels]\nx = \"y\"\n[axes]\n\"optim.lr\" = [1e-3]\n",
            "labels.x",
        ),
    ];
    for (name, body, needle) in cases {
        let f = sweep_file(dir.path(), name, body);
        let err = format!("{:#}", sweep::expand(&f).unwrap_err());
        assert!(err.contains(needle), "{name}: {err}");
        assert!(
            err.contains(&format!("{name}.toml")),
            "{name}: names the file: {err}"
        );
    }
}

fn final_val_loss(run_dir: &Path) -> f64 {
    common::series(run_dir, "val/loss").last().unwrap().1
}

#[test]
fn failures_are_isolated_finished_runs_skipped_and_interrupted_runs_resume_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let f = sweep_file(
        dir.path(),
        "iso",
        "seeds = [0, 1]\n[axes]\n\"optim.lr\" = [3e-3, 1e12]\n",
    );
    let (plan, _) = sweep::expand(&f).unwrap();
    // One run is interrupted by hand before the sweep starts: checkpoint at step 4 of 8.
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["sweep", f.to_str().unwrap(), "--dry-run"],
    );
    assert_eq!(code, 0, "{out}");
    let plan_file = plan.dir.join("plans").join("lr-0.003_seed1.toml");
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &[
            "train",
            plan_file.to_str().unwrap(),
            "--stop-after",
            "4",
            "--quiet",
        ],
    );
    assert_eq!(code, 0, "{out}");
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["sweep", f.to_str().unwrap(), "--jobs", "2"],
    );
    assert_eq!(code, 1, "a failed run makes the sweep exit 1: {out}");
    assert!(
        out.contains("2 done, 0 skipped") && out.contains("2 failed"),
        "{out}"
    );
    assert!(out.contains("non-finite"), "the failure says why: {out}");
    for seed in [0, 1] {
        let s = sweep::read_status(&plan.dir, &format!("lr-1000000000000.0_seed{seed}")).unwrap();
        assert_eq!(s.state, "failed");
        assert!(s.error.unwrap().contains("non-finite"));
        let s = sweep::read_status(&plan.dir, &format!("lr-0.003_seed{seed}")).unwrap();
        assert_eq!(s.state, "done");
    }
    // The real TensorBoard lists both finished runs in its HParams dashboard, with their LR,
    // seed and final metrics, and shows the Custom Scalars layout's Sink₁-at-every-ε chart.
    let (ok, out) = common::run_python("check_hparams.py", &[plan.dir.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(
        out.contains("HParams check OK: 2 runs, 2 hyper-parameters"),
        "{out}"
    );
    let log = std::fs::read_to_string(plan.dir.join("logs/lr-0.003_seed1.log")).unwrap();
    assert!(log.contains("resum"), "the interrupted run resumed: {log}");
    // The resumed run ends exactly where an uninterrupted one does.
    let g = sweep_file(
        dir.path(),
        "fresh",
        "seeds = [1]\n[axes]\n\"optim.lr\" = [3e-3]\n",
    );
    let (code, out) = sinklab_output(Some(dir.path()), &["sweep", g.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let fresh = final_val_loss(&dir.path().join("sweeps/fresh/lr-0.003_seed1"));
    let resumed = final_val_loss(&plan.dir.join("lr-0.003_seed1"));
    assert_eq!(fresh, resumed);
    // Running again skips what finished and retries what failed.
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["sweep", f.to_str().unwrap(), "--jobs", "2"],
    );
    assert_eq!(code, 1);
    assert!(
        out.contains("0 done, 2 skipped") && out.contains("2 failed"),
        "{out}"
    );
    // The report covers every setting and lists the failures.
    let (code, md) = sinklab_output(
        Some(dir.path()),
        &["report", plan.dir.to_str().unwrap(), "--eps", "0.2"],
    );
    assert_eq!(code, 0, "{md}");
    assert!(md.contains("| 0.003 | 2/2 |"), "{md}");
    assert!(md.contains("| 1000000000000.0 | 0/2 |"), "{md}");
    assert!(md.contains("Runs that did not finish"), "{md}");
    // F-Attn's column carries the floor of uniform causal attention at the probe length
    let t = sinklab::config::load(&plan.dir.join("plans/lr-0.003_seed0.toml"), &[])
        .unwrap()
        .metrics
        .probe_len;
    let floor = format!(
        "F-Attn (%; uniform {:.2} at T = {t})",
        100.0 * sinklab::metrics::uniform_first_mass(t)
    );
    assert!(md.contains(&floor), "{floor} not in {md}");
    let csv = std::fs::read_to_string(plan.dir.join("report.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(csv.starts_with("lr,seeds_done,seeds,sink1_mean"), "{csv}");
    // Bondarenko et al.'s outlier numbers and the secondary sinks of the finished setting: a
    // Pearson kurtosis is at least ((n − 1)/n)² ≈ 1, max |h| is finite and positive, and a
    // count of secondary sinks lies in 0..=T
    let head: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| -> f64 {
        let i = head.iter().position(|h| *h == name).expect(name);
        row[i]
            .parse()
            .unwrap_or_else(|_| panic!("{name} = {:?} in {csv}", row[i]))
    };
    let k = col("kurtosis_mean");
    assert!((0.9..1e6).contains(&k), "kurtosis {k}");
    let m = col("max_abs_mean");
    assert!(m > 0.0 && m < 1e4, "max |h| {m}");
    let sec = col("secondary_mean");
    assert!((0.0..=64.0).contains(&sec), "secondary sinks {sec}");
    for name in ["slot mass (%)", "kurtosis", "max |h|", "secondary sinks"] {
        assert!(md.contains(&format!("| {name} |")), "{name} column in {md}");
    }
    for png in ["sink1_vs_lr.png", "emergence.png", "val_loss.png"] {
        let b = std::fs::read(plan.dir.join(png)).unwrap();
        assert!(b.starts_with(b"\x89PNG"), "{png}");
    }
    assert!(md.contains("![val_loss.png](val_loss.png)"), "{md}");
    // val_loss.png's data: every evaluation of each run, ending at its final validation loss.
    let rj: serde_json::Value =
        serde_json::from_slice(&std::fs::read(plan.dir.join("report.json")).unwrap()).unwrap();
    let run = rj
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["runs"].as_array().unwrap())
        .find(|r| r["name"] == "lr-0.003_seed1")
        .unwrap();
    let curve = run["val_curve"].as_array().unwrap();
    let evals = curve
        .iter()
        .map(|p| p[0].as_u64().unwrap())
        .collect::<Vec<_>>();
    assert!(
        evals.len() >= 2 && evals.windows(2).all(|w| w[0] < w[1]),
        "{run}"
    );
    assert_eq!(curve.last().unwrap()[1].as_f64(), Some(resumed), "{run}");
}

#[test]
fn slurm_array_script_and_single_index() {
    let dir = tempfile::tempdir().unwrap();
    let f = sweep_file(
        dir.path(),
        "arr",
        "seeds = [0, 1, 2]\n[axes]\n\"optim.lr\" = [3e-3]\n",
    );
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["sweep", f.to_str().unwrap(), "--emit", "slurm"],
    );
    assert_eq!(code, 0, "{out}");
    let script = std::fs::read_to_string(dir.path().join("sweeps/arr/slurm.sh")).unwrap();
    assert!(script.contains("#SBATCH --array=0-2"), "{script}");
    assert!(
        script.contains("--index \"$SLURM_ARRAY_TASK_ID\""),
        "{script}"
    );
    assert!(
        !script.contains("--gres"),
        "CPU runs ask for no GPU: {script}"
    );
    let syntax = Command::new("bash")
        .args([
            "-n",
            dir.path().join("sweeps/arr/slurm.sh").to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(syntax.success(), "the script parses: {script}");
    // GPU sweeps request one GPU per task (the shipped 60M sweeps run on cuda).
    let gu = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/sweeps/gu60m/lr.toml");
    let (gplan, gexps) = sweep::expand(&gu).unwrap();
    let cluster = sweep::slurm::resolve(&gplan.slurm, &Default::default(), &gexps).unwrap();
    let inv = sweep::slurm::Invocation {
        exe: Path::new("/opt/sinklab"),
        cwd: Path::new("/src"),
        out_dir: Some(Path::new("/scratch/sweeps")),
    };
    let gscript = sweep::slurm::array_script(&gplan, &cluster, &inv).unwrap();
    assert!(gscript.contains("#SBATCH --gres=gpu:1\n"), "{gscript}");
    assert!(
        gscript.contains("--out-dir /scratch/sweeps --index"),
        "{gscript}"
    );
    assert!(gscript.contains(&format!("#SBATCH --array=0-{}", gplan.runs.len() - 1)));
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["sweep", f.to_str().unwrap(), "--index", "1"],
    );
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 done"), "{out}");
    let plan = sweep::read_plan(&dir.path().join("sweeps/arr")).unwrap();
    let states: Vec<Option<String>> = plan
        .runs
        .iter()
        .map(|r| sweep::read_status(&plan.dir, &r.name).map(|s| s.state))
        .collect();
    assert_eq!(states, [None, Some("done".into()), None]);
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["sweep", f.to_str().unwrap(), "--index", "3"],
    );
    assert_eq!(code, 1);
    assert!(out.contains("--index 3"), "{out}");
}

#[test]
fn sigint_checkpoints_every_running_run_and_stops_the_sweep() {
    let dir = tempfile::tempdir().unwrap();
    let f = sweep_file(
        dir.path(),
        "sig",
        "seeds = [0, 1]\n[set]\ntrain = { steps = 3000, checkpoint_every = 1000, eval_every = 1000 }\nmetrics = { every = 1000 }\n[axes]\n\"optim.lr\" = [3e-3]\n",
    );
    let child = Command::new(env!("CARGO_BIN_EXE_sinklab"))
        .args(["sweep", f.to_str().unwrap(), "--jobs", "2"])
        .current_dir(dir.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let plan_dir = dir.path().join("sweeps/sig");
    // Wait until both runs have started training, then interrupt the sweep.
    let started = |name: &str| {
        std::fs::read_to_string(plan_dir.join(format!("logs/{name}.log")))
            .is_ok_and(|l| l.contains("step "))
    };
    let t0 = std::time::Instant::now();
    while !(started("lr-0.003_seed0") && started("lr-0.003_seed1")) {
        assert!(t0.elapsed().as_secs() < 120, "runs did not start");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGINT);
    }
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(130), "{text}");
    assert!(text.contains("2 interrupted"), "{text}");
    for seed in [0, 1] {
        let name = format!("lr-0.003_seed{seed}");
        assert_eq!(
            sweep::read_status(&plan_dir, &name).unwrap().state,
            "interrupted"
        );
        let ckpts = sinklab::checkpoint::list_checkpoints(&plan_dir.join(&name));
        let (step, _) = ckpts.last().expect("checkpointed on interrupt");
        assert!(*step < 3000, "stopped early at {step}");
    }
}

/// The runner reads each run's `summary.json` typed (`TrainSummary`): a summary written before
/// `interrupted` existed reads as not interrupted instead of failing to parse.
#[test]
fn a_summary_without_newer_fields_still_reads() {
    let old = r#"{"run_dir": "runs/x", "steps_done": 8, "first_loss": 5.5, "last_loss": 4.0,
        "last_val_loss": null, "last_sink1": null, "tokens_per_s": 100.0}"#;
    let s: sinklab::train::TrainSummary = serde_json::from_str(old).unwrap();
    assert!(!s.interrupted);
    assert_eq!(s.steps_done, 8);
}
