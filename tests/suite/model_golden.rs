//! The model and optimizer against the independent NumPy reference
//! (`python3 scripts/reference_model.py` → tests/fixtures/model_golden.json), plus structural
//! properties of attention (causality, rows summing to one, fast path = probe path).

use burn::module::{Module, Param};
use burn::tensor::{Device, Int, Tensor, TensorData};
use serde_json::Value;
use sinklab::checkpoint::HostTensor;
use sinklab::config::{AttentionConfig, AttentionKernel, ModelConfig, OptimConfig, ScheduleConfig};
use sinklab::model::{Lm, masked_nll};
use sinklab::optim::{self, GradAccumulator, Optimizer};
use std::collections::BTreeMap;

use crate::common;
use common::fixture::{assert_close, float_rows, floats, host, int_rows};

fn golden() -> Value {
    common::golden("model_golden.json")
}

fn golden_model(g: &Value, kernel: AttentionKernel, dev: &Device) -> Lm {
    let c = &g["config"];
    let cfg = ModelConfig {
        d_model: c["d_model"].as_u64().unwrap() as usize,
        n_layers: c["n_layers"].as_u64().unwrap() as usize,
        n_heads: c["n_heads"].as_u64().unwrap() as usize,
        d_ff: c["d_ff"].as_u64().unwrap() as usize,
        ctx: c["ctx"].as_u64().unwrap() as usize,
        attention: AttentionConfig {
            kernel,
            ..AttentionConfig::default()
        },
        ..ModelConfig::default()
    };
    let model = Lm::new(&cfg, c["vocab"].as_u64().unwrap() as usize, 0, dev);
    let weights: BTreeMap<String, HostTensor> = g["weights"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), host(v)))
        .collect();
    optim::import_params(model, &weights).unwrap()
}

fn tokens(g: &Value, key: &str, dev: &Device) -> Tensor<2, Int> {
    let rows = g[key].as_array().unwrap().len();
    let data = int_rows(&g[key]).0;
    let cols = data.len() / rows;
    Tensor::from_data(TensorData::new(data, [rows, cols]), dev)
}

#[test]
fn logits_attention_and_loss_match_numpy() {
    let g = golden();
    let dev = common::device();
    for attention in [AttentionKernel::Manual, AttentionKernel::Fused] {
        let model = golden_model(&g, attention, &dev);
        let x = tokens(&g, "tokens", &dev);
        let logits = model.forward(x.clone());
        let got = logits.clone().into_data().try_to_vec::<f32>().unwrap();
        assert_close(
            &got,
            &floats(&g["logits"]),
            1e-4,
            1e-4,
            &format!("logits ({attention:?})"),
        );

        let mask = float_rows(&g["mask"]);
        let denom: f64 = mask.iter().map(|&m| m as f64).sum();
        let [b, t] = x.dims();
        let m = Tensor::<2>::from_data(TensorData::new(mask, [b, t]), &dev);
        let loss =
            masked_nll(logits, tokens(&g, "targets", &dev), m, denom).into_scalar::<f32>() as f64;
        let want = g["loss"].as_f64().unwrap();
        assert!(
            (loss - want).abs() < 1e-5 * want.abs().max(1.0),
            "loss {loss} vs {want}"
        );
    }
    // The probe path gives the same logits and the reference's attention weights.
    let model = golden_model(&g, AttentionKernel::Manual, &dev);
    let (logits, layers) = model.forward_probe(tokens(&g, "tokens", &dev));
    let got = logits.into_data().try_to_vec::<f32>().unwrap();
    assert_close(&got, &floats(&g["logits"]), 1e-4, 1e-4, "probe logits");
    let a = layers[1]
        .attn
        .clone()
        .unwrap()
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    assert_close(
        &a,
        &floats(&g["attn_layer1"]),
        1e-4,
        1e-6,
        "attention layer 1",
    );
}

#[test]
fn attention_is_causal_and_row_stochastic() {
    let g = golden();
    let dev = common::device();
    let model = golden_model(&g, AttentionKernel::Manual, &dev);
    let x = tokens(&g, "tokens", &dev);
    let (_, layers) = model.forward_probe(x.clone());
    for (l, p) in layers.iter().enumerate() {
        let attn = p.attn.clone().unwrap();
        let [b, h, t, _] = attn.dims();
        let a = attn.into_data().try_to_vec::<f32>().unwrap();
        for r in 0..b * h * t {
            let row = &a[r * t..(r + 1) * t];
            let q = r % t;
            assert!(
                row[q + 1..].iter().all(|&v| v == 0.0),
                "layer {l}: future keys exactly 0"
            );
            let s: f32 = row.iter().sum();
            assert!((s - 1.0).abs() < 1e-5, "layer {l} row {r} sums to {s}");
        }
        assert_eq!(p.hidden.as_ref().unwrap().dims(), [b, t, 16]);
    }
    // Changing the last token leaves every earlier position's logits unchanged.
    let base = model
        .forward(x.clone())
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let mut data = int_rows(&g["tokens"]).0;
    let t = 7;
    data[t - 1] = (data[t - 1] + 1) % 23;
    let x2 = Tensor::<2, Int>::from_data(TensorData::new(data, [2, t]), &dev);
    let changed = model.forward(x2).into_data().try_to_vec::<f32>().unwrap();
    let v = 23;
    for pos in 0..t {
        let a = &base[pos * v..(pos + 1) * v];
        let c = &changed[pos * v..(pos + 1) * v];
        if pos < t - 1 {
            assert_eq!(a, c, "position {pos} must not see the future");
        } else {
            assert_ne!(a, c, "the changed position itself differs");
        }
    }
}

#[derive(Module, Debug)]
struct Matrix {
    weight: Param<Tensor<2>>,
}

#[derive(Module, Debug)]
struct Quadratic {
    /// Named `mat.weight` in the optimizer: a linear-layer matrix, decayed under
    /// `matrices_only` (the fixture's `mat`).
    mat: Matrix,
    vec: Param<Tensor<1>>,
}

/// Run the optimiser `cfg` for the fixture case `key` on the quadratic and compare the
/// parameters with NumPy's.
fn optimiser_on_the_quadratic(key: &str, cfg: OptimConfig) {
    let g = golden();
    let a = &g[key];
    let c = &a["config"];
    let dev = common::device().autodiff();
    let mat = host(&a["initial"]["mat"]);
    let vec = host(&a["initial"]["vec"]);
    let mut q = Quadratic {
        mat: Matrix {
            weight: Param::from_tensor(Tensor::from_data(TensorData::new(mat.data, [3, 4]), &dev)),
        },
        vec: Param::from_tensor(Tensor::from_data(TensorData::new(vec.data, [5]), &dev)),
    };
    let mut opt = Optimizer::new(&cfg);
    for _ in 0..c["steps"].as_u64().unwrap() {
        let loss = (q.mat.weight.val().square().sum() + q.vec.val().square().sum()) * 0.5;
        let grads = loss.backward();
        let mut acc = GradAccumulator::default();
        acc.add(&q, &grads);
        let norm = acc.global_norm();
        let clip = cfg.grad_clip.unwrap();
        let scale = if norm > clip {
            clip / (norm + 1e-6)
        } else {
            1.0
        };
        q = opt.step(q, &acc, cfg.lr, scale);
    }
    let got_m = q.mat.weight.val().into_data().try_to_vec::<f32>().unwrap();
    let got_v = q.vec.val().into_data().try_to_vec::<f32>().unwrap();
    let (m, v) = (&a["after"]["mat"], &a["after"]["vec"]);
    assert_close(&got_m, &floats(m), 1e-5, 1e-6, &format!("mat after {key}"));
    assert_close(&got_v, &floats(v), 1e-5, 1e-6, &format!("vec after {key}"));
    // the update moved every parameter (the comparison is not against the initial values)
    let initial = floats(&a["initial"]["vec"]);
    assert!(
        floats(v)
            .iter()
            .zip(&initial)
            .all(|(x, y)| (x - y).abs() > 1e-3),
        "{key}"
    );
}

#[test]
fn adamw_with_global_clipping_matches_numpy() {
    let c = &golden()["adamw"]["config"];
    optimiser_on_the_quadratic(
        "adamw",
        OptimConfig {
            lr: c["lr"].as_f64().unwrap(),
            betas: [0.9, 0.95],
            eps: c["eps"].as_f64().unwrap(),
            weight_decay: c["weight_decay"].as_f64().unwrap(),
            decay: sinklab::config::DecayPolicy::MatricesOnly,
            grad_clip: Some(c["grad_clip"].as_f64().unwrap()),
            schedule: ScheduleConfig::Constant { warmup: 0 },
            ..OptimConfig::default()
        },
    );
}

#[test]
fn sgd_with_momentum_matches_numpy() {
    let c = &golden()["sgd"]["config"];
    optimiser_on_the_quadratic(
        "sgd",
        OptimConfig {
            algorithm: sinklab::config::Algorithm::Sgd {
                momentum: c["momentum"].as_f64().unwrap(),
            },
            lr: c["lr"].as_f64().unwrap(),
            weight_decay: c["weight_decay"].as_f64().unwrap(),
            decay: sinklab::config::DecayPolicy::MatricesOnly,
            grad_clip: Some(c["grad_clip"].as_f64().unwrap()),
            schedule: ScheduleConfig::Constant { warmup: 0 },
            ..OptimConfig::default()
        },
    );
}
