//! Attention forward and backward as CubeCL kernels (the `Cube` half of
//! [`crate::kernels::attention_op`]; the maths of [`crate::kernels::cpu::attention`]):
//!
//! ```text
//! s_ij = scale · q_i·k_j + bias_h,i,j      visible j only (the runs of row i)
//! extra column: s_i∅ = z_h, value 0        the sink logit; ln n for softmax_n; none: z_h ≤ −1e30
//! lse_i = log(e^z_h + Σ_j e^s_ij)          # (B, H, Q), saved
//! o_i = Σ_j e^(s_ij − lse_i) v_j           # (B, H, Q, D)
//! backward, with P_ij = e^(s_ij − lse_i) and D_i = do_i·o_i:
//! ∂v_j = Σ_i P_ij do_i     ∂s_ij = P_ij (do_i·v_j − D_i)
//! ∂q_i = scale Σ_j ∂s_ij k_j     ∂k_j = scale Σ_i ∂s_ij q_i     ∂z_h = −Σ_b,i e^(z_h − lse_i) D_i
//! ```
//!
//! The schedule is the simplest that never forms the (Q, C) weights: the forward and ∂q give
//! one invocation to each query row (an online softmax over its visible keys, the D-wide
//! accumulator in registers), ∂k and ∂v one invocation to each key column (a pass over the
//! rows that see it, recomputing P_ij from the saved lse). There are no shared-memory tiles
//! yet: the kernels are exact and cover every variant the CPU kernel covers, and their speed
//! on a real GPU is what `scripts/gpu_checks.sh` measures.
//!
//! Storage: q, k, v, o and their gradients in f32, f16 or bf16 (mixed precision: the model's
//! low precision); every product, sum, exp and the saved lse in f32 (the values are widened on
//! read and rounded once on write), z and ∂z in z's dtype (the sink logit is an f32 master).
//!
//! "No extra logit" is z = −inf on the host; WGSL has no infinities, so z is clamped to
//! −1e30 first (e^(−1e30 − m) is 0 in f32, and a row that sees nothing still gives o = 0 with
//! ∂z = 0 because D_i = 0 there).

use crate::kernels::attention_op::AttnArgs;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use burn::backend::{DType, TensorMetadata};
use burn::tensor::FloatDType;
use burn::tensor::{Shape, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;
use cubecl::{CubeDim, calculate_cube_count_elemwise};

/// The smallest logit the kernels see: "none" (−inf) is clamped to it.
const NONE: f32 = -1.0e30;

/// The visible key columns of row i: the two runs `[a0, b0)`, `[a1, b1)` from the (Q, 4)
/// run table.
#[cube]
fn run_bounds<I: Numeric>(runs: &Tensor<I>, i: usize, r: usize) -> (usize, usize) {
    let a = u32::cast_from(runs[i * 4 + r * 2]) as usize;
    let b = u32::cast_from(runs[i * 4 + r * 2 + 1]) as usize;
    (a, b)
}

/// s_ij for row `row` (flat over B, H, Q) and column j of the same (b, h), in f32 whatever
/// q and k are stored in.
#[cube]
#[allow(clippy::too_many_arguments)]
fn score<F: Float>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    bias: &Tensor<f32>,
    scale: f32,
    qo: usize,
    ko: usize,
    bias_at: usize,
    #[comptime] d: usize,
    #[comptime] has_bias: bool,
) -> f32 {
    let mut dot = 0.0f32;
    for x in 0..d {
        dot += f32::cast_from(q[qo + x]) * f32::cast_from(k[ko + x]);
    }
    let mut s = dot * scale;
    if has_bias {
        s += bias[bias_at];
    }
    s
}

/// Forward: one invocation per query row (B·H·Q of them).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn forward_kernel<F: Float, I: Numeric>(
    q: &Tensor<F>,         // (B, H, Q, D)
    k: &Tensor<F>,         // (B, H, C, D)
    v: &Tensor<F>,         // (B, H, C, D)
    z: &Tensor<f32>,       // (H), clamped
    scale: &Tensor<f32>,   // (1)
    runs: &Tensor<I>,      // (Q, 4)
    bias: &Tensor<f32>,    // (H, Q, C) or (1)
    out: &mut Tensor<F>,   // (B, H, Q, D)
    lse: &mut Tensor<f32>, // (B, H, Q)
    rows: usize,
    heads: usize,
    nq: usize,
    nc: usize,
    #[comptime] d: usize,
    #[comptime] has_bias: bool,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let row = ABSOLUTE_POS;
    if row >= rows {
        terminate!();
    }
    let i = row % nq;
    let bh = row / nq;
    let hd = bh % heads;
    let qo = row * d;
    let kv0 = bh * nc * d;
    let sc = scale[0];
    // the extra logit starts the online softmax: m = z, l = e^(z − m) = 1, its value is 0
    let mut m = z[hd];
    let mut l = 1.0f32;
    let mut acc = Array::<f32>::new(d);
    for x in 0..d {
        acc[x] = 0.0f32;
    }
    for r in 0..2 {
        let (a, b) = run_bounds::<I>(runs, i, r);
        for j in a..b {
            let ko = kv0 + j * d;
            let s = score::<F>(q, k, bias, sc, qo, ko, (hd * nq + i) * nc + j, d, has_bias);
            let mut mn = m;
            if s > m {
                mn = s;
            }
            let corr = (m - mn).exp();
            let p = (s - mn).exp();
            l = l * corr + p;
            for x in 0..d {
                acc[x] = acc[x] * corr + p * f32::cast_from(v[ko + x]);
            }
            m = mn;
        }
    }
    let inv = 1.0f32 / l;
    for x in 0..d {
        out[qo + x] = F::cast_from(acc[x] * inv);
    }
    lse[row] = m + l.ln();
}

/// ∂q and each row's share of ∂z: one invocation per query row.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_rows_kernel<F: Float, I: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    z: &Tensor<f32>,
    scale: &Tensor<f32>,
    runs: &Tensor<I>,
    bias: &Tensor<f32>,
    lse: &Tensor<f32>,         // (B, H, Q)
    dsum: &Tensor<f32>,        // D_i = do_i·o_i (B, H, Q)
    grad: &Tensor<F>,          // ∂o (B, H, Q, D)
    dq: &mut Tensor<F>,        // (B, H, Q, D)
    dz_rows: &mut Tensor<f32>, // (B, H, Q)
    rows: usize,
    heads: usize,
    nq: usize,
    nc: usize,
    #[comptime] d: usize,
    #[comptime] has_bias: bool,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let row = ABSOLUTE_POS;
    if row >= rows {
        terminate!();
    }
    let i = row % nq;
    let bh = row / nq;
    let hd = bh % heads;
    let qo = row * d;
    let kv0 = bh * nc * d;
    let sc = scale[0];
    let li = lse[row];
    let di = dsum[row];
    let mut acc = Array::<f32>::new(d);
    for x in 0..d {
        acc[x] = 0.0f32;
    }
    for r in 0..2 {
        let (a, b) = run_bounds::<I>(runs, i, r);
        for j in a..b {
            let ko = kv0 + j * d;
            let s = score::<F>(q, k, bias, sc, qo, ko, (hd * nq + i) * nc + j, d, has_bias);
            let p = (s - li).exp();
            let mut dp = 0.0f32;
            for x in 0..d {
                dp += f32::cast_from(grad[qo + x]) * f32::cast_from(v[ko + x]);
            }
            let ds = p * (dp - di);
            for x in 0..d {
                acc[x] += ds * f32::cast_from(k[ko + x]);
            }
        }
    }
    for x in 0..d {
        dq[qo + x] = F::cast_from(acc[x] * sc);
    }
    dz_rows[row] = 0.0f32 - (z[hd] - li).exp() * di;
}

/// ∂k and ∂v: one invocation per key column (B·H·C of them), over the rows that see it.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn backward_cols_kernel<F: Float, I: Numeric>(
    q: &Tensor<F>,
    k: &Tensor<F>,
    v: &Tensor<F>,
    scale: &Tensor<f32>,
    runs: &Tensor<I>,
    bias: &Tensor<f32>,
    lse: &Tensor<f32>,
    dsum: &Tensor<f32>,
    grad: &Tensor<F>,
    dk: &mut Tensor<F>, // (B, H, C, D)
    dv: &mut Tensor<F>, // (B, H, C, D)
    cols: usize,
    heads: usize,
    nq: usize,
    nc: usize,
    #[comptime] d: usize,
    #[comptime] has_bias: bool,
    #[define(F, I)] _dtypes: [ElemType; 2],
) {
    let col = ABSOLUTE_POS;
    if col >= cols {
        terminate!();
    }
    let j = col % nc;
    let bh = col / nc;
    let hd = bh % heads;
    let ko = col * d;
    let sc = scale[0];
    let mut ak = Array::<f32>::new(d);
    let mut av = Array::<f32>::new(d);
    for x in 0..d {
        ak[x] = 0.0f32;
        av[x] = 0.0f32;
    }
    for i in 0..nq {
        let (a0, b0) = run_bounds::<I>(runs, i, 0);
        let (a1, b1) = run_bounds::<I>(runs, i, 1);
        if (j >= a0 && j < b0) || (j >= a1 && j < b1) {
            let row = bh * nq + i;
            let qo = row * d;
            let s = score::<F>(q, k, bias, sc, qo, ko, (hd * nq + i) * nc + j, d, has_bias);
            let p = (s - lse[row]).exp();
            let mut dp = 0.0f32;
            for x in 0..d {
                dp += f32::cast_from(grad[qo + x]) * f32::cast_from(v[ko + x]);
            }
            let ds = p * (dp - dsum[row]);
            for x in 0..d {
                av[x] += p * f32::cast_from(grad[qo + x]);
                ak[x] += ds * f32::cast_from(q[qo + x]);
            }
        }
    }
    for x in 0..d {
        dk[ko + x] = F::cast_from(ak[x] * sc);
        dv[ko + x] = F::cast_from(av[x]);
    }
}

/// The sizes (B, H, Q, C, D) of q (B, H, Q, D) and k (B, H, C, D).
fn dims(q: &CubeTensor, k: &CubeTensor) -> [usize; 5] {
    match (q.shape().as_slice(), k.shape().as_slice()) {
        (&[b, h, nq, d], &[kb, kh, c, kd]) if b == kb && h == kh && d == kd => [b, h, nq, c, d],
        (qs, ks) => panic!("attention kernel: q {qs:?} and k {ks:?} do not match"),
    }
}

/// What every launch shares: the run table, the bias (or a 1-element stand-in), the scale and
/// z clamped to [`NONE`], on q's device.
struct Common {
    runs: CubeTensor,
    bias: CubeTensor,
    has_bias: bool,
    scale: CubeTensor,
    z: CubeTensor,
}

fn common(q: &CubeTensor, z: CubeTensor, args: &AttnArgs, h: usize, nq: usize, c: usize) -> Common {
    assert_eq!(args.runs.len(), nq, "one run pair per query row");
    let device = &q.device;
    let runs: Vec<i32> = args
        .runs
        .iter()
        .flatten()
        .flatten()
        .map(|&x| x as i32)
        .collect();
    let runs = CubeBackend::int_from_data(TensorData::new(runs, [nq * 4]), device);
    let (bias, has_bias) = match &args.bias {
        Some(b) => {
            assert_eq!(b.len(), h * nq * c, "bias (H, Q, C)");
            (TensorData::new(b.to_vec(), [h * nq * c]), true)
        }
        None => (TensorData::new(vec![0f32], [1]), false),
    };
    let bias = CubeBackend::float_from_data(bias, device);
    let scale = CubeBackend::float_from_data(TensorData::new(vec![args.scale], [1]), device);
    let z = into_contiguous(CubeBackend::float_clamp_min(f32_of(z), NONE.into()));
    Common {
        runs,
        bias,
        has_bias,
        scale,
        z,
    }
}

/// An uninitialised tensor of `shape` and `dtype` on `like`'s device.
fn empty(like: &CubeTensor, shape: &[usize], dtype: DType) -> CubeTensor {
    empty_device_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape.to_vec()),
        dtype,
    )
}

/// `t` in f32 (a cast only when it is stored in another float type).
fn f32_of(t: CubeTensor) -> CubeTensor {
    if t.dtype == DType::F32 {
        t
    } else {
        CubeBackend::float_cast(t, FloatDType::F32)
    }
}

/// (o, lse) for contiguous-or-not q, k, v and z (see the module's maths).
pub fn forward(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    z: CubeTensor,
    args: &AttnArgs,
) -> (CubeTensor, CubeTensor) {
    let [b, h, nq, c, d] = dims(&q, &k);
    let (q, k, v) = (into_contiguous(q), into_contiguous(k), into_contiguous(v));
    let cm = common(&q, z, args, h, nq, c);
    let out = empty(&q, &[b, h, nq, d], q.dtype);
    let lse = empty(&q, &[b, h, nq], DType::F32);
    let rows = b * h * nq;
    if rows == 0 {
        return (out, lse);
    }
    let client = q.client.clone();
    let cube_dim = CubeDim::new(&client, rows);
    let cube_count = calculate_cube_count_elemwise(&client, rows, cube_dim);
    let dtypes = [
        dtype_to_storage_type(q.dtype),
        dtype_to_storage_type(cm.runs.dtype),
    ];
    forward_kernel::launch(
        &client,
        cube_count,
        cube_dim,
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        cm.z.into_tensor_arg(),
        cm.scale.into_tensor_arg(),
        cm.runs.into_tensor_arg(),
        cm.bias.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        rows,
        h,
        nq,
        c,
        d,
        cm.has_bias,
        dtypes,
    );
    (out, lse)
}

/// (∂q, ∂k, ∂v, ∂z) for ∂o = `grad`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    z: CubeTensor,
    out: CubeTensor,
    lse: CubeTensor,
    grad: CubeTensor,
    args: &AttnArgs,
) -> (CubeTensor, CubeTensor, CubeTensor, CubeTensor) {
    let [b, h, nq, c, d] = dims(&q, &k);
    let (q, k, v) = (into_contiguous(q), into_contiguous(k), into_contiguous(v));
    let (lse, grad) = (into_contiguous(lse), into_contiguous(grad));
    let z_dtype = z.dtype;
    let cm = common(&q, z, args, h, nq, c);
    // D_i = do_i·o_i (B, H, Q) in f32, by Burn's own ops
    let dsum = CubeBackend::float_mul(f32_of(grad.clone()), f32_of(out));
    let dsum = CubeBackend::float_sum_dim(dsum, 3);
    let dsum = into_contiguous(CubeBackend::float_reshape(
        dsum,
        Shape::from(vec![b, h, nq]),
    ));
    let dq = empty(&q, &[b, h, nq, d], q.dtype);
    let dk = empty(&q, &[b, h, c, d], q.dtype);
    let dv = empty(&q, &[b, h, c, d], q.dtype);
    let dz_rows = empty(&q, &[b, h, nq], DType::F32);
    let client = q.client.clone();
    let dtypes = [
        dtype_to_storage_type(q.dtype),
        dtype_to_storage_type(cm.runs.dtype),
    ];
    let rows = b * h * nq;
    if rows > 0 {
        let cube_dim = CubeDim::new(&client, rows);
        let cube_count = calculate_cube_count_elemwise(&client, rows, cube_dim);
        backward_rows_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            q.clone().into_tensor_arg(),
            k.clone().into_tensor_arg(),
            v.clone().into_tensor_arg(),
            cm.z.clone().into_tensor_arg(),
            cm.scale.clone().into_tensor_arg(),
            cm.runs.clone().into_tensor_arg(),
            cm.bias.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            dsum.clone().into_tensor_arg(),
            grad.clone().into_tensor_arg(),
            dq.clone().into_tensor_arg(),
            dz_rows.clone().into_tensor_arg(),
            rows,
            h,
            nq,
            c,
            d,
            cm.has_bias,
            dtypes,
        );
    }
    let cols = b * h * c;
    if cols > 0 {
        let cube_dim = CubeDim::new(&client, cols);
        let cube_count = calculate_cube_count_elemwise(&client, cols, cube_dim);
        backward_cols_kernel::launch(
            &client,
            cube_count,
            cube_dim,
            q.into_tensor_arg(),
            k.into_tensor_arg(),
            v.into_tensor_arg(),
            cm.scale.into_tensor_arg(),
            cm.runs.into_tensor_arg(),
            cm.bias.into_tensor_arg(),
            lse.into_tensor_arg(),
            dsum.into_tensor_arg(),
            grad.into_tensor_arg(),
            dk.clone().into_tensor_arg(),
            dv.clone().into_tensor_arg(),
            cols,
            h,
            nq,
            c,
            d,
            cm.has_bias,
            dtypes,
        );
    }
    // ∂z_h = Σ_b,i of the rows' shares, in z's own dtype
    let dz = CubeBackend::float_sum_dim(CubeBackend::float_sum_dim(dz_rows, 2), 0);
    let dz = CubeBackend::float_reshape(dz, Shape::from(vec![h]));
    let dz = if z_dtype == DType::F32 {
        dz
    } else {
        CubeBackend::float_cast(dz, FloatDType::from(z_dtype))
    };
    (dq, dk, dv, dz)
}

impl crate::kernels::attention_op::AttentionOps for CubeBackend {
    fn attention_forward(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        z: CubeTensor,
        args: AttnArgs,
    ) -> (CubeTensor, CubeTensor) {
        forward(q, k, v, z, &args)
    }

    fn attention_backward(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        z: CubeTensor,
        out: CubeTensor,
        lse: CubeTensor,
        grad: CubeTensor,
        args: AttnArgs,
    ) -> (CubeTensor, CubeTensor, CubeTensor, CubeTensor) {
        backward(q, k, v, z, out, lse, grad, &args)
    }
}
