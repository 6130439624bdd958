//! Softmax cross-entropy over the vocabulary as CubeCL kernels (the `Cube` half of
//! [`crate::kernels::xent_op`]; the maths of [`crate::kernels::cpu::xent`]):
//!
//! ```text
//! lse_i  = log Σ_j exp(x_ij)                        # (N), kept for the backward
//! loss   = Σ_i w_i (lse_i − x_i,t_i)                 # w_i = mask_i / denom
//! ∂x_ij  = g w_i (exp(x_ij − lse_i) − [j = t_i])    # (N, V)
//! ```
//!
//! One cube per row walks the vocabulary a block of [`UNITS`] columns at a time: each unit
//! keeps a running maximum and sum (an online log-sum-exp) over its columns, and the cube
//! merges the units' pairs in shared memory. The logits are read in the dtype they are stored
//! in (f32, or bf16/f16 under mixed precision: the head's product is never widened to an f32
//! copy of the (N, V) logits), every sum in f32; the backward writes ∂x in the logits' dtype,
//! reading the upstream gradient g from the device (no value comes back to the host).

use burn::backend::DType;
use burn::backend::TensorMetadata;
use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::FloatTensorOps;
use burn::tensor::{FloatDType, Shape};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// Units of a row's cube (a power of two: the merge halves them).
const UNITS: usize = 256;

/// Forward: one cube per row; each row's weighted loss term and its log-sum-exp.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn xent_forward<E: Float, I: Numeric>(
    x: &Tensor<E>,          // (N, V)
    t: &Tensor<I>,          // (N)
    w: &Tensor<f32>,        // (N)
    rows: &mut Tensor<f32>, // (N): w_i (lse_i − x_i,t_i)
    lse: &mut Tensor<f32>,  // (N)
    v: usize,
    #[comptime] units: usize,
    #[define(E, I)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    let u = UNIT_POS as usize;
    let base = row * v;
    let mut m = f32::new(-1.0e30);
    let mut s = 0.0f32;
    let mut j = u;
    while j < v {
        let xv = f32::cast_from(x[base + j]);
        if xv > m {
            s = s * (m - xv).exp() + 1.0f32;
            m = xv;
        } else {
            s += (xv - m).exp();
        }
        j += units;
    }
    let mut sm = Shared::<[f32]>::new_slice(units);
    let mut ss = Shared::<[f32]>::new_slice(units);
    sm[u] = m;
    ss[u] = s;
    sync_cube();
    // halve the live units log₂(units) times (unrolled: each level's width is a constant)
    #[unroll]
    for level in 0..comptime!(units.trailing_zeros() as usize) {
        let half = comptime!(units >> (level + 1));
        if u < half {
            let m1 = sm[u];
            let m2 = sm[u + half];
            let mm = max(m1, m2);
            ss[u] = ss[u] * (m1 - mm).exp() + ss[u + half] * (m2 - mm).exp();
            sm[u] = mm;
        }
        sync_cube();
    }
    if u == 0 {
        let l = sm[0] + ss[0].ln();
        lse[row] = l;
        let wi = w[row];
        let mut term = 0.0f32;
        if wi != 0.0f32 {
            let ti = u32::cast_from(t[row]) as usize;
            term = wi * (l - f32::cast_from(x[base + ti]));
        }
        rows[row] = term;
    }
}

/// Backward: one cube per row; ∂x in the logits' dtype.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn xent_backward<E: Float, I: Numeric>(
    x: &Tensor<E>,      // (N, V)
    t: &Tensor<I>,      // (N)
    w: &Tensor<f32>,    // (N)
    lse: &Tensor<f32>,  // (N)
    g: &Tensor<f32>,    // (1): the loss's upstream gradient
    dx: &mut Tensor<E>, // (N, V)
    v: usize,
    #[comptime] units: usize,
    #[define(E, I)] _dtypes: [ElemType; 2],
) {
    let row = CUBE_POS;
    let base = row * v;
    let scale = g[0] * w[row];
    let l = lse[row];
    let ti = u32::cast_from(t[row]) as usize;
    let mut j = UNIT_POS as usize;
    while j < v {
        let mut d = 0.0f32;
        if scale != 0.0f32 {
            d = (f32::cast_from(x[base + j]) - l).exp() * scale;
            if j == ti {
                d -= scale;
            }
        }
        dx[base + j] = E::cast_from(d);
        j += units;
    }
}

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

fn rows_cols(x: &CubeTensor) -> [usize; 2] {
    match x.shape().as_slice() {
        &[n, v] => [n, v],
        other => panic!("cross-entropy: logits (N, V), got {other:?}"),
    }
}

/// (loss (1), lse (N)) for logits (N, V), targets (N) and weights (N).
pub fn forward(x: CubeTensor, t: CubeTensor, w: CubeTensor) -> (CubeTensor, CubeTensor) {
    let [n, v] = rows_cols(&x);
    let (x, t, w) = (
        into_contiguous(x),
        into_contiguous(t),
        into_contiguous(f32_of(w)),
    );
    let rows = empty(&x, &[n], DType::F32);
    let lse = empty(&x, &[n], DType::F32);
    if n > 0 {
        let client = x.client.clone();
        let dtypes = [
            dtype_to_storage_type(x.dtype),
            dtype_to_storage_type(t.dtype),
        ];
        xent_forward::launch(
            &client,
            CubeCount::Static(n as u32, 1, 1),
            CubeDim::new_1d(UNITS as u32),
            x.into_tensor_arg(),
            t.into_tensor_arg(),
            w.into_tensor_arg(),
            rows.clone().into_tensor_arg(),
            lse.clone().into_tensor_arg(),
            v,
            UNITS,
            dtypes,
        );
    }
    let loss = CubeBackend::float_reshape(CubeBackend::float_sum(rows), Shape::from(vec![1]));
    (loss, lse)
}

/// ∂x (N, V) in the logits' dtype for the upstream gradient `g` (1) of the loss.
pub fn backward(
    x: CubeTensor,
    t: CubeTensor,
    w: CubeTensor,
    lse: CubeTensor,
    g: CubeTensor,
) -> CubeTensor {
    let [n, v] = rows_cols(&x);
    let (x, t, w) = (
        into_contiguous(x),
        into_contiguous(t),
        into_contiguous(f32_of(w)),
    );
    let (lse, g) = (into_contiguous(lse), into_contiguous(f32_of(g)));
    let dx = empty(&x, &[n, v], x.dtype);
    if n > 0 {
        let client = x.client.clone();
        let dtypes = [
            dtype_to_storage_type(x.dtype),
            dtype_to_storage_type(t.dtype),
        ];
        xent_backward::launch(
            &client,
            CubeCount::Static(n as u32, 1, 1),
            CubeDim::new_1d(UNITS as u32),
            x.into_tensor_arg(),
            t.into_tensor_arg(),
            w.into_tensor_arg(),
            lse.into_tensor_arg(),
            g.into_tensor_arg(),
            dx.clone().into_tensor_arg(),
            v,
            UNITS,
            dtypes,
        );
    }
    dx
}
