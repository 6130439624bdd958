//! AdamW's update of one parameter in one pass over its values ([`super::adamw_op`]): the CPU
//! half ([`super::cpu::adamw`]) and the CubeCL half ([`super::cube::adamw`]), each taking the
//! gradient's scale (global-norm clipping, f16 loss scaling) as a one-element tensor on the
//! parameter's device, so that a GPU step never reads it back ([`crate::optim`]). Which half
//! runs an update, if any: [`choose`].
//!
//! ```text
//! g ← s g                                  # s: the scale tensor's one value
//! m ← β₁ m + (1 − β₁) g      v ← β₂ v + (1 − β₂) g²
//! p ← p (1 − lr·wd) − (m / (√v c₂ + ε)) (lr c₁),   c₁ = 1/(1 − β₁ᵗ), c₂ = 1/√(1 − β₂ᵗ)
//! ```

use super::Choice;
use burn::tensor::{Device, Tensor};

/// The update's scalars, each the f32 the tensor ops would multiply by.
#[derive(Debug, Clone, Copy)]
pub struct AdamArgs {
    pub b1: f32,
    pub one_minus_b1: f32,
    pub b2: f32,
    pub one_minus_b2: f32,
    /// 1 − lr·wd; 1 = no decay.
    pub decay: f32,
    pub c2: f32,
    pub eps: f32,
    /// lr · c₁.
    pub step: f32,
}

/// Whether the kernel updates parameters on `device` (f32 masters on either half), and
/// which half; or why not (the tensor ops of [`crate::optim`] run then).
pub fn choose(device: &Device) -> Choice {
    super::half_on(device)
}

/// (p, m, v) after one update of flat p, g, m, v (n) with the gradient scaled by `scale` (1);
/// only where [`choose`] chose a half. The tensors are plain (not autodiff) ones.
pub fn adamw(
    p: Tensor<1>,
    g: Tensor<1>,
    m: Tensor<1>,
    v: Tensor<1>,
    scale: Tensor<1>,
    args: AdamArgs,
) -> (Tensor<1>, Tensor<1>, Tensor<1>) {
    #[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
    return super::adamw_op::adamw(p, g, m, v, scale, args);
    #[cfg(not(any(feature = "flex", feature = "wgpu", feature = "cuda")))]
    {
        let _ = (g, scale, args);
        unreachable!("no backend is compiled in ({p:?}, {m:?}, {v:?})")
    }
}
