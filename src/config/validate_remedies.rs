//! Checks of the newer sink remedies (docs/reference.md §1.1–1.2): softpick, clipped softmax,
//! Scalable-Softmax, the per-token and sparse output gates, and their combinations.

use super::schema::*;

impl Experiment {
    /// Checks of the newer normalisers and gates, each refusal with its reason.
    pub(super) fn validate_remedies(&self, bad: &mut dyn FnMut(&str, String)) {
        let m = &self.model;
        let a = &m.attention;
        let finite = |bad: &mut dyn FnMut(&str, String), key: &str, x: f64| {
            if !x.is_finite() {
                bad(
                    &format!("model.attention.normaliser.{key}"),
                    format!("found {x}, expected a finite number"),
                );
            }
            x.is_finite()
        };
        match a.normaliser {
            NormaliserConfig::Softpick { eps } => {
                if finite(bad, "eps", eps) && eps <= 0.0 {
                    bad(
                        "model.attention.normaliser.eps",
                        format!(
                            "found {eps}, expected ε > 0: a row whose logits are all 0 has a \
                             zero sum, and 0 / ε = 0 is what lets it output nothing"
                        ),
                    );
                }
            }
            NormaliserConfig::ClippedSoftmax { gamma, zeta } => {
                if finite(bad, "gamma", gamma) && gamma > 0.0 {
                    bad(
                        "model.attention.normaliser.gamma",
                        format!(
                            "found {gamma}, expected γ ≤ 0: with γ > 0 every masked key would \
                             receive γ of attention (Bondarenko et al. stretch below 0 so that \
                             weights can be exactly 0)"
                        ),
                    );
                }
                if finite(bad, "zeta", zeta) && zeta < 1.0 {
                    bad(
                        "model.attention.normaliser.zeta",
                        format!(
                            "found {zeta}, expected ζ ≥ 1: with ζ < 1 no weight can reach 1, \
                             not even a query's only key"
                        ),
                    );
                }
            }
            NormaliserConfig::ScalableSoftmax { init, .. } => {
                finite(bad, "init", init);
                if matches!(
                    m.positions,
                    PositionsConfig::Alibi {} | PositionsConfig::Relative { .. }
                ) {
                    bad(
                        "model.positions",
                        format!(
                            "scalable_softmax scales the logits by σ ln n through the queries, so \
                             the {} logit bias would stay unscaled (SSMax scales the whole \
                             logit); use rope, nope, sinusoidal or learned positions",
                            positions_name(&m.positions)
                        ),
                    );
                }
                if matches!(a.slot, SlotConfig::SinkLogit { .. }) {
                    bad(
                        "model.attention.slot",
                        "a learned sink logit is not a key: scalable_softmax would leave it \
                         unscaled beside the scaled q·k logits; use a key slot (kv_bias, \
                         k_bias, memory_kv) or sink tokens, which are counted in n and scaled"
                            .into(),
                    );
                }
            }
            NormaliserConfig::Softmax {}
            | NormaliserConfig::SoftmaxN { .. }
            | NormaliserConfig::Sigmoid { .. }
            | NormaliserConfig::SigmoidNormalised {}
            | NormaliserConfig::Elu1 {}
            | NormaliserConfig::Elu1Normalised {}
            | NormaliserConfig::Relu {}
            | NormaliserConfig::Linear { .. } => {}
        }
        match a.gate {
            GateConfig::PerToken { init } => {
                if !(init > 0.0 && init < 1.0) {
                    bad(
                        "model.attention.gate.init",
                        format!(
                            "found {init}, expected 0 < init < 1: the gate's initial value \
                             σ(b) (Bondarenko et al.: 0.25)"
                        ),
                    );
                }
            }
            GateConfig::Sparse { dims } => {
                if !(1..=m.d_model).contains(&dims) {
                    bad(
                        "model.attention.gate.dims",
                        format!(
                            "found {dims}, expected 1..={} (model.d_model): the gate reads the \
                             first `dims` dimensions of the attention input",
                            m.d_model
                        ),
                    );
                }
            }
            GateConfig::None {} | GateConfig::Headwise {} | GateConfig::Elementwise {} => {}
        }
    }
}
