//! Every shipped model-zoo experiment (`experiments/zoo/*.toml`) trains: shrunk to a tiny size,
//! a few dozen steps on the embedded corpus must lower the loss, write the sink metrics the
//! variant promises (slot mass for slots and sink tokens, gate means for gates), and leave a
//! checkpoint that Python's `safetensors` loads with the same tensors.

use crate::common;

use common::*;
use sinklab::config::{
    self, BlockConfig, Experiment, GateConfig, ShapingConfig, SlotConfig, SpaConfig,
    ValueOutputConfig,
};
use sinklab::metrics::Proxy;
use sinklab::train::{self, TrainOptions};

const TINY: &[&str] = &[
    "model.d_model=32",
    "model.n_layers=2",
    "model.n_heads=4",
    "model.d_ff=64",
    "model.ctx=48",
    "data.tokenizer={kind=\"byte\"}",
    "optim.lr=3e-3",
    "optim.weight_decay=0.1",
    "optim.schedule={kind=\"constant\", warmup=2}",
    "train.steps=24",
    "train.batch_tokens=384",
    "train.micro_batch=4",
    "train.eval_every=12",
    "train.eval_sequences=8",
    "train.checkpoint_every=24",
    "train.log_every=1",
    "metrics.every=12",
    "metrics.probe_sequences=8",
    "metrics.probe_len=32",
];

#[test]
fn every_zoo_variant_trains_writes_its_metrics_and_a_loadable_checkpoint() {
    let zoo = experiment_files("experiments/zoo");
    let skipless = experiment_files("experiments/skipless");
    assert!(zoo.len() >= 40, "{} zoo files", zoo.len());
    assert!(skipless.len() >= 8, "{} skipless files", skipless.len());
    let files: Vec<_> = zoo.into_iter().chain(skipless).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for file in &files {
        let name = file.file_stem().unwrap().to_string_lossy().to_string();
        let mut o: Vec<String> = TINY.iter().map(|s| s.to_string()).collect();
        o.push(format!(
            "run.out_dir=\"{}\"",
            dir.path().join("runs").display()
        ));
        o.push(format!(
            "data.cache_dir=\"{}\"",
            dir.path().join("cache").display()
        ));
        let exp = match config::load(file, &o) {
            Ok(e) => e,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        let quiet = TrainOptions {
            quiet: true,
            ..TrainOptions::default()
        };
        if let Err(e) = train::train(&exp, &quiet, &mut |_| {}) {
            failures.push(format!("{name}: training failed: {e:#}"));
            continue;
        }
        let run = exp.run_dir();
        let losses = series(&run, "train/loss");
        let (first, last) = (losses[0].1, losses[losses.len() - 1].1);
        if !(last < first - 0.3 && last.is_finite()) {
            failures.push(format!(
                "{name}: loss {first:.3} -> {last:.3} did not fall by 0.3"
            ));
        }
        let a = &exp.model.attention;
        let mut tags = vec![
            "sink/rate_eps0.3/pos01".to_string(),
            "attn/f_attn".into(),
            "act/m_act".into(),
            "act/norm_ratio/layer01".into(),
            "act/kurtosis/layer01".into(),
            "attn_out/max_abs/layer01".into(),
            "sink/secondary_heads/layer01".into(),
            "repr/entropy_norm/layer01".into(),
            "sink/layer_rate_eps0.3/layer01".into(),
        ];
        // softmax_n's implicit zero key, or the unused share of a softpick / clipped row
        let has_slot = a.slot.slot_columns() > 0
            || exp.model.sink_tokens > 0
            || Proxy::for_normaliser(&a.normaliser) == Proxy::ImplicitSlot;
        if has_slot {
            tags.push("sink/slot_rate_eps0.3".into());
            tags.push("sink/slot_mass/layer01".into());
        }
        if a.gate != (GateConfig::None {}) {
            tags.push("attn/gate_mean/layer01".into());
        }
        // Trained gains are logged under their parameter names.
        tags.extend(gain_tags(&exp));
        for tag in &tags {
            let v = series(&run, tag);
            if v.iter().map(|x| x.0).collect::<Vec<_>>() != vec![0, 12, 24]
                || v.iter().any(|x| !x.1.is_finite())
            {
                failures.push(format!("{name}: metric {tag} = {v:?}"));
            }
        }
        if !has_slot && !series(&run, "sink/slot_rate_eps0.3").is_empty() {
            failures.push(format!("{name}: slot metrics without a slot"));
        }
        // The checkpoint in Python: every tensor, the same shapes and sums.
        let ckpt = run.join("checkpoints/step_00000024/model.safetensors");
        let tok = run.join("tokenizer.json");
        let (ok, out) = run_python(
            "check_run_files.py",
            &[ckpt.to_str().unwrap(), tok.to_str().unwrap(), "sink tokens"],
        );
        if !ok {
            failures.push(format!(
                "{name}: python could not read the checkpoint: {out}"
            ));
            continue;
        }
        let py: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
        let ours = sinklab::checkpoint::load_safetensors(&ckpt).unwrap();
        let theirs = py["tensors"].as_object().unwrap();
        if theirs.len() != ours.len() {
            failures.push(format!(
                "{name}: python sees {} tensors, sinklab {}",
                theirs.len(),
                ours.len()
            ));
        }
        for (k, t) in &ours {
            let Some(p) = theirs.get(k) else {
                failures.push(format!("{name}: python lacks {k}"));
                continue;
            };
            let shape: Vec<usize> = p["shape"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            let sum: f64 = t.data.iter().map(|&x| x as f64).sum();
            let psum = p["sum"].as_f64().unwrap();
            if shape != t.shape || (sum - psum).abs() > 1e-9 * (1.0 + sum.abs()) {
                failures.push(format!("{name}: {k} differs in python"));
            }
        }
        // The slot's parameters are in the checkpoint under their documented names.
        let want: &[&str] = match &a.slot {
            SlotConfig::None {} => &[],
            SlotConfig::SinkLogit { .. } => &["blocks.0.attn.sink_logit"],
            SlotConfig::KvBias { .. } | SlotConfig::KBias { .. } => {
                &["blocks.0.attn.k_star", "blocks.0.attn.v_star"]
            }
            SlotConfig::VBias { .. } => &["blocks.0.attn.v_bias"],
            SlotConfig::MemoryKv { .. } => &["blocks.0.attn.mem_k", "blocks.0.attn.mem_v"],
        };
        let mut want: Vec<&str> = want.to_vec();
        if a.spa != (SpaConfig::None {}) {
            want.extend(["blocks.1.attn.spa_bias", "blocks.1.attn.spa_scale"]);
        }
        if let ValueOutputConfig::Reparam { .. } = a.value_output {
            want.extend(["blocks.1.attn.wv.w_init", "blocks.1.attn.wo.w_init"]);
        }
        if let ValueOutputConfig::Identity { .. } = a.value_output {
            want.push("blocks.0.attn.wv.w_init");
            for absent in ["blocks.1.attn.wv.weight", "blocks.0.attn.wo.weight"] {
                if ours.contains_key(absent) {
                    failures.push(format!("{name}: {absent} should not exist (identity)"));
                }
            }
        }
        for w in want {
            if !ours.contains_key(w) {
                failures.push(format!("{name}: checkpoint lacks {w}"));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// TensorBoard tags of a few of the trained gains an experiment has (layer 1 of 2).
fn gain_tags(exp: &Experiment) -> Vec<String> {
    let a = &exp.model.attention;
    let mut tags = Vec::new();
    let trained_ff = match &exp.model.block {
        BlockConfig::PreNorm { gains } => gains.beta_ff.trainable,
        BlockConfig::Parallel { gains, .. } => gains.beta_ff.trainable,
        BlockConfig::Sas { beta_ff } | BlockConfig::SasP { beta_ff, .. } => beta_ff.trainable,
        BlockConfig::PostNorm {} => false,
    };
    if trained_ff {
        tags.push("gains/blocks.1.beta_ff".to_string());
    }
    match a.shaping {
        ShapingConfig::ValueSkipinit {
            trainable: true, ..
        } => tags.push("gains/blocks.1.attn.shape_beta/h3".into()),
        ShapingConfig::Shaped {
            trainable: true, ..
        } => tags.push("gains/blocks.1.attn.shape_gamma/h3".into()),
        _ => {}
    }
    if let ValueOutputConfig::Reparam { alpha, beta, .. } = a.value_output {
        if alpha.trainable {
            tags.push("gains/blocks.1.attn.wv.alpha".into());
        }
        if beta.trainable {
            tags.push("gains/blocks.1.attn.wo.beta".into());
        }
    }
    tags
}
