//! The fused attention kernel: `normalise(q kᵀ / √d_h + bias, mask) v` for (B, H, Q, d_h)
//! queries against (B, H, C, d_h) keys and values without the (B, H, Q, C) weights ever
//! existing — tiles with an online softmax, forward and backward ([`super::cpu::attention`]).
//!
//! What it covers, beyond plain causal softmax attention:
//! - softmax_n (`exp(s) / (n + Σ exp(s))`: an extra logit ln n with value 0) and the learned
//!   sink logit (the extra logit is z_h, trained through the kernel's own ∂z);
//! - key/value slots (KV bias, K bias, memory K/V): extra key columns in front, never masked,
//!   no position bias; the V bias, the output gate, sink tokens, grouped-query heads and RoPE
//!   are outside the kernel;
//! - every mask (causal, sliding window, sinks + window, prefix), passed as at most two runs
//!   of visible key columns per query row;
//! - ALiBi (a fixed logit bias) and a row scale α (applied to the output, `α A V = α (A V)`).
//!
//! Not covered (the explicit path runs and `check` says why): the other normalisers, T5
//! relative buckets (a learned bias), U-SPA / E-SPA and shaped attention / Value-SkipInit
//! (they change the weights after the normaliser), cached decoding and any forward whose hooks
//! want the pattern (the probe path).

use super::Coverage;
use crate::config::{
    DeviceKind, ModelConfig, NormaliserConfig, PositionsConfig, Precision, ShapingConfig, SpaConfig,
};
use burn::tensor::Tensor;
use std::sync::Arc;

/// Whether the kernel covers the model's attention (the model's settings; where it runs is
/// [`runs_on`], and the precision: [`covers_precision`]). Every mask is
/// at most two runs of visible keys per row, so none is refused here.
pub fn covers(m: &ModelConfig) -> Coverage {
    let a = &m.attention;
    let mut why = Vec::new();
    if !matches!(
        a.normaliser,
        NormaliserConfig::Softmax {} | NormaliserConfig::SoftmaxN { .. }
    ) {
        why.push("the normaliser is neither softmax nor softmax_n".to_string());
    }
    if matches!(m.positions, PositionsConfig::Relative { .. }) {
        why.push("T5 relative positions add a learned logit bias".to_string());
    }
    if a.shaping != (ShapingConfig::None {}) {
        why.push("the attention matrix is shaped".to_string());
    }
    if a.spa != (SpaConfig::None {}) {
        why.push("U-SPA / E-SPA add a logit bias and rescale rows".to_string());
    }
    if why.is_empty() { Ok(()) } else { Err(why) }
}

/// Whether the attention kernel runs on a device: flex (the CPU half) and the CubeCL
/// backends wgpu and cuda (the Cube half, [`super::cube::attention`]), each where its cargo
/// feature is compiled in and [`super::SWITCH`] leaves the kernels on.
pub fn runs_on(device: DeviceKind) -> Coverage {
    let built = match device {
        DeviceKind::Flex => cfg!(feature = "flex"),
        DeviceKind::Wgpu => cfg!(feature = "wgpu"),
        DeviceKind::Cuda => cfg!(feature = "cuda"),
    };
    if !super::enabled() {
        Err(vec![format!("{}=0 turns them off", super::SWITCH)])
    } else if built {
        Ok(())
    } else {
        Err(vec![format!(
            "run.device = \"{}\" is not compiled in",
            device.name()
        )])
    }
}

/// Whether a live tensor's device is one the attention kernel runs on (flex or a CubeCL
/// device, with or without autodiff) and [`super::SWITCH`] leaves the kernels on.
pub fn on_device(device: &burn::tensor::Device) -> bool {
    if super::on_device(device) {
        return true;
    }
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    return super::enabled()
        && matches!(
            device.clone().inner().as_dispatch(),
            burn::backend::DispatchDevice::Cube(_)
        );
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    false
}

/// The precisions the kernel takes on a device: f32 everywhere; f16 and bf16 (mixed precision:
/// q, k, v stored in the low precision, the arithmetic in f32) on the CubeCL half only — the
/// CPU half computes in f32, so there the explicit path runs (its products in the low
/// precision, as configured). Whether the backend has the dtype at all is the backend's check
/// (`crate::backend`: WGSL has no bf16).
pub fn covers_precision(p: Precision, device: DeviceKind) -> Coverage {
    match (p, device) {
        (Precision::F32, _) | (_, DeviceKind::Wgpu | DeviceKind::Cuda) => Ok(()),
        (other, DeviceKind::Flex) => Err(vec![format!(
            "precision {} on flex (the CPU attention kernel computes in f32)",
            other.name()
        )]),
    }
}

/// Whether a forward on `device` whose matrix products run in `compute` (None: f32) takes the
/// kernel: [`on_device`], and a low precision only on a CubeCL device ([`covers_precision`]).
pub fn runs_with(device: &burn::tensor::Device, compute: Option<burn::tensor::FloatDType>) -> bool {
    on_device(device) && (compute.is_none() || !super::on_device(device))
}

/// What a forward passes to the kernel for its query rows: the visible key columns of each
/// row and the fixed logit bias, built once per forward ([`crate::model`]'s context).
#[derive(Debug, Clone)]
pub struct Plan {
    /// Per query row, up to two half-open runs of visible key columns, in order.
    pub runs: Arc<Vec<[[u32; 2]; 2]>>,
    /// ALiBi's bias (H, Q, C), row-major; None without.
    pub bias: Option<Arc<Vec<f32>>>,
}

impl Plan {
    /// The plan for `nq` query rows from the visibility of each (row, column) of the explicit
    /// path's C columns and its bias (H, Q, C), or None when some row's visible keys are more
    /// than two runs. The first `logit_cols` columns (the sink logit's) are the kernel's extra
    /// logit, not keys: they are dropped, and the kernel's key columns are the remaining C −
    /// `logit_cols`.
    pub fn new(
        nq: usize,
        c: usize,
        logit_cols: usize,
        visible: impl Fn(usize, usize) -> bool,
        bias: Option<Arc<Vec<f32>>>,
    ) -> Option<Self> {
        let visible = |i: usize, j: usize| visible(i, j + logit_cols);
        let bias = match bias {
            Some(b) if logit_cols > 0 => Some(Arc::new(
                b.chunks_exact(c)
                    .flat_map(|row| row[logit_cols..].iter().copied())
                    .collect(),
            )),
            other => other,
        };
        let c = c - logit_cols;
        let mut runs = Vec::with_capacity(nq);
        for i in 0..nq {
            let mut row = [[0u32; 2]; 2];
            let mut n = 0;
            let mut j = 0;
            while j < c {
                if visible(i, j) {
                    let start = j;
                    while j < c && visible(i, j) {
                        j += 1;
                    }
                    if n == 2 {
                        return None;
                    }
                    row[n] = [start as u32, j as u32];
                    n += 1;
                } else {
                    j += 1;
                }
            }
            runs.push(row);
        }
        Some(Self {
            runs: Arc::new(runs),
            bias,
        })
    }
}

/// (B, H, Q, d_h) q, (B, H, C, d_h) k and v (slot columns first), the extra logit z (H; −inf
/// for none) → (B, H, Q, d_h). Only on devices [`on_device`] accepts.
pub fn forward(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>, z: Tensor<1>, plan: &Plan) -> Tensor<4> {
    #[cfg(any(feature = "flex", feature = "wgpu", feature = "cuda"))]
    {
        let dh = q.dims()[3];
        let args = super::attention_op::AttnArgs {
            scale: 1.0 / (dh as f32).sqrt(),
            runs: plan.runs.clone(),
            bias: plan.bias.clone(),
        };
        super::attention_op::attention(q, k, v, z, args)
    }
    #[cfg(not(any(feature = "flex", feature = "wgpu", feature = "cuda")))]
    {
        let _ = (q, k, v, z, plan);
        unreachable!("no backend is compiled in")
    }
}
