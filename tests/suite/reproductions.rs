//! The papers' headline claims reproduced at CPU scale (`experiments/results/`, README
//! "Headline results"), each pipeline run end to end at a shrunken size: the shipped files, the
//! commands that produced the committed reports, and the numbers those reports are read from.

use crate::common::{self, read_json, sinklab_output};
use std::path::{Path, PathBuf};

fn repo(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(p)
}

/// Sizes that keep every variant of a shipped file trainable in a second or two.
const TINY_SET: &str = r#"
[set.model]
d_model = 32
n_heads = 2
d_ff = 64
ctx = 32
[set.data]
tokenizer = { kind = "byte" }
[set.optim]
schedule = { kind = "constant", warmup = 2 }
[set.train]
steps = 12
batch_tokens = 256
micro_batch = 4
eval_every = 4
eval_sequences = 4
checkpoint_every = 12
[set.metrics]
every = 12
probe_sequences = 4
probe_len = 16
[set.metrics.heads]
n = 7
sequences = 2
"#;

/// He & Hofmann's depth comparison (`experiments/sweeps/repro/depth.toml`): the shipped sweep
/// with its variants and depth ratio, shrunk; every run finishes, the report has one row per
/// variant and depth over both seeds and the validation-loss curves it is read from.
#[test]
fn depth_sweep_runs_every_variant_at_both_depths_and_reports_the_loss_curves() {
    let shipped = repo("experiments/sweeps/repro/depth.toml");
    let mut sweep: toml::Table =
        toml::from_str(&std::fs::read_to_string(&shipped).unwrap()).unwrap();
    let axes = sweep["axes"].as_table().unwrap().clone();
    let depths: Vec<i64> = axes["model.n_layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_integer().unwrap())
        .collect();
    assert!(
        depths.len() == 2 && depths[1] >= 4 * depths[0],
        "a 4× depth ratio: {depths:?}"
    );
    let variants: Vec<String> = axes["base"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect();
    for v in ["pre_ln", "sas", "sas_p", "value_skipinit"] {
        assert!(
            variants.iter().any(|f| f.ends_with(&format!("/{v}.toml"))),
            "{v}: {variants:?}"
        );
    }
    assert_eq!(sweep["seeds"].as_array().unwrap().len(), 2);
    // The same sweep, shrunk: paths made absolute, depths 1 and 4, tiny models.
    let dir = tempfile::tempdir().unwrap();
    let abs = |f: &str| shipped.parent().unwrap().join(f).display().to_string();
    sweep.insert("base".into(), abs(sweep["base"].as_str().unwrap()).into());
    sweep.insert(
        "out_dir".into(),
        dir.path().join("sweeps").display().to_string().into(),
    );
    sweep.remove("set");
    let mut a = toml::Table::new();
    a.insert(
        "base".into(),
        variants
            .iter()
            .map(|f| toml::Value::from(abs(f)))
            .collect::<Vec<_>>()
            .into(),
    );
    a.insert("model.n_layers".into(), vec![1i64, 4].into());
    sweep.insert("axes".into(), a.into());
    let text = format!("{}\n{TINY_SET}", toml::to_string(&sweep).unwrap());
    let f = dir.path().join("depth.toml");
    std::fs::write(&f, &text).unwrap();
    let (code, out) = sinklab_output(
        Some(dir.path()),
        &["sweep", f.to_str().unwrap(), "--jobs", "2"],
    );
    assert_eq!(code, 0, "{out}\n{text}");
    let sweep_dir = dir.path().join("sweeps/cpu_depth");
    let (code, md) = sinklab_output(Some(dir.path()), &["report", sweep_dir.to_str().unwrap()]);
    assert_eq!(code, 0, "{md}");
    for v in ["pre_ln", "sas", "sas_p", "value_skipinit"] {
        for l in [1, 4] {
            assert!(
                md.contains(&format!("| {v} | {l} | 2/2 |")),
                "{v} × {l} layers: {md}"
            );
        }
    }
    assert!(
        std::fs::read(sweep_dir.join("val_loss.png"))
            .unwrap()
            .starts_with(b"\x89PNG")
    );
    let rj = read_json(&sweep_dir.join("report.json"));
    let settings = rj.as_array().unwrap();
    assert_eq!(settings.len(), 8);
    for s in settings {
        for r in s["runs"].as_array().unwrap() {
            let steps: Vec<u64> = r["val_curve"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p[0].as_u64().unwrap())
                .collect();
            assert_eq!(steps, [0, 4, 8, 12], "{r}");
            let v = r["val_loss"].as_f64().unwrap();
            assert!(v.is_finite() && v < (256f64).ln() + 0.5, "{r}");
        }
    }
}

/// `--set` assignments that shrink a shipped experiment to a second of training in `dir`.
fn tiny(dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut o: Vec<String> = [
        "model.d_model=32",
        "model.n_layers=2",
        "model.n_heads=2",
        "model.d_ff=64",
        "model.ctx=32",
        "data.tokenizer={kind=\"byte\"}",
        "optim.schedule={kind=\"constant\", warmup=2}",
        "train.steps=16",
        "train.batch_tokens=256",
        "train.micro_batch=4",
        "train.eval_every=8",
        "train.eval_sequences=4",
        "train.checkpoint_every=16",
        "metrics.every=16",
        "metrics.probe_sequences=4",
        "metrics.probe_len=16",
        "metrics.heads.n=7",
        "metrics.heads.sequences=2",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain(extra.iter().map(|s| s.to_string()))
    .collect();
    o.push(format!("run.out_dir=\"{}\"", dir.join("runs").display()));
    o.push(format!(
        "data.cache_dir=\"{}\"",
        dir.join("cache").display()
    ));
    o
}

/// StreamingLLM §3.3 (`experiments/streaming/`, `experiments/sweeps/repro/streaming.toml`): the
/// three models differ in one setting each and stream with 0, 1, 2 and 4 kept tokens of one
/// budget, dense attention beside them, as the committed Table 3 is read.
#[test]
fn streaming_models_differ_in_one_setting_and_stream_with_0_1_2_4_kept_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let load = |f: &str| {
        sinklab::config::load(
            &repo(&format!("experiments/streaming/{f}.toml")),
            &tiny(dir.path(), &[]),
        )
        .unwrap()
    };
    let (vanilla, token, zero) = (load("vanilla"), load("sink_token"), load("softmax1"));
    assert!(!vanilla.data.bos, "StreamingLLM's models have no BOS");
    assert_eq!((vanilla.model.sink_tokens, token.model.sink_tokens), (0, 1));
    assert_eq!(
        zero.model.attention.normaliser,
        sinklab::config::NormaliserConfig::SoftmaxN { n: 1.0 }
    );
    // otherwise identical: the same model (up to the one setting), data and training
    let mut t = token.clone();
    t.model.sink_tokens = 0;
    let mut z = zero.clone();
    z.model.attention.normaliser = vanilla.model.attention.normaliser.clone();
    for (name, e) in [("sink_token", &t), ("softmax1", &z)] {
        assert_eq!(
            format!("{:?}", e.model),
            format!("{:?}", vanilla.model),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", e.data),
            format!("{:?}", vanilla.data),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", e.train),
            format!("{:?}", vanilla.train),
            "{name}"
        );
        assert_eq!(
            format!("{:?}", e.optim),
            format!("{:?}", vanilla.optim),
            "{name}"
        );
    }
    let (plan, _) =
        sinklab::sweep::expand(&repo("experiments/sweeps/repro/streaming.toml")).unwrap();
    assert_eq!(plan.runs.len(), 3);
    for exp in [&vanilla, &token, &zero] {
        sinklab::train::train(exp, &common::quiet(), &mut |_| {}).unwrap();
        let run = exp.run_dir().display().to_string();
        let out = dir.path().join(format!("stream_{}", exp.run.name));
        let (code, text) = sinklab_output(
            None,
            &[
                "stream-eval",
                &run,
                "--kept",
                "0,1,2,4",
                "--window",
                "12",
                "--sinks",
                "4",
                "--tokens",
                "80",
                "--no-recompute",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{text}");
        let sj = read_json(&out.join("stream.json"));
        assert_eq!(sj["budget"].as_u64(), Some(16));
        assert_eq!(
            sj["model_sink_tokens"].as_u64(),
            Some(exp.model.sink_tokens as u64)
        );
        let rows = sj["rows"].as_array().unwrap();
        let kept: Vec<Option<u64>> = rows.iter().map(|r| r["sinks"].as_u64()).collect();
        assert_eq!(kept, [None, Some(0), Some(1), Some(2), Some(4)], "{sj}");
        for r in rows {
            assert_eq!(r["scored"].as_u64(), Some(79), "{r}");
            assert!(r["ppl"].as_f64().unwrap().is_finite(), "{r}");
        }
        // past the context (32) the dense row still has positions (RoPE)
        assert!(rows[0]["ppl_past_ctx"].as_f64().is_some(), "{sj}");
    }
}

/// The newest checkpoint's tensors of a run directory.
fn weights(run: &Path) -> std::collections::BTreeMap<String, sinklab::checkpoint::HostTensor> {
    let (_, ckpt) = sinklab::run::locate_checkpoint(run).unwrap();
    sinklab::checkpoint::load_safetensors(&ckpt.join("model.safetensors")).unwrap()
}

/// SmolLM2-135M given a sink slot (`experiments/smollm2/`): the shipped files, run as
/// experiments/results/smollm2_slot/README.md says (import into runs/smollm2, then train from
/// the repository root), shrunk to two steps of 16 tokens. The shipped base `smollm2.toml` is what the import writes. Only the parameters named in `train.trainable` change; the slot is there and
/// measured by `analyze`; `stream-eval` streams it with the window only.
#[test]
fn smollm2_slot_experiments_train_only_what_they_name_and_are_measured() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let (code, text) = sinklab_output(
        Some(root),
        &[
            "import",
            common::smollm2().to_str().unwrap(),
            "--out",
            "runs/smollm2",
        ],
    );
    assert_eq!(code, 0, "{text}");
    std::fs::create_dir_all(root.join("experiments/smollm2")).unwrap();
    let files = ["sink_logit", "sink_logit_qk", "sink_logit_window"];
    for f in files.iter().chain(&["smollm2"]) {
        std::fs::copy(
            repo(&format!("experiments/smollm2/{f}.toml")),
            root.join(format!("experiments/smollm2/{f}.toml")),
        )
        .unwrap();
    }
    let imported = std::fs::read_to_string(root.join("runs/smollm2/resolved.toml")).unwrap();
    let shipped = std::fs::read_to_string(repo("experiments/smollm2/smollm2.toml")).unwrap();
    assert!(
        shipped.ends_with(&imported),
        "experiments/smollm2/smollm2.toml is the import's resolved.toml"
    );
    let before = weights(&root.join("runs/smollm2"));
    for f in files {
        let (code, text) = sinklab_output(
            Some(root),
            &[
                "train",
                &format!("experiments/smollm2/{f}.toml"),
                "--quiet",
                "--set",
                "model.ctx=16",
                "--set",
                "train.steps=2",
                "--set",
                "optim.schedule={kind=\"constant\", warmup=1}",
                "--set",
                "train.batch_tokens=32",
                "--set",
                "train.micro_batch=1",
                "--set",
                "train.eval_every=2",
                "--set",
                "train.eval_sequences=2",
                "--set",
                "train.checkpoint_every=2",
                "--set",
                "metrics.every=2",
                "--set",
                "metrics.probe_sequences=2",
                "--set",
                "metrics.probe_len=16",
                "--set",
                "metrics.heads.n=7",
                "--set",
                "metrics.heads.sequences=1",
            ],
        );
        assert_eq!(code, 0, "{f}: {text}");
        let run = root.join("runs").join(format!("smollm2_{f}"));
        let after = weights(&run);
        let trains = |n: &str| {
            n.ends_with(".attn.sink_logit")
                || (f == "sink_logit_qk" && (n.contains(".attn.wq.") || n.contains(".attn.wk.")))
        };
        let mut changed = 0;
        for (n, t) in &after {
            match before.get(n) {
                None => assert!(
                    n.ends_with(".attn.sink_logit") && t.shape == [9],
                    "{f}: {n}"
                ),
                Some(b) if trains(n) => changed += usize::from(b.data != t.data),
                Some(b) => assert!(b.data == t.data, "{f}: frozen {n} changed"),
            }
        }
        assert_eq!(
            after.len(),
            before.len() + 30,
            "{f}: one sink logit per layer"
        );
        if f == "sink_logit_qk" {
            assert_eq!(changed, 60, "{f}: every W_Q and W_K moved");
        }
        let logits: Vec<f32> = (0..30)
            .flat_map(|l| after[&format!("blocks.{l}.attn.sink_logit")].data.clone())
            .collect();
        assert!(
            logits.iter().any(|z| *z != 0.0),
            "{f}: the sink logits moved from 0"
        );
        // analyze sees the slot: its mass per layer is in (0, 1)
        let out = root.join(format!("analysis_{f}"));
        let (code, text) = sinklab_output(
            Some(root),
            &[
                "analyze",
                run.to_str().unwrap(),
                "--len",
                "16",
                "--sequences",
                "2",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{f}: {text}");
        let aj = read_json(&out.join("analysis.json"));
        let slot = aj["kinds"]["natural"]["slot_mass"].as_array().unwrap();
        assert_eq!(slot.len(), 30);
        for m in slot {
            let m = m.as_f64().unwrap();
            assert!(m > 0.0 && m < 1.0, "{f}: slot mass {m}");
        }
        let (code, text) = sinklab_output(
            Some(root),
            &[
                "stream-eval",
                run.to_str().unwrap(),
                "--kept",
                "0",
                "--sinks",
                "0",
                "--window",
                "8",
                "--tokens",
                "24",
                "--no-recompute",
                "--out",
                out.to_str().unwrap(),
            ],
        );
        assert_eq!(code, 0, "{f}: {text}");
        let sj = read_json(&out.join("stream.json"));
        let names: Vec<&str> = sj["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["dense", "window only (0+8)"], "{f}");
    }
}
