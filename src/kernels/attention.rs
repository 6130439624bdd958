//! The fused attention kernel: `softmax(q kᵀ / √d_h + causal mask) v` for (B, H, S, d_h) q, k,
//! v without handing the (B, H, S, S) weights back, so a backend may tile it. Today it is
//! Burn's functional `attention` with the causal flag (the same maths as the explicit path;
//! Burn's default implementation decomposes it on the CPU backend).
//!
//! What it covers: plain causal softmax attention — no slot (sink logit, KV/K/V bias, memory
//! columns), no logit bias (ALiBi, T5 buckets, U-SPA / E-SPA), no other mask, no row scale,
//! no shaping. Grouped-query heads, gating, sink tokens, RoPE and the value bias added after
//! the weighted sum are outside the kernel and allowed.

use super::Coverage;
use crate::config::{
    MaskConfig, ModelConfig, NormaliserConfig, PositionsConfig, ShapingConfig, SlotConfig,
    SpaConfig,
};
use burn::tensor::Tensor;
use burn::tensor::module::attention as burn_attention;
use burn::tensor::ops::AttentionModuleOptions;

/// Whether the kernel covers the model's attention.
pub fn covers(m: &ModelConfig) -> Coverage {
    let a = &m.attention;
    let mut why = Vec::new();
    if !matches!(a.normaliser, NormaliserConfig::Softmax {}) {
        why.push("the normaliser is not softmax".to_string());
    }
    if a.slot != (SlotConfig::None {}) {
        why.push("a slot is set".to_string());
    }
    if a.mask != (MaskConfig::Causal {}) {
        why.push("the mask is not causal".to_string());
    }
    if matches!(
        m.positions,
        PositionsConfig::Alibi {} | PositionsConfig::Relative { .. }
    ) {
        why.push("positions add a logit bias".to_string());
    }
    if a.row_scale != 1.0 {
        why.push("row_scale ≠ 1".to_string());
    }
    if a.shaping != (ShapingConfig::None {}) {
        why.push("the attention matrix is shaped".to_string());
    }
    if a.spa != (SpaConfig::None {}) {
        why.push("U-SPA / E-SPA add a logit bias and rescale rows".to_string());
    }
    if why.is_empty() { Ok(()) } else { Err(why) }
}

/// (B, H, S, d_h) q, k, v → (B, H, S, d_h): causal softmax attention, scale 1/√d_h.
pub fn forward(q: Tensor<4>, k: Tensor<4>, v: Tensor<4>) -> Tensor<4> {
    let options = AttentionModuleOptions {
        scale: None,
        softcap: None,
        is_causal: true,
    };
    burn_attention(q, k, v, None, None, options)
}
