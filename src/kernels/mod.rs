//! sinklab's kernels: one module per operation that can replace a stage of the explicit
//! computation (`model/`), each owning the check of which configurations it covers
//! ([`Coverage`]). Where a kernel does not cover a model, the model runs the explicit path and
//! says so (`sinklab check`, the start of `train`); a configuration is never refused because a
//! kernel does not cover it, and never runs a kernel that does not.
//!
//! - [`attention`]: causal softmax attention without the T × T weights leaving the kernel
//!   (`model.attention.kernel = "fused"`); today Burn's functional `attention` on every backend.

pub mod attention;

/// Whether a kernel covers a model: `Ok` or the reasons it does not, each naming the setting.
pub type Coverage = Result<(), Vec<String>>;

/// The line `check` and `train` print about the kernels a model asks for: None when it asks
/// for none.
pub fn summary(m: &crate::config::ModelConfig) -> Option<String> {
    use crate::config::AttentionKernel;
    match m.attention.kernel {
        AttentionKernel::Manual => None,
        AttentionKernel::Fused => Some(match attention::covers(m) {
            Ok(()) => "attention: the fused kernel (training and evaluation; the probe path and \
                       cached decoding keep the explicit weights)"
                .to_string(),
            Err(why) => format!(
                "attention: kernel = \"fused\" does not cover this model ({}): the explicit path runs",
                why.join(", ")
            ),
        }),
    }
}
