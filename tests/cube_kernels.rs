//! The `Cube` halves of the cross-entropy and AdamW kernels (src/kernels/cube/xent.rs,
//! src/kernels/cube/adamw.rs) on a wgpu device — Mesa's software Vulkan (lavapipe) in CI —
//! against the explicit computation on flex: the cross-entropy's loss and ∂logits (log-softmax
//! and a gather with Burn's ops under autodiff) for f32 and f16 logits, with masked rows, a
//! vocabulary that fills no block of units and rows of one column; AdamW's p, m and v against
//! the tensor-op formula, with a clipping scale read from the device. (The attention kernels:
//! tests/cube_attention.rs.)
//!
//! Built and run only with the `wgpu` feature (scripts/wgpu_smoke.sh).
#![cfg(feature = "wgpu")]

use burn::tensor::{Device, FloatDType, Int, Tensor, TensorData, activation::log_softmax};
use rand::{Rng, SeedableRng};
use sinklab::kernels::{Half, adamw, xent};

fn wgpu() -> Device {
    sinklab::backend::device(sinklab::config::DeviceKind::Wgpu)
        .expect("a wgpu device (lavapipe in CI)")
}
fn flex() -> Device {
    sinklab::backend::device(sinklab::config::DeviceKind::Flex).unwrap()
}

fn host<const D: usize>(t: Tensor<D>) -> Vec<f32> {
    t.into_data().convert::<f32>().try_to_vec::<f32>().unwrap()
}

/// max |a − b| ≤ tol · max |a|, reported.
fn close(what: &str, want: &[f32], got: &[f32], tol: f32) {
    assert_eq!(want.len(), got.len(), "{what}");
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let err = want
        .iter()
        .zip(got)
        .fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    println!("{what:<50} max |Δ| {err:.2e} (max |ref| {scale:.2e})");
    assert!(
        scale > 1e-6 && err <= tol * scale,
        "{what}: max |Δ| {err:e} against max |ref| {scale:e}"
    );
}

#[test]
fn the_cube_cross_entropy_agrees_with_log_softmax_in_loss_and_gradient() {
    let gpu = wgpu().autodiff();
    let cpu = flex().autodiff();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
    // (rows, vocabulary): a vocabulary smaller than a block of units, one that fills none,
    // one column, and a wide one
    for (n, v) in [(7, 37), (5, 1000), (3, 1), (4, 50_432 / 8)] {
        for dt in [None, Some(FloatDType::F16)] {
            let x: Vec<f32> = (0..n * v)
                .map(|_| {
                    let r: f32 = rng.gen_range(-4.0..4.0);
                    match dt {
                        Some(_) => half::f16::from_f32(r).to_f32(),
                        None => r,
                    }
                })
                .collect();
            let t: Vec<i64> = (0..n).map(|_| rng.gen_range(0..v as i64)).collect();
            // one masked row, the rest weighted 1/(n − 1)
            let w: Vec<f32> = (0..n)
                .map(|i| {
                    if i == 1 {
                        0.0
                    } else {
                        1.0 / (n as f32 - 1.0).max(1.0)
                    }
                })
                .collect();
            let run = |dev: &Device, kernel: bool| -> (f32, Vec<f32>) {
                let logits =
                    Tensor::<2>::from_data(TensorData::new(x.clone(), [n, v]), dev).require_grad();
                let targets = Tensor::<1, Int>::from_data(TensorData::new(t.clone(), [n]), dev);
                let weights = Tensor::<1>::from_data(TensorData::new(w.clone(), [n]), dev);
                let loss = if kernel {
                    let l = match dt {
                        Some(dt) => logits.clone().cast(dt),
                        None => logits.clone(),
                    };
                    assert_eq!(
                        xent::choose(&l.device(), l.dtype()),
                        Ok(Half::Cube),
                        "the CubeCL half runs"
                    );
                    xent::cross_entropy(l, targets, weights)
                } else {
                    let picked = log_softmax(logits.clone(), 1)
                        .gather(1, targets.unsqueeze_dim::<2>(1))
                        .squeeze_dim::<1>(1);
                    (picked * weights).sum().neg()
                };
                // an upstream gradient other than 1
                let grads = (loss.clone() * 2.5).backward();
                (host(loss)[0], host(logits.grad(&grads).unwrap()))
            };
            let (want_loss, want_dx) = run(&cpu, false);
            let (got_loss, got_dx) = run(&gpu, true);
            let name = format!(
                "xent {n} × {v} ({})",
                if dt.is_some() { "f16" } else { "f32" }
            );
            // f16: ∂x is rounded to f16 once
            let tol = if dt.is_some() { 2e-3 } else { 2e-5 };
            if v == 1 {
                // one column: its log-softmax is 0, and so are the loss and the gradient
                assert_eq!((want_loss, got_loss), (0.0, 0.0), "{name}");
                assert!(got_dx.iter().all(|&d| d == 0.0), "{name}: {got_dx:?}");
                continue;
            }
            close(&format!("{name} loss"), &[want_loss], &[got_loss], 2e-5);
            close(&format!("{name} ∂x"), &want_dx, &got_dx, tol);
            assert!(
                got_dx[v..2 * v].iter().all(|&d| d == 0.0) || n < 2,
                "{name}: the masked row has no gradient"
            );
        }
    }
}

#[test]
fn the_cube_adamw_agrees_with_the_tensor_ops() {
    let gpu = wgpu();
    let n = 70_001; // several cubes and a tail
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let mut draw = |s: f32| -> Vec<f32> { (0..n).map(|_| rng.gen_range(-s..s)).collect() };
    let (p, g, m) = (draw(1.0), draw(0.1), draw(0.01));
    let v: Vec<f32> = draw(0.01).iter().map(|x| x * x).collect();
    let (b1, b2, lr, wd, scale, t) = (0.9f64, 0.95f64, 3e-3f64, 0.1f64, 0.37f64, 3);
    let c1 = 1.0 / (1.0 - b1.powi(t));
    let c2 = 1.0 / (1.0 - b2.powi(t)).sqrt();
    // the formula crate::optim runs with tensor ops, on flex
    let dev = flex();
    let ft = |x: &[f32]| Tensor::<1>::from_data(TensorData::new(x.to_vec(), [n]), &dev);
    let gs = ft(&g) * scale;
    let mw = ft(&m) * b1 + gs.clone() * (1.0 - b1);
    let vw = ft(&v) * b2 + gs.square() * (1.0 - b2);
    let pw = ft(&p) * (1.0 - lr * wd) - mw.clone() / (vw.clone().sqrt() * c2 + 1e-8) * (lr * c1);
    let gt = |x: &[f32]| Tensor::<1>::from_data(TensorData::new(x.to_vec(), [n]), &gpu);
    assert_eq!(adamw::choose(&gpu), Ok(Half::Cube));
    let args = adamw::AdamArgs {
        b1: b1 as f32,
        one_minus_b1: (1.0 - b1) as f32,
        b2: b2 as f32,
        one_minus_b2: (1.0 - b2) as f32,
        decay: (1.0 - lr * wd) as f32,
        c2: c2 as f32,
        eps: 1e-8,
        step: (lr * c1) as f32,
    };
    let s = Tensor::<1>::from_data(TensorData::new(vec![scale as f32], [1]), &gpu);
    let (pg, mg, vg) = adamw::adamw(gt(&p), gt(&g), gt(&m), gt(&v), s, args);
    close("adamw p", &host(pw), &host(pg), 1e-6);
    close("adamw m", &host(mw), &host(mg), 1e-6);
    close("adamw v", &host(vw), &host(vg), 1e-6);
}
