//! The softmax cross-entropy kernel over the vocabulary ([`super::xent_op`]: one pass over the
//! logits each way, never a log-softmax copy of them): which half runs a call, and the call.
//! The CPU half takes f32 logits; the CubeCL half also the f16/bf16 logits of a mixed-precision
//! head (the head's product is not widened to an f32 copy of the (N, V) logits).

use super::{Choice, Half};
use burn::tensor::{DType, Device, Int, Tensor};

/// Whether the kernel runs a cross-entropy over logits of `dtype` on `device`, and which half;
/// or why not (the explicit log-softmax runs then).
pub fn choose(device: &Device, dtype: DType) -> Choice {
    let half = super::half_on(device)?;
    match (half, dtype) {
        (Half::Flex, DType::F32) | (Half::Cube, DType::F32 | DType::F16 | DType::BF16) => Ok(half),
        (_, other) => Err(vec![format!(
            "logits in {other:?} on the {half:?} half (the CPU half takes f32)"
        )]),
    }
}

/// `Σ_i w_i (−log softmax(x_i)[t_i])` (1) for logits (N, V), targets (N) and weights (N) by
/// the kernel; only where [`choose`] chose a half.
pub fn cross_entropy(logits: Tensor<2>, targets: Tensor<1, Int>, weights: Tensor<1>) -> Tensor<1> {
    #[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
    return super::xent_op::cross_entropy(logits, targets, weights);
    #[cfg(not(any(feature = "flex", feature = "wgpu", feature = "cuda")))]
    {
        let _ = (logits, targets, weights);
        unreachable!("no backend is compiled in")
    }
}
