//! sinklab's kernels: fused operations that replace a stage of the explicit computation
//! (`model/`) where they cover the model, each owning the check of which configurations it
//! covers ([`Coverage`]). Where a kernel does not cover a model, the model runs the explicit
//! path and says so (`sinklab check`, the start of `train`); a configuration is never refused
//! because a kernel does not cover it, and never runs a kernel that does not.
//!
//! Each kernel is one Burn operation with a hand-written backward (Burn's backend extensions,
//! [`ops`]): a CPU half on `Flex` ([`cpu`], host code on slices, vectorised with [`simd`]),
//! and — the GPU issue's part — a `Cube` half beside it. Backends without an implementation
//! keep the explicit path, unchanged ([`runs_on`]).
//!
//! - [`attention`]: softmax attention in tiles with an online softmax, forward and backward,
//!   without the T × T weights (`model.attention.kernel = "fused"`).
//! - [`ops::cross_entropy`]: the softmax cross-entropy over the vocabulary in one pass each
//!   way (always on where the kernels run).

pub mod attention;
#[cfg(feature = "flex")]
pub mod cpu;
#[cfg(feature = "flex")]
pub mod ops;
pub mod simd;

use crate::config::{DeviceKind, ModelConfig, Precision};

/// Whether a kernel covers a model: `Ok` or the reasons it does not, each naming the setting.
pub type Coverage = Result<(), Vec<String>>;

/// Whether the kernels run on a device: the CPU backend (`Flex`) has them; other backends keep
/// the explicit path.
pub fn runs_on(device: DeviceKind) -> Coverage {
    if device == DeviceKind::Flex && cfg!(feature = "flex") {
        Ok(())
    } else {
        Err(vec![format!(
            "run.device = \"{}\" has no implementation of the kernels (flex has)",
            device.name()
        )])
    }
}

/// Whether a live tensor's device is one the kernels run on (the CPU backend, with or without
/// autodiff).
pub fn on_device(device: &burn::tensor::Device) -> bool {
    #[cfg(feature = "flex")]
    return device.clone().inner() == burn::tensor::Device::flex();
    #[cfg(not(feature = "flex"))]
    return {
        let _ = device;
        false
    };
}

/// The line `check` and `train` print about the kernels a run uses: None when it asks for
/// none.
pub fn summary(m: &ModelConfig, device: DeviceKind, precision: Precision) -> Option<String> {
    use crate::config::AttentionKernel;
    let place = runs_on(device);
    let xent = match &place {
        Ok(()) => "cross-entropy: the fused kernel".to_string(),
        Err(why) => format!("cross-entropy: explicit ({})", why.join(", ")),
    };
    let attn = match m.attention.kernel {
        AttentionKernel::Manual => return place.is_ok().then_some(xent),
        AttentionKernel::Fused => match (
            attention::covers(m),
            place.and(attention::covers_precision(precision)),
        ) {
            (Ok(()), Ok(())) => "attention: the fused kernel (training and evaluation; the probe \
                                 path and cached decoding keep the explicit weights)"
                .to_string(),
            (Err(why), _) | (Ok(()), Err(why)) => format!(
                "attention: kernel = \"fused\" does not cover this model ({}): the explicit \
                 path runs",
                why.join(", ")
            ),
        },
    };
    Some(format!("kernels: {attn}; {xent}"))
}
