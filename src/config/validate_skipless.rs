//! Checks of the skipless-transformer choices (docs/reference.md §3): shaped attention,
//! Value-SkipInit, SAS / SAS-P and U-SPA / E-SPA, and their combinations.

use super::schema::*;
use crate::spa::Target;

impl Experiment {
    /// Checks of the skipless-transformer choices (docs/reference.md §3) and their combinations.
    pub(super) fn validate_skipless(&self, bad: &mut dyn FnMut(&str, String)) {
        let m = &self.model;
        let a = &m.attention;
        let norm_name = normaliser_name(&a.normaliser);
        let logit_bias = matches!(
            m.positions,
            PositionsConfig::Alibi {} | PositionsConfig::Relative { .. }
        );
        // Shared requirements of shaping and SPA, reported under `what`'s path.
        let needs = |what: &str, zero_q: bool, causal_only: bool| -> Option<String> {
            let mut why = Vec::new();
            if !matches!(a.normaliser, NormaliserConfig::Softmax {}) {
                why.push(format!(
                    "the normaliser is {norm_name} (the construction assumes softmax)"
                ));
            }
            if zero_q && a.query_init != QueryInit::Zero {
                why.push(
                    "W_Q must start at exactly 0 (set model.attention.query_init = \"zero\")"
                        .to_string(),
                );
            }
            if a.slot != (SlotConfig::None {}) {
                why.push("a slot adds keys outside the T×T attention matrix".to_string());
            }
            if m.sink_tokens > 0 {
                why.push("sink tokens add positions outside the T×T attention matrix".to_string());
            }
            if zero_q && logit_bias {
                why.push(format!(
                    "{} positions add a logit bias, so attention at init is not the intended matrix; \
                     use nope, sinusoidal, learned or rope",
                    positions_name(&m.positions)
                ));
            }
            if causal_only && a.mask != (MaskConfig::Causal {}) {
                why.push("the mask is not causal (A_l is full lower-triangular)".to_string());
            }
            (!why.is_empty()).then(|| format!("{what} cannot be used here: {}", why.join("; ")))
        };
        match a.shaping {
            ShapingConfig::None {} => {}
            ShapingConfig::ValueSkipinit { alpha, beta, .. } => {
                if let Some(m) = needs("value_skipinit", false, false) {
                    bad("model.attention.shaping", m);
                }
                for (k, x) in [("alpha", alpha), ("beta", beta)] {
                    if !x.is_finite() {
                        bad(
                            &format!("model.attention.shaping.{k}"),
                            format!("found {x}, expected a finite number"),
                        );
                    }
                }
            }
            ShapingConfig::Shaped {
                alpha, beta, gamma, ..
            } => {
                if let Some(m) = needs("shaped attention", true, false) {
                    bad("model.attention.shaping", m);
                }
                for (k, x) in [("alpha", alpha), ("beta", beta), ("gamma", gamma)] {
                    if !x.is_finite() {
                        bad(
                            &format!("model.attention.shaping.{k}"),
                            format!("found {x}, expected a finite number"),
                        );
                    }
                }
            }
        }
        if let ValueOutputConfig::Reparam { alpha, beta, .. } = a.value_output {
            for (k, g) in [("alpha", alpha), ("beta", beta)] {
                if !g.init.is_finite() {
                    bad(
                        &format!("model.attention.value_output.{k}.init"),
                        format!("found {}, expected a finite number", g.init),
                    );
                }
            }
            if !beta.trainable && beta.init == 0.0 {
                bad(
                    "model.attention.value_output.beta",
                    "β_W = 0 and fixed would leave ΔW without any effect; make it trainable or \
                     non-zero"
                        .into(),
                );
            }
        }
        if let Some(target) = a.spa.target() {
            if let Some(m) = needs("U-SPA / E-SPA", true, true) {
                bad("model.attention.spa", m);
            }
            if a.shaping != (ShapingConfig::None {}) {
                bad(
                    "model.attention.spa",
                    "U-SPA / E-SPA already fix the attention matrix at init; use them with \
                     shaping = none"
                        .into(),
                );
            }
            let (key, x, ok) = match target {
                Target::Uniform { rho } => ("rho", rho, rho > 0.0 && rho < 1.0),
                Target::Exponential { gamma } => ("gamma", gamma, gamma > 0.0 && gamma.is_finite()),
            };
            if !ok {
                let want = if key == "rho" {
                    "0 < rho < 1 (the final off-diagonal correlation ρ_L)"
                } else {
                    "a finite number > 0 (the final decay rate γ_L)"
                };
                bad(
                    &format!("model.attention.spa.{key}"),
                    format!("found {x}, expected {want}"),
                );
            } else if m.n_layers >= 1
                && m.ctx >= 2
                && let Err(e) = crate::spa::spa_layers(&target, m.n_layers, m.ctx)
            {
                bad("model.attention.spa", e.to_string());
            }
        }
        let sas = matches!(m.block, BlockConfig::Sas { .. } | BlockConfig::SasP { .. });
        if sas {
            let mut why = Vec::new();
            if !matches!(a.shaping, ShapingConfig::Shaped { .. }) {
                why.push("model.attention.shaping = { kind = \"shaped\" }");
            }
            if !matches!(a.value_output, ValueOutputConfig::Identity { .. }) {
                why.push("model.attention.value_output = { kind = \"identity\" }");
            }
            if !why.is_empty() {
                bad(
                    "model.block.kind",
                    format!(
                        "SAS blocks are shaped attention without W_V / W_O; also set {} (or use \
                         pre_norm / parallel with gains for other skipless blocks)",
                        why.join(" and ")
                    ),
                );
            }
        }
        if m.norm == (NormConfig::None {}) && m.block == (BlockConfig::PostNorm {}) {
            bad(
                "model.norm",
                "post_norm with no norm is the pre_norm block with no norm; use block.kind = \
                 \"pre_norm\""
                    .into(),
            );
        }
    }
}
