//! Mixed precision (`train.precision`, issue 29): the matrix products in bf16 / f16 with f32
//! master weights, gradients and optimizer state; f16 with dynamic loss scaling. On the CPU
//! (flex computes in both dtypes): the gradients reach the f32 parameters as f32 and close to
//! f32's; over a few hundred steps the natural-text model's and the quickstart's validation
//! losses stay within a stated tolerance of f32's, and the quickstart's sink still forms; a
//! stopped f16 run resumes exactly (its loss scale is in the checkpoint).

use crate::common::{self, series};
use sinklab::config::{self, Experiment, Precision};
use sinklab::train;
use std::path::Path;

/// A shipped experiment with its run and cache under `dir`, at `precision`, plus `extra`.
fn shipped(dir: &Path, file: &str, name: &str, precision: Precision, extra: &[&str]) -> Experiment {
    let mut o = vec![
        format!("run.out_dir=\"{}\"", dir.join("runs").display()),
        format!("data.cache_dir=\"{}\"", dir.join("cache").display()),
        format!("run.name=\"{name}\""),
        format!("train.precision=\"{}\"", precision.name()),
    ];
    o.extend(extra.iter().map(|s| s.to_string()));
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    config::load(&path, &o).unwrap_or_else(|e| panic!("{e}"))
}

/// Train at f32, bf16 and f16; the validation losses (every `eval_every`) of each.
fn val_curves(dir: &Path, file: &str, extra: &[&str]) -> Vec<(Precision, Vec<(u64, f64)>)> {
    [Precision::F32, Precision::Bf16, Precision::F16]
        .into_iter()
        .map(|p| {
            let exp = shipped(dir, file, p.name(), p, extra);
            train::train(&exp, &common::quiet(), &mut |_| {}).unwrap();
            (p, series(&exp.run_dir(), "val/loss"))
        })
        .collect()
}

/// Every evaluation of bf16 and f16 within `tol` nats of f32's at the same step.
fn assert_close_to_f32(curves: &[(Precision, Vec<(u64, f64)>)], tol: f64, what: &str) {
    let f32_curve = &curves[0].1;
    assert!(f32_curve.len() >= 3, "{what}: {f32_curve:?}");
    for (p, c) in &curves[1..] {
        assert_eq!(c.len(), f32_curve.len(), "{what} {}", p.name());
        for ((s, a), (s2, b)) in f32_curve.iter().zip(c) {
            assert_eq!(s, s2);
            assert!(
                (a - b).abs() <= tol && b.is_finite(),
                "{what} {} at step {s}: val loss {b} vs f32 {a} (tolerance {tol})",
                p.name()
            );
        }
    }
    // and training did something: the last loss is far below the first
    let (first, last) = (f32_curve[0].1, f32_curve.last().unwrap().1);
    assert!(last < first - 1.0, "{what}: {first} -> {last}");
}

#[test]
fn low_precision_gradients_reach_the_f32_weights_as_f32_and_close_to_f32s() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(dir.path(), "grads", &[]);
    let device = common::device().autodiff();
    let model = sinklab::model::Lm::new(&exp.model, 300, 0, &device);
    let tokens: Vec<i64> = (0..32).map(|i| (i * 37 % 250) as i64 + 2).collect();
    let x = burn::tensor::Tensor::<2, burn::tensor::Int>::from_data(
        burn::tensor::TensorData::new(tokens[..31].to_vec(), [1, 31]),
        &device,
    );
    let y = burn::tensor::Tensor::<2, burn::tensor::Int>::from_data(
        burn::tensor::TensorData::new(tokens[1..].to_vec(), [1, 31]),
        &device,
    );
    let mask = burn::tensor::Tensor::<2>::ones([1, 31], &device);
    let grads_at = |p: Precision| {
        let m = model.clone().with_precision(p);
        let loss = sinklab::model::masked_nll(m.forward(x.clone()), y.clone(), mask.clone(), 31.0);
        let value = loss.clone().into_scalar::<f32>() as f64;
        let mut acc = sinklab::optim::GradAccumulator::default();
        acc.add(&model, &loss.backward());
        (value, acc)
    };
    let (l32, g32) = grads_at(Precision::F32);
    for p in [Precision::Bf16, Precision::F16] {
        let (l, g) = grads_at(p);
        assert!(
            (l - l32).abs() < 2e-2 * l32,
            "{}: loss {l} vs {l32}",
            p.name()
        );
        // ...and not f32's exactly: the products really ran in the low precision
        assert_ne!(
            l.to_bits(),
            l32.to_bits(),
            "{}: the loss is f32's",
            p.name()
        );
        assert_eq!(
            g.grads.len(),
            g32.grads.len(),
            "{}: every parameter",
            p.name()
        );
        assert_eq!(
            g.grads.len(),
            sinklab::optim::param_shapes(&model).len(),
            "{}",
            p.name()
        );
        for (name, a) in &g32.grads {
            let b = &g.grads[name];
            assert_eq!(b.dtype(), burn::tensor::DType::F32, "{} {name}", p.name());
            let diff = (a.clone() - b.clone())
                .square()
                .sum()
                .into_scalar::<f32>()
                .sqrt();
            let norm = a.clone().square().sum().into_scalar::<f32>().sqrt();
            assert!(
                diff <= 0.05 * norm + 1e-6,
                "{} {name}: |Δg| {diff} vs |g| {norm}",
                p.name()
            );
        }
    }
}

#[test]
fn natural_text_losses_at_bf16_and_f16_stay_within_0_05_of_f32() {
    let dir = tempfile::tempdir().unwrap();
    let curves = val_curves(
        dir.path(),
        "experiments/natural_text.toml",
        &["train.steps=150", "metrics.every=150"],
    );
    assert_close_to_f32(&curves, 0.05, "natural text");
}

#[test]
fn the_quickstart_sink_forms_at_bf16_and_f16_and_f16_resumes_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let extra = [
        "train.steps=500",
        "metrics.every=250",
        "train.eval_every=100",
    ];
    let curves = val_curves(dir.path(), "experiments/quickstart.toml", &extra);
    assert_close_to_f32(&curves, 0.05, "quickstart");
    for p in [Precision::F32, Precision::Bf16, Precision::F16] {
        let run = dir.path().join("runs").join(p.name());
        let sink = series(&run, "sink/rate_eps0.3/pos01");
        let (step, last) = *sink.last().unwrap();
        assert_eq!(step, 500);
        assert!(last > 40.0, "{}: Sink1 {last}% at step 500", p.name());
    }
    // f16's loss scale is logged; no step overflowed at the initial scale
    let f16_run = dir.path().join("runs/f16");
    let scale = series(&f16_run, "train/loss_scale");
    assert_eq!(scale.last().unwrap().1, 65536.0);
    assert_eq!(
        series(&f16_run, "train/skipped_steps").last().unwrap().1,
        0.0
    );
    // stopped at step 200 and resumed: every record equals the uninterrupted f16 run's
    let exp = shipped(
        dir.path(),
        "experiments/quickstart.toml",
        "f16b",
        Precision::F16,
        &extra,
    );
    let stop = train::TrainOptions {
        stop_after: Some(200),
        ..common::quiet()
    };
    train::train(&exp, &stop, &mut |_| {}).unwrap();
    let state = common::read_json(&exp.run_dir().join("checkpoints/step_00000200/state.json"));
    assert_eq!(state["loss_scale"]["scale"], 65536.0, "{state}");
    let resume = train::TrainOptions {
        resume: true,
        ..common::quiet()
    };
    train::train(&exp, &resume, &mut |_| {}).unwrap();
    for tag in ["train/loss", "val/loss", "sink/rate_eps0.3/pos01"] {
        assert_eq!(
            series(&exp.run_dir(), tag),
            series(&f16_run, tag),
            "{tag} after the resume"
        );
    }
}

#[test]
fn eval_precision_changes_the_loss_slightly_and_never_the_sink_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let exp = common::tiny_experiment(dir.path(), "ev", &[]);
    train::train(&exp, &common::quiet(), &mut |_| {}).unwrap();
    let run = exp.run_dir();
    let eval = |p: &str| {
        let (code, out, err) = common::sinklab_in(
            Some(dir.path()),
            &["eval", run.to_str().unwrap(), "--precision", p, "--json"],
        );
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let f = eval("f32");
    for p in ["bf16", "f16"] {
        let e = eval(p);
        let (a, b) = (
            f["val_loss"].as_f64().unwrap(),
            e["val_loss"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-2 * a && a != b, "{p}: {b} vs f32 {a}");
        assert_eq!(e["scalars"], f["scalars"], "{p}: the probes are f32");
    }
    let (code, out) = common::sinklab_output(
        Some(dir.path()),
        &["eval", run.to_str().unwrap(), "--precision", "f8"],
    );
    assert_ne!(code, 0);
    assert!(out.contains("f32, bf16 or f16"), "{out}");
}
