//! AdamW's update as one CubeCL kernel (the `Cube` half of [`crate::kernels::adamw_op`]; the
//! maths of [`crate::kernels::adamw`]): one pass over p, g, m, v, the gradient's scale read
//! from the device, the same f32 operations in the same order as the CPU half.

use crate::kernels::adamw::AdamArgs;
use burn::backend::DType;
use burn::backend::TensorMetadata;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

#[cube(launch)]
#[allow(clippy::too_many_arguments)]
fn adamw_update(
    p: &Tensor<f32>,
    g: &Tensor<f32>,
    m: &Tensor<f32>,
    v: &Tensor<f32>,
    scale: &Tensor<f32>,
    p_out: &mut Tensor<f32>,
    m_out: &mut Tensor<f32>,
    v_out: &mut Tensor<f32>,
    b1: f32,
    one_minus_b1: f32,
    b2: f32,
    one_minus_b2: f32,
    decay: f32,
    c2: f32,
    eps: f32,
    step: f32,
    n: usize,
) {
    let i = ABSOLUTE_POS;
    if i < n {
        let gi = g[i] * scale[0];
        let mi = m[i] * b1 + gi * one_minus_b1;
        let vi = v[i] * b2 + gi * gi * one_minus_b2;
        m_out[i] = mi;
        v_out[i] = vi;
        p_out[i] = p[i] * decay - mi / (vi.sqrt() * c2 + eps) * step;
    }
}

/// (p, m, v) after one update (f32, flat).
pub fn update(
    p: CubeTensor,
    g: CubeTensor,
    m: CubeTensor,
    v: CubeTensor,
    scale: CubeTensor,
    a: AdamArgs,
) -> (CubeTensor, CubeTensor, CubeTensor) {
    for (what, t) in [
        ("p", &p),
        ("g", &g),
        ("m", &m),
        ("v", &v),
        ("scale", &scale),
    ] {
        assert_eq!(t.dtype, DType::F32, "AdamW: {what} is f32");
    }
    let n = p.shape().num_elements();
    let (p, g, m, v, scale) = (
        into_contiguous(p),
        into_contiguous(g),
        into_contiguous(m),
        into_contiguous(v),
        into_contiguous(scale),
    );
    let out = || {
        empty_device_dtype(
            p.client.clone(),
            p.device.clone(),
            p.shape().clone(),
            DType::F32,
        )
    };
    let (p_out, m_out, v_out) = (out(), out(), out());
    if n > 0 {
        let client = p.client.clone();
        let cube_dim = CubeDim::new(&client, n);
        let count = cubecl::calculate_cube_count_elemwise(&client, n, cube_dim);
        adamw_update::launch(
            &client,
            count,
            cube_dim,
            p.into_tensor_arg(),
            g.into_tensor_arg(),
            m.into_tensor_arg(),
            v.into_tensor_arg(),
            scale.into_tensor_arg(),
            p_out.clone().into_tensor_arg(),
            m_out.clone().into_tensor_arg(),
            v_out.clone().into_tensor_arg(),
            a.b1,
            a.one_minus_b1,
            a.b2,
            a.one_minus_b2,
            a.decay,
            a.c2,
            a.eps,
            a.step,
            n,
        );
    }
    (p_out, m_out, v_out)
}
