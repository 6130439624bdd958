//! Skipless transformers (docs/reference.md §3): signal propagation at init, the shaped-attention
//! identity, U-SPA / E-SPA against an independent NumPy reference, gradient flow, weight decay
//! on gains, and the `sinklab init-check` measurement on the shipped experiments.
//!
//! The target kernels are written out again here from the formulas, so the kernel tests do not
//! trust `sinklab::spa`: an attention-only stack is checked against Σ_l directly.

use crate::common::{self, tensor_values};

use burn::tensor::{Device, Int, Tensor, TensorData};
use sinklab::checkpoint::HostTensor;
use sinklab::config::{self, DecayPolicy, Experiment};
use sinklab::model::{Lm, masked_nll};
use sinklab::optim::{self, GradAccumulator};
use sinklab::spa::kernel_stats;
use std::collections::BTreeMap;
use std::path::Path;

/// An experiment from a `[model]` body (TOML) over a tiny default.
fn exp(model: &str) -> Experiment {
    let table: toml::Table = toml::from_str(model).unwrap();
    let ctx = table.get("ctx").and_then(|v| v.as_integer()).unwrap_or(128);
    let text = format!(
        "[model]\n{model}\n[train]\nbatch_tokens = {ctx}\nmicro_batch = 1\n\
         [metrics]\nprobe_len = 8\nk_max = 3\n"
    );
    config::from_str("skipless.toml", &text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// An attention-only, skipless, normless stack: `x_l = Attn(x_{l−1})`.
fn attention_only(layers: usize, t: usize, attention: &str) -> Experiment {
    exp(&format!(
        "d_model = 32\nn_layers = {layers}\nn_heads = 4\nd_ff = 8\nctx = {t}\n\
         norm = {{ kind = \"none\" }}\nffn = {{ kind = \"none\" }}\npositions = {{ kind = \"nope\" }}\n\
         block = {{ kind = \"pre_norm\", gains = {{ alpha_sa = {{ init = 0.0 }} }} }}\n\
         [model.attention]\n{attention}"
    ))
}

/// t orthonormal rows of width d (the first t rows of a random orthogonal matrix): X Xᵀ = I.
fn orthonormal_rows(t: usize, d: usize, dev: &Device) -> Tensor<3> {
    let q = sinklab::model::orthogonal(&mut sinklab::model::HostRng::new(42), d);
    let rows: Vec<f32> = q[..t * d].to_vec();
    for i in 0..t {
        for j in 0..t {
            let dot: f64 = (0..d)
                .map(|k| rows[i * d + k] as f64 * rows[j * d + k] as f64)
                .sum();
            let want = if i == j { 1.0 } else { 0.0 };
            assert!((dot - want).abs() < 1e-6, "input is not orthonormal");
        }
    }
    Tensor::from_data(TensorData::new(rows, [1, t, d]), dev)
}

/// X Xᵀ of a (1, T, d) tensor, in f64.
fn gram(x: &[f32], t: usize, d: usize) -> Vec<f64> {
    let mut g = vec![0.0; t * t];
    for i in 0..t {
        for j in 0..t {
            g[i * t + j] = (0..d)
                .map(|k| x[i * d + k] as f64 * x[j * d + k] as f64)
                .sum();
        }
    }
    g
}

/// Σ_l of U-SPA (`rho` = ρ_L) or E-SPA (`gamma` = γ_L), from docs/reference.md §3.3.
fn target(kind: &str, x: f64, l: usize, layers: usize, t: usize) -> Vec<f64> {
    let f = l as f64 / layers as f64;
    let mut s = vec![0.0; t * t];
    for i in 0..t {
        for j in 0..t {
            s[i * t + j] = if i == j {
                1.0
            } else if l == 0 {
                0.0
            } else if kind == "u_spa" {
                1.0 - (1.0 - x).powf(f)
            } else {
                let gamma = -0.5 * (1.0 - (1.0 - (-2.0 * x).exp()).powf(f)).ln();
                (-gamma * (i as f64 - j as f64).abs()).exp()
            };
        }
    }
    s
}

#[test]
fn spa_attention_only_stacks_reproduce_the_target_kernels_at_depth_24() {
    let dev = common::device();
    let (layers, t, d) = (24, 16, 32);
    let x0 = orthonormal_rows(t, d, &dev);
    for (kind, key, x) in [("e_spa", "gamma", 0.05), ("u_spa", "rho", 0.8)] {
        for w0 in ["identity", "orthogonal"] {
            let e = attention_only(
                layers,
                t,
                &format!(
                    "query_init = \"zero\"\nvalue_output = {{ kind = \"reparam\", init = \"{w0}\" }}\n\
                     spa = {{ kind = \"{kind}\", {key} = {x} }}"
                ),
            );
            let m = Lm::new(&e.model, 11, 0, &dev);
            let hs = m.propagate(x0.clone());
            assert_eq!(hs.len(), layers + 1);
            let mut worst = 0f64;
            for (l, h) in hs.into_iter().enumerate() {
                let g = gram(&tensor_values(h), t, d);
                let s = target(kind, x, l, layers, t);
                let err = g
                    .iter()
                    .zip(&s)
                    .map(|(a, b)| (a - b).abs())
                    .fold(0.0, f64::max);
                worst = worst.max(err);
                assert!(
                    err < 1e-5,
                    "{kind} {w0}: layer {l}: max |X Xᵀ − Σ_l| = {err:.2e}"
                );
            }
            // The last kernel is far from both the identity and rank one.
            let s = target(kind, x, layers, layers, t);
            let off = (s.iter().sum::<f64>() - t as f64) / (t * (t - 1)) as f64;
            assert!(
                off > 0.3 && off < 0.95,
                "{kind}: final mean correlation {off}"
            );
            eprintln!("{kind} {w0}: worst |X Xᵀ − Σ_l| over 24 layers = {worst:.2e}");
        }
    }
}

#[test]
fn plain_skipless_softmax_collapses_while_e_spa_and_shaped_attention_do_not() {
    let dev = common::device();
    let (layers, t, d) = (24, 16, 32);
    let x0 = orthonormal_rows(t, d, &dev);
    let orth = "value_output = { kind = \"reparam\", init = \"orthogonal\" }";
    let cases = [
        ("plain softmax", orth.to_string()),
        (
            "e_spa",
            format!("{orth}\nquery_init = \"zero\"\nspa = {{ kind = \"e_spa\", gamma = 0.05 }}"),
        ),
        (
            "shaped",
            format!("{orth}\nquery_init = \"zero\"\nshaping = {{ kind = \"shaped\" }}"),
        ),
    ];
    let mut last = BTreeMap::new();
    for (name, attention) in cases {
        let e = attention_only(layers, t, &attention);
        let m = Lm::new(&e.model, 11, 0, &dev);
        let hs = m.propagate(x0.clone());
        let cos: Vec<f64> = hs
            .into_iter()
            .map(|h| kernel_stats(&tensor_values(h), 1, t, d).mean_cos)
            .collect();
        assert!(cos[0].abs() < 1e-6, "{name}: input cosine {}", cos[0]);
        last.insert(name, cos[layers]);
    }
    assert!(
        last["plain softmax"] > 0.999,
        "plain skipless softmax should collapse: {last:?}"
    );
    // E-SPA follows its target: mean off-diagonal exp(−γ_L |i − j|) at γ_L = 0.05, T = 16.
    let s = target("e_spa", 0.05, layers, layers, t);
    let want = (s.iter().sum::<f64>() - t as f64) / (t * (t - 1)) as f64;
    assert!((last["e_spa"] - want).abs() < 1e-3, "{last:?} vs {want}");
    assert!(want < 0.8);
    assert!(last["shaped"].abs() < 1e-5, "{last:?}");
}

#[test]
fn shaped_attention_is_the_identity_at_init() {
    let dev = common::device();
    let (t, d) = (10, 32);
    for first_layer_value in [false, true] {
        let e = exp(&format!(
            "d_model = 32\nn_layers = 3\nn_heads = 4\nd_ff = 8\nctx = {t}\nnorm = {{ kind = \"none\" }}\n\
             ffn = {{ kind = \"none\" }}\nblock = {{ kind = \"sas\", beta_ff = {{ init = 0.1, trainable = false }} }}\n\
             [model.attention]\nquery_init = \"zero\"\nshaping = {{ kind = \"shaped\" }}\n\
             value_output = {{ kind = \"identity\", first_layer_value = {first_layer_value} }}"
        ));
        let m = Lm::new(&e.model, 11, 0, &dev);
        // Random (not orthonormal) input: every block must return it unchanged.
        let x: Vec<f32> = sinklab::model::HostRng::new(7).normal(t * d, 1.0);
        let x0 = Tensor::<3>::from_data(TensorData::new(x.clone(), [1, t, d]), &dev);
        for (l, h) in m.propagate(x0).into_iter().enumerate() {
            let worst = tensor_values(h)
                .iter()
                .zip(&x)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(
                worst < 1e-5,
                "layer {l} (first_layer_value {first_layer_value}): |out − in| = {worst}"
            );
        }
        // And the softmax part the probe records is the uniform causal C (W_Q = 0).
        let tokens = Tensor::<2, Int>::from_data(
            TensorData::new((0..t as i64).map(|i| i % 11).collect::<Vec<_>>(), [1, t]),
            &dev,
        );
        let (_, probes) = m.forward_probe(tokens);
        let a = probes[1]
            .attn
            .clone()
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap();
        for hq in 0..4 * t {
            let (i, row) = (hq % t, &a[hq * t..(hq + 1) * t]);
            for (j, &v) in row.iter().enumerate() {
                let want = if j <= i { 1.0 / (i + 1) as f32 } else { 0.0 };
                assert!((v - want).abs() < 1e-6, "A[{i},{j}] = {v}, want {want}");
            }
        }
    }
}

#[test]
fn spa_bias_and_scale_match_the_numpy_reference() {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/spa_golden.json"),
    )
    .unwrap();
    let fixture: serde_json::Value = serde_json::from_str(&text).unwrap();
    let dev = common::device();
    for c in fixture["cases"].as_array().unwrap() {
        let name = c["name"].as_str().unwrap();
        let kind = c["kind"].as_str().unwrap();
        let key = if kind == "u_spa" { "rho" } else { "gamma" };
        let (layers, t) = (c["layers"].as_u64().unwrap(), c["t"].as_u64().unwrap());
        let e = exp(&format!(
            "d_model = 16\nn_layers = {layers}\nn_heads = 2\nd_ff = 8\nctx = {t}\n\
             [model.attention]\nquery_init = \"zero\"\nspa = {{ kind = \"{kind}\", {key} = {} }}",
            c["value"]
        ));
        let m = Lm::new(&e.model, 11, 0, &dev);
        let p = optim::export_params(&m);
        let rust = sinklab::spa::spa_layers(
            &e.model.attention.spa.target().unwrap(),
            layers as usize,
            t as usize,
        )
        .unwrap();
        for (l, want) in c["layers_out"].as_array().unwrap().iter().enumerate() {
            let floats = |v: &serde_json::Value| -> Vec<f64> {
                v.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            };
            let (wb, ws) = (floats(&want["bias"]), floats(&want["scale"]));
            // f64 construction: tight.
            for (a, b) in rust[l].bias.iter().zip(&wb) {
                assert!((a - b).abs() < 1e-9 * (1.0 + b.abs()), "{name} Γ_{}", l + 1);
            }
            for (a, b) in rust[l].scale.iter().zip(&ws) {
                assert!(
                    (a - b).abs() < 1e-10 * (1.0 + b.abs()),
                    "{name} D_{}",
                    l + 1
                );
            }
            let rel = (rust[l].min_entry - want["min_entry"].as_f64().unwrap()).abs()
                / want["min_entry"].as_f64().unwrap();
            assert!(rel < 1e-8, "{name} min entry");
            // The stored f32 constants of the model.
            let g = &p[&format!("blocks.{l}.attn.spa_bias")];
            let d = &p[&format!("blocks.{l}.attn.spa_scale")];
            assert_eq!(g.shape, vec![t as usize, t as usize]);
            for (a, b) in g.data.iter().zip(&wb) {
                assert!(
                    (*a as f64 - b).abs() < 1e-6 * (1.0 + b.abs()),
                    "{name} stored Γ"
                );
            }
            for (a, b) in d.data.iter().zip(&ws) {
                assert!(
                    (*a as f64 - b).abs() < 1e-6 * (1.0 + b.abs()),
                    "{name} stored D"
                );
            }
        }
    }
}

#[test]
fn impossible_skipless_combinations_are_refused_with_reasons() {
    let cases: [(&str, &[&str]); 6] = [
        (
            "[model.attention]\nspa = { kind = \"e_spa\", gamma = 20.0 }\nquery_init = \"zero\"",
            &["model.attention.spa", "not a positive normal float"],
        ),
        (
            "[model.attention]\nshaping = { kind = \"shaped\" }",
            &["model.attention.shaping", "query_init = \\\"zero\\\""],
        ),
        (
            "positions = { kind = \"alibi\" }\n[model.attention]\nquery_init = \"zero\"\n\
             spa = { kind = \"u_spa\", rho = 0.5 }",
            &["model.attention.spa", "alibi positions add a logit bias"],
        ),
        (
            "block = { kind = \"sas\" }",
            &["model.block.kind", "shaping = { kind = \\\"shaped\\\" }"],
        ),
        (
            "[model.attention]\nquery_init = \"zero\"\nshaping = { kind = \"shaped\" }\n\
             slot = { kind = \"sink_logit\" }",
            &["model.attention.shaping", "a slot adds keys"],
        ),
        (
            "[model.attention]\nspa = { kind = \"u_spa\", rho = 1.0 }\nquery_init = \"zero\"",
            &["model.attention.spa.rho", "0 < rho < 1"],
        ),
    ];
    for (body, want) in cases {
        let text = format!("[model]\nctx = 64\n{body}\n");
        let err = config::from_str("bad.toml", &text)
            .expect_err(body)
            .to_string();
        for w in want {
            assert!(
                err.contains(&w.replace("\\\"", "\"")),
                "{body}\n→ {err}\n(missing {w})"
            );
        }
    }
}

/// Every shipped CPU skipless experiment, shrunk: after perturbing the weights (at init several
/// gradients are exactly zero by construction: W_K when W_Q = 0, β_W when ΔW = 0), every
/// trainable parameter gets a finite non-zero gradient and no constant gets one.
#[test]
fn gradients_reach_every_trainable_parameter_and_never_a_constant() {
    let dev = common::device().autodiff();
    let files = common::experiment_files("experiments/skipless");
    assert!(files.len() >= 8);
    let shrink = [
        "model.d_model=16",
        "model.n_layers=3",
        "model.n_heads=2",
        "model.d_ff=24",
        "model.ctx=8",
        "train.batch_tokens=128",
        "metrics.probe_len=8",
        "metrics.k_max=3",
    ]
    .map(String::from);
    for file in files {
        let e = config::load(&file, &shrink).unwrap();
        let name = file.file_stem().unwrap().to_string_lossy().to_string();
        let m = Lm::new(&e.model, 13, 5, &dev);
        let mut p = optim::export_params(&m);
        let mut rng = sinklab::model::HostRng::new(9);
        for t in p.values_mut() {
            let noise = rng.normal(t.data.len(), 0.1);
            t.data.iter_mut().zip(noise).for_each(|(x, n)| *x += n);
        }
        let m = optim::import_params(m, &p).unwrap();
        let tok = |seed: u64| {
            let v: Vec<i64> = sinklab::model::HostRng::new(seed)
                .normal(16, 1.0)
                .iter()
                .map(|x| ((x.abs() * 7.0) as i64) % 13)
                .collect();
            Tensor::<2, Int>::from_data(TensorData::new(v, [2, 8]), &dev)
        };
        let loss = masked_nll(m.forward(tok(1)), tok(2), Tensor::ones([2, 8], &dev), 16.0);
        let mut acc = GradAccumulator::default();
        acc.add(&m, &loss.backward());
        // W_init and the SPA tables are constants; SAS's first-layer W_V = I + ΔW has fixed
        // α_W = β_W = 1, which are not parameters at all.
        let constant = |k: &str| k.ends_with(".w_init") || k.contains(".spa_");
        let mut seen_const = 0;
        for k in p.keys() {
            match acc.grads.get(k) {
                Some(g) => {
                    assert!(!constant(k), "{name}: constant {k} got a gradient");
                    let g = g.to_data().try_to_vec::<f32>().unwrap();
                    assert!(g.iter().all(|x| x.is_finite()), "{name}: {k} non-finite");
                    let norm: f32 = g.iter().map(|x| x * x).sum::<f32>().sqrt();
                    assert!(norm > 0.0, "{name}: {k} has a zero gradient");
                }
                None => {
                    assert!(constant(k), "{name}: {k} got no gradient");
                    seen_const += 1;
                }
            }
        }
        let expect_const = match name.as_str() {
            "value_skipinit" => 2 * 3, // w_init of W_V and W_O per layer
            "e_spa" | "u_spa" => 4 * 3,
            "sas" | "sas_p" | "sas_p_nonorm" => 1, // the first layer's W_V identity
            _ => 0,
        };
        assert_eq!(seen_const, expect_const, "{name}: constants");
    }
}

#[test]
fn weight_decay_never_touches_gains_by_default_and_all_still_decays_them() {
    let e = exp("n_layers = 2\nblock = { kind = \"sas_p\" }\n\
                 [model.attention]\nquery_init = \"zero\"\nshaping = { kind = \"shaped\" }\n\
                 value_output = { kind = \"identity\" }");
    let m = Lm::new(&e.model, 11, 0, &common::device());
    let p: BTreeMap<String, HostTensor> = optim::export_params(&m);
    let gains: Vec<&String> = p
        .keys()
        .filter(|k| {
            [
                ".beta_sa",
                ".beta_ff",
                ".shape_alpha",
                ".shape_beta",
                ".shape_gamma",
            ]
            .iter()
            .any(|s| k.ends_with(s))
        })
        .collect();
    assert_eq!(gains.len(), 2 * 5, "{gains:?}");
    for k in &gains {
        let rank = p[*k].shape.len();
        assert!(!optim::decays(DecayPolicy::MatricesOnly, k, rank), "{k}");
        assert!(optim::decays(DecayPolicy::All, k, rank), "{k}");
    }
    // The first layer's ΔW is a matrix and decays; its fixed W_init is never updated at all.
    assert!(optim::decays(
        DecayPolicy::MatricesOnly,
        "blocks.0.attn.wv.weight",
        2
    ));
}

#[test]
fn init_check_measures_collapse_on_the_shipped_experiments() {
    let dev = common::device();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/skipless");
    let dir = tempfile::tempdir().unwrap();
    let cache = format!("data.cache_dir=\"{}\"", dir.path().display());
    let mut last = BTreeMap::new();
    for name in ["vanilla_skipless", "e_spa", "u_spa", "sas", "pre_ln"] {
        let e = config::load(
            &root.join(format!("{name}.toml")),
            std::slice::from_ref(&cache),
        )
        .unwrap();
        let r = sinklab::commands::init_check::init_check(&e, &dev, 8, 64, &mut |_| {}).unwrap();
        assert_eq!(r.layers.len(), e.model.n_layers + 1);
        let top = r.layers.last().unwrap();
        if name.ends_with("spa") {
            assert!(top.spa_distance.is_some() && top.min_entry.unwrap() > 0.0);
        } else {
            assert!(top.spa_distance.is_none());
        }
        last.insert(name, top.mean_cos);
    }
    eprintln!("final-layer mean cosine at init: {last:?}");
    assert!(last["vanilla_skipless"] > 0.99, "{last:?}");
    for name in ["e_spa", "u_spa", "sas"] {
        assert!(last[name] < 0.95, "{name}: {last:?}");
    }
}
