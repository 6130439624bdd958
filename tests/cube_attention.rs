//! The `Cube` half of the fused attention kernel (src/kernels/cube/attention.rs: tiled,
//! FlashAttention-2's schedule) on a wgpu device — Mesa's software Vulkan (lavapipe) in CI —
//! against the explicit computation on flex: scores, mask, ALiBi, the extra logit column and
//! softmax written out with Burn's tensor ops under autodiff. Values and the gradients of q, k,
//! v and z agree to 2e-5 relative to each tensor's largest entry (3e-3 with q, k, v stored in
//! f16, as under mixed precision), on every variant the kernel covers — causal, softmax_n's n, a
//! learned sink logit, slot columns in front (KV bias / memory), a sliding window, sinks +
//! window, a prefix, ALiBi — and at the sizes where tiling goes wrong: rows that fill no block,
//! keys that fill no tile, one key, a window shorter than a tile, rows that see no key but the
//! extra column, head widths that are not a multiple of anything, each at several block and
//! tile sizes (16 rows × 16 keys up to 64 × 64).
//!
//! Lavapipe has no tensor cores: the products run on the plain shared-memory path here; the
//! tensor-core path is compiled for CUDA by `tests/cube_compile.rs`.
//!
//! Built and run only with the `wgpu` feature (scripts/wgpu_smoke.sh:
//! `cargo test --profile smoke --features wgpu,cuda --test cube_attention`).
#![cfg(feature = "wgpu")]

use burn::tensor::{Bool, Device, FloatDType, Tensor, TensorData, activation::softmax};
use rand::{Rng, SeedableRng};
use sinklab::kernels::attention_op::{Alibi, AttnArgs, Tiles, attention};
use std::sync::Arc;

/// Which keys a row sees: (row i, slot columns) → two runs of key columns.
type Rule = fn(usize, usize) -> [[u32; 2]; 2];

/// One configuration: sizes, the visible runs of each row, the extra logit and ALiBi.
#[derive(Clone)]
struct Case {
    name: &'static str,
    b: usize,
    h: usize,
    q: usize,
    /// Slot columns in front of the Q causal keys (C = slots + Q).
    slots: usize,
    d: usize,
    runs: Rule,
    /// None: no extra logit (−inf); Some(random): a learned sink logit; Some(0.0) softmax_1.
    z: Option<bool>,
    alibi: bool,
    /// Block and tile sizes to run at.
    tiles: &'static [Tiles],
}

fn causal(i: usize, s: usize) -> [[u32; 2]; 2] {
    [[0, (s + i + 1) as u32], [0, 0]]
}
fn window(i: usize, s: usize) -> [[u32; 2]; 2] {
    let hi = s + i + 1;
    [[hi.saturating_sub(3) as u32, hi as u32], [0, 0]]
}
fn sinks_window(i: usize, s: usize) -> [[u32; 2]; 2] {
    let hi = s + i + 1;
    let lo = hi.saturating_sub(3).max(1);
    if lo <= 1 {
        [[0, hi as u32], [0, 0]]
    } else {
        [[0, 1], [lo as u32, hi as u32]]
    }
}
fn prefix(i: usize, s: usize) -> [[u32; 2]; 2] {
    [[0, (s + (i + 1).max(4)) as u32], [0, 0]]
}
/// Every third row sees no key at all (only the extra column), the others causal.
fn some_rows_blind(i: usize, s: usize) -> [[u32; 2]; 2] {
    if i % 3 == 1 {
        [[0, 0], [0, 0]]
    } else {
        causal(i, s)
    }
}

const AUTO: &[Tiles] = &[Tiles::Auto];
/// Block and tile sizes for narrow heads: 16 to 64 rows, 16 to 64 columns, three planes and
/// 48-column tiles among them. Lavapipe gives a cube 32 KiB of shared memory: wider heads run
/// the sizes that fit there (the f32 tiles of 64 × 64 are for GPUs).
const NARROW: &[Tiles] = &[
    Tiles::Fixed { planes: 1, bc: 16 },
    Tiles::Fixed { planes: 2, bc: 32 },
    Tiles::Fixed { planes: 3, bc: 32 },
    Tiles::Fixed { planes: 1, bc: 64 },
    Tiles::Fixed { planes: 4, bc: 16 },
];
const D24: &[Tiles] = &[
    Tiles::Fixed { planes: 1, bc: 16 },
    Tiles::Fixed { planes: 2, bc: 32 },
    Tiles::Fixed { planes: 1, bc: 48 },
    Tiles::Fixed { planes: 3, bc: 16 },
];
const D40: &[Tiles] = &[
    Tiles::Fixed { planes: 1, bc: 16 },
    Tiles::Fixed { planes: 1, bc: 32 },
    Tiles::Fixed { planes: 2, bc: 16 },
];
const D64: &[Tiles] = &[Tiles::Fixed { planes: 1, bc: 16 }];

fn cases() -> Vec<Case> {
    let c = |name, slots, runs, z, alibi| Case {
        name,
        b: 2,
        h: 2,
        q: 7,
        slots,
        d: 8,
        runs,
        z,
        alibi,
        tiles: AUTO,
    };
    vec![
        c("causal", 0, causal, None, false),
        c("softmax_1", 0, causal, Some(false), false),
        c("sink logit", 0, causal, Some(true), false),
        c("kv slots + sink logit", 2, causal, Some(true), false),
        c("sliding window", 0, window, None, false),
        c("sinks + window", 0, sinks_window, Some(true), false),
        c("prefix", 0, prefix, None, false),
        c("alibi", 0, causal, None, true),
        c("alibi after kv slots", 1, causal, Some(true), true),
        c(
            "rows that see only the extra column",
            0,
            some_rows_blind,
            Some(true),
            false,
        ),
        Case {
            // with the extra column: one key alone has weight 1 and no gradient to q or k
            name: "one key, sink logit",
            q: 1,
            tiles: NARROW,
            ..c("", 0, causal, Some(true), false)
        },
        Case {
            name: "long rows: 130 × 64, causal, alibi",
            b: 1,
            h: 2,
            q: 130,
            d: 64,
            tiles: D64,
            ..c("", 0, causal, None, true)
        },
        Case {
            name: "odd sizes: slots, sinks + window shorter than a tile, sink logit, alibi",
            b: 3,
            h: 3,
            q: 83,
            d: 24,
            tiles: D24,
            ..c("", 1, sinks_window, Some(true), true)
        },
        Case {
            name: "odd head width 5, rows that see only the extra column",
            b: 1,
            h: 1,
            q: 37,
            d: 5,
            tiles: NARROW,
            ..c("", 0, some_rows_blind, Some(false), false)
        },
        Case {
            name: "prefix, 3 memory slots, d 40",
            b: 1,
            h: 2,
            q: 50,
            d: 40,
            tiles: D40,
            ..c("", 3, prefix, None, false)
        },
    ]
}

fn random(rng: &mut rand_chacha::ChaCha8Rng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// f(q, k, v, z) → o on `dev` for autodiff leaves holding `data` and `z`: (o, ∂q, ∂k, ∂v, ∂z)
/// for the upstream gradient g = data[3].
fn run_on(
    cs: &Case,
    dev: &Device,
    data: &[Vec<f32>; 4],
    z: &[f32],
    f: impl FnOnce(Tensor<4>, Tensor<4>, Tensor<4>, Tensor<1>) -> Tensor<4>,
) -> Vec<Vec<f32>> {
    let (b, h, nq, d) = (cs.b, cs.h, cs.q, cs.d);
    let c = cs.slots + nq;
    let t = |x: &Vec<f32>, shape: [usize; 4]| {
        Tensor::<4>::from_data(TensorData::new(x.clone(), shape), dev).require_grad()
    };
    let (q, k, v) = (
        t(&data[0], [b, h, nq, d]),
        t(&data[1], [b, h, c, d]),
        t(&data[2], [b, h, c, d]),
    );
    let g = Tensor::<4>::from_data(TensorData::new(data[3].clone(), [b, h, nq, d]), dev);
    let zt = Tensor::<1>::from_data(TensorData::new(z.to_vec(), [h]), dev).require_grad();
    let o = f(q.clone(), k.clone(), v.clone(), zt.clone());
    let grads = (o.clone() * g).sum().backward();
    let host = |x: Tensor<4>| x.into_data().try_to_vec::<f32>().unwrap();
    vec![
        host(o),
        host(q.grad(&grads).unwrap()),
        host(k.grad(&grads).unwrap()),
        host(v.grad(&grads).unwrap()),
        zt.grad(&grads)
            .unwrap()
            .into_data()
            .try_to_vec::<f32>()
            .unwrap(),
    ]
}

/// The explicit computation on `dev` (flex autodiff): scores, bias, mask, the extra column and
/// softmax with Burn's tensor ops.
fn explicit(
    cs: &Case,
    dev: &Device,
    data: &[Vec<f32>; 4],
    z: &[f32],
    runs: &[[[u32; 2]; 2]],
    bias: Option<&[f32]>,
) -> Vec<Vec<f32>> {
    let (b, h, nq, d) = (cs.b, cs.h, cs.q, cs.d);
    let c = cs.slots + nq;
    run_on(cs, dev, data, z, |q, k, v, zt| {
        let mut s = q.matmul(k.swap_dims(2, 3)) / (d as f32).sqrt(); // (B, H, Q, C)
        if let Some(bias) = bias {
            s = s + Tensor::<3>::from_data(TensorData::new(bias.to_vec(), [h, nq, c]), dev)
                .unsqueeze::<4>();
        }
        let hidden: Vec<bool> = runs
            .iter()
            .flat_map(|r| {
                (0..c).map(move |j| {
                    !r.iter()
                        .any(|run| run[0] as usize <= j && j < run[1] as usize)
                })
            })
            .collect();
        let hidden = Tensor::<2, Bool>::from_data(TensorData::new(hidden, [nq, c]), dev)
            .unsqueeze::<4>()
            .expand([b, h, nq, c]);
        let s = s.mask_fill(hidden, f32::NEG_INFINITY);
        let zc = zt.reshape([1, h, 1, 1]).expand([b, h, nq, 1]);
        let p = softmax(Tensor::cat(vec![zc, s], 3), 3).narrow(3, 1, c); // the extra column's value is 0
        p.matmul(v)
    })
}

/// The kernel on `dev`, with q, k, v stored in `dt` (f32 leaves cast down, as the model does
/// under mixed precision) and o brought back to f32.
fn kernel(
    cs: &Case,
    dev: &Device,
    data: &[Vec<f32>; 4],
    z: &[f32],
    args: AttnArgs,
    dt: Option<FloatDType>,
) -> Vec<Vec<f32>> {
    run_on(cs, dev, data, z, |q, k, v, zt| match dt {
        None => attention(q, k, v, zt, args),
        Some(dt) => attention(q.cast(dt), k.cast(dt), v.cast(dt), zt, args).cast(FloatDType::F32),
    })
}

/// ALiBi's table (H, Q, C) from slopes as the model builds it (f64, then f32): 0 on the slot
/// columns, `−m_h |i − (j − slots)|` on the others.
fn alibi_table(slopes: &[f64], nq: usize, slots: usize) -> Vec<f32> {
    let c = slots + nq;
    let mut t = vec![0f32; slopes.len() * nq * c];
    for (hi, m) in slopes.iter().enumerate() {
        for i in 0..nq {
            for kj in 0..nq {
                t[(hi * nq + i) * c + slots + kj] = (-m * (i as f64 - kj as f64).abs()) as f32;
            }
        }
    }
    t
}

#[test]
fn the_cube_attention_kernel_agrees_with_the_explicit_path_in_values_and_gradients() {
    let gpu = sinklab::backend::device(sinklab::config::DeviceKind::Wgpu)
        .expect("a wgpu device (lavapipe in CI)")
        .autodiff();
    let cpu = sinklab::backend::device(sinklab::config::DeviceKind::Flex)
        .unwrap()
        .autodiff();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(29);
    // f32, then f16 storage (mixed precision; lavapipe has shader-f16): the inputs are rounded
    // to f16 for both sides, and the kernel rounds o, P, ∂S and the gradients to f16 (and its
    // upstream gradient arrives rounded to f16), hence 2e-5 against 3e-3 of the largest entry.
    let precisions = [(None, 2e-5f32), (Some(FloatDType::F16), 3e-3)];
    let mut checked = 0;
    for cs in cases() {
        for (dt, tol) in precisions {
            let (b, h, nq, d) = (cs.b, cs.h, cs.q, cs.d);
            let c = cs.slots + nq;
            // scale q up so that the weights are far from uniform; under f16 both sides see
            // the same f16 values of q, k and v
            let round = |x: f32| match dt {
                Some(_) => half::f16::from_f32(x).to_f32(),
                None => x,
            };
            let data = [
                random(&mut rng, b * h * nq * d)
                    .iter()
                    .map(|x| round(3.0 * x))
                    .collect(),
                random(&mut rng, b * h * c * d)
                    .iter()
                    .map(|&x| round(x))
                    .collect(),
                random(&mut rng, b * h * c * d)
                    .iter()
                    .map(|&x| round(x))
                    .collect(),
                random(&mut rng, b * h * nq * d),
            ];
            let z: Vec<f32> = match cs.z {
                None => vec![f32::NEG_INFINITY; h],
                Some(false) => vec![0.0; h], // softmax_1: ln 1
                Some(true) => random(&mut rng, h).iter().map(|x| 2.0 * x).collect(),
            };
            let runs: Vec<[[u32; 2]; 2]> = (0..nq).map(|i| (cs.runs)(i, cs.slots)).collect();
            let slopes: Option<Vec<f64>> = cs.alibi.then(|| {
                random(&mut rng, h)
                    .iter()
                    .map(|x| 0.1 + 0.4 * x.abs() as f64)
                    .collect()
            });
            let table = slopes.as_ref().map(|s| alibi_table(s, nq, cs.slots));
            let want = explicit(&cs, &cpu, &data, &z, &runs, table.as_deref());
            for &tiles in cs.tiles {
                let args = AttnArgs {
                    scale: 1.0 / (d as f32).sqrt(),
                    runs: Arc::new(runs.clone()),
                    bias: table.clone().map(Arc::new),
                    alibi: slopes.as_ref().map(|s| Alibi {
                        slopes: Arc::new(s.iter().map(|&m| m as f32).collect()),
                        kv_slots: cs.slots,
                        q_start: 0,
                    }),
                    tiles,
                };
                let got = kernel(&cs, &gpu, &data, &z, args, dt);
                let name = format!(
                    "{} ({}, {tiles:?})",
                    cs.name,
                    if dt.is_some() { "f16" } else { "f32" }
                );
                for (what, (w, g)) in ["o", "∂q", "∂k", "∂v", "∂z"]
                    .iter()
                    .zip(want.iter().zip(&got))
                {
                    if *what == "∂z" && cs.z.is_none() {
                        // no extra logit: nothing flows to z (the explicit path's −inf column
                        // gives 0 or NaN by the order of its operations; the kernel's is 0)
                        assert!(g.iter().all(|x| *x == 0.0), "{name}: ∂z {g:?}");
                        continue;
                    }
                    assert_eq!(w.len(), g.len(), "{name}: {what}");
                    let scale = w.iter().fold(0f32, |m, x| m.max(x.abs()));
                    let err = w.iter().zip(g).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                    println!("{name:<80} {what:<3} max |Δ| {err:.2e} (max |ref| {scale:.2e})");
                    assert!(
                        scale > 1e-3 && err <= tol * scale,
                        "{name}: {what}: max |Δ| {err:e} against max |ref| {scale:e}"
                    );
                }
                checked += 1;
            }
        }
    }
    // every case at f32 and f16, at each of its tile sizes
    assert_eq!(
        checked,
        2 * (10 + 5 + 1 + 4 + 5 + 3),
        "configurations checked"
    );
}
