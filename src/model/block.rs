//! The feed-forward network and the transformer block: each wiring is its equation
//! (docs/reference.md §2–3).

use super::attention::Attention;
use super::context::{Ctx, LayerKv};
use super::hooks::{Frame, StreamSite, Tap, tap_stream};
use super::layers::{Compute, GainValue, Init, Linear, Norm, gain_param, mix, norm_or_id, scale};
use crate::config::{BlockConfig, FfnConfig, Gain, ModelConfig};
use crate::spa::SpaLayer;
use burn::module::{Module, Param};
use burn::tensor::Tensor;
use burn::tensor::activation::{gelu, relu, silu};

/// `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`: GPT-2's `gelu_new`.
fn gelu_tanh(x: Tensor<3>) -> Tensor<3> {
    let inner =
        (x.clone() + x.clone().powi_scalar(3) * 0.044715) * (2.0 / std::f64::consts::PI).sqrt();
    x * (inner.tanh() + 1.0) * 0.5
}

/// Feed-forward network: `W_down(act(x W_up))`, or gated `W_down(act(x W_gate) ⊙ x W_up)`.
/// The input side is an enum that owns exactly the projections its kind has (`up` is a
/// transparent field, as `slot` is: the parameters keep their names `mlp.w_gate.*`,
/// `mlp.w_up.*`).
#[derive(Module, Debug)]
pub struct Mlp {
    pub up: Up,
    pub w_down: Linear,
}

/// The input side of the FFN: one projection and an activation, or a gate and an up
/// projection.
// One per block, built once: the gated variant's second Linear is not worth a Box.
#[allow(clippy::large_enum_variant)]
#[derive(Module, Debug)]
pub enum Up {
    Plain(PlainUp),
    Gated(GatedUp),
}

/// `act(x W_up)`.
#[derive(Module, Debug)]
pub struct PlainUp {
    pub w_up: Linear,
    #[module(skip)]
    pub act: PlainAct,
}

/// `act(x W_gate) ⊙ x W_up`.
#[derive(Module, Debug)]
pub struct GatedUp {
    pub w_gate: Linear,
    pub w_up: Linear,
    #[module(skip)]
    pub act: GateAct,
}

/// The activation of an ungated FFN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainAct {
    Relu,
    Gelu,
    GeluTanh,
    Silu,
}

/// The gated FFNs: the activation on the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateAct {
    Swiglu,
    Geglu,
    Reglu,
}

impl Mlp {
    /// None for `ffn = none`.
    pub(crate) fn new(cfg: &ModelConfig, init: &mut Init) -> Option<Self> {
        let (d, f, b) = (cfg.d_model, cfg.d_ff, cfg.bias);
        // draws in the order W_gate, W_up, W_down (the checkpoints' and goldens' order)
        let plain = |act, init: &mut Init| {
            Up::Plain(PlainUp {
                w_up: Linear::new(init, d, f, b),
                act,
            })
        };
        let gated = |act, init: &mut Init| {
            let w_gate = Linear::new(init, d, f, b);
            Up::Gated(GatedUp {
                w_gate,
                w_up: Linear::new(init, d, f, b),
                act,
            })
        };
        let up = match cfg.ffn {
            FfnConfig::None {} => return None,
            FfnConfig::Relu {} => plain(PlainAct::Relu, init),
            FfnConfig::Gelu {} => plain(PlainAct::Gelu, init),
            FfnConfig::GeluTanh {} => plain(PlainAct::GeluTanh, init),
            FfnConfig::Silu {} => plain(PlainAct::Silu, init),
            FfnConfig::Swiglu {} => gated(GateAct::Swiglu, init),
            FfnConfig::Geglu {} => gated(GateAct::Geglu, init),
            FfnConfig::Reglu {} => gated(GateAct::Reglu, init),
        };
        // The same draws from the baseline stream, scaled to `w_down_init_std` if it is set.
        let std = init.std;
        init.std = cfg.w_down_init_std.unwrap_or(std);
        let w_down = Linear::new(init, f, d, b);
        init.std = std;
        Some(Self { up, w_down })
    }

    /// W_up, gated or not.
    pub fn w_up(&self) -> &Linear {
        match &self.up {
            Up::Plain(p) => &p.w_up,
            Up::Gated(g) => &g.w_up,
        }
    }

    /// `x` (B, T, d) → (B, T, d), the products in the `c` dtype (mixed precision).
    pub fn forward(&self, x: Tensor<3>, c: Compute) -> Tensor<3> {
        let hidden = match &self.up {
            Up::Plain(p) => {
                let u = p.w_up.forward_in(x, c); // (B, T, f)
                match p.act {
                    PlainAct::Relu => relu(u),
                    PlainAct::Gelu => gelu(u),
                    PlainAct::GeluTanh => gelu_tanh(u),
                    PlainAct::Silu => silu(u),
                }
            }
            Up::Gated(g) => {
                let gate = g.w_gate.forward_in(x.clone(), c); // (B, T, f)
                let up = g.w_up.forward_in(x, c);
                gated(gate, up, g.act)
            }
        }; // (B, T, f)
        self.w_down.forward_in(hidden, c) // (B, T, d)
    }
}

/// `act(gate) ⊙ up`, in the fused kernel where it runs (SwiGLU and ReGLU on the CPU).
fn gated(gate: Tensor<3>, up: Tensor<3>, act: GateAct) -> Tensor<3> {
    #[cfg(feature = "flex")]
    if crate::kernels::on_device(&gate.device()) {
        use crate::kernels::ops::Act;
        match act {
            GateAct::Swiglu => return crate::kernels::glu(gate, up, Act::Silu),
            GateAct::Reglu => return crate::kernels::glu(gate, up, Act::Relu),
            GateAct::Geglu => {}
        }
    }
    match act {
        GateAct::Swiglu => silu(gate) * up,
        GateAct::Geglu => gelu(gate) * up,
        GateAct::Reglu => relu(gate) * up,
    }
}

/// How a block wires its sub-blocks (the resolved [`BlockConfig`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Wiring {
    PreNorm,
    PostNorm,
    Parallel,
}

/// One transformer block.
#[derive(Module, Debug)]
pub struct Block {
    /// Pre-norm: before attention; post-norm: after the attention residual; parallel: the one
    /// norm both sub-blocks read. Absent with `norm = none`.
    pub norm1: Option<Norm>,
    pub attn: Attention,
    /// Absent in the parallel block, without an MLP and with `norm = none`.
    pub norm2: Option<Norm>,
    /// Absent with `ffn = none`.
    pub mlp: Option<Mlp>,
    /// Trained gains (shape [1]) of the general block; constant ones live in `gains`.
    pub alpha_sa: Option<Param<Tensor<1>>>,
    pub beta_sa: Option<Param<Tensor<1>>>,
    pub alpha_ff: Option<Param<Tensor<1>>>,
    pub beta_ff: Option<Param<Tensor<1>>>,
    #[module(skip)]
    pub wiring: Wiring,
    /// α_SA, β_SA, α_FF, β_FF (the parallel block's α is α_SA and it has no α_FF).
    #[module(skip)]
    pub gains: [GainValue; 4],
}

impl Block {
    pub(crate) fn new(
        cfg: &ModelConfig,
        init: &mut Init,
        layer: usize,
        spa: Option<&SpaLayer>,
    ) -> Self {
        let d = cfg.d_model;
        let norm1 = Norm::new(&cfg.norm, d, init);
        let attn = Attention::new(cfg, init, layer, spa);
        let mlp = Mlp::new(cfg, init);
        let one = Gain::default();
        let zero = Gain {
            init: 0.0,
            trainable: false,
        };
        let (wiring, g) = match &cfg.block {
            BlockConfig::PreNorm { gains } => (
                Wiring::PreNorm,
                [gains.alpha_sa, gains.beta_sa, gains.alpha_ff, gains.beta_ff],
            ),
            BlockConfig::PostNorm {} => (Wiring::PostNorm, [one; 4]),
            BlockConfig::Parallel { gains, .. } => (
                Wiring::Parallel,
                [gains.alpha, gains.beta_sa, one, gains.beta_ff],
            ),
            BlockConfig::Sas { beta_ff } => (Wiring::PreNorm, [zero, one, one, *beta_ff]),
            BlockConfig::SasP { beta_sa, beta_ff } => {
                (Wiring::Parallel, [zero, *beta_sa, one, *beta_ff])
            }
        };
        let separate = matches!(
            cfg.block,
            BlockConfig::Parallel {
                separate_norms: true,
                ..
            }
        );
        let norm2 = if (wiring != Wiring::Parallel || separate) && mlp.is_some() {
            Norm::new(&cfg.norm, d, init)
        } else {
            None
        };
        let [(a_sa, va), (b_sa, vb), (a_ff, vc), (b_ff, vd)] = g.map(|g| gain_param(&g, init));
        Self {
            norm1,
            attn,
            norm2,
            mlp,
            alpha_sa: a_sa,
            beta_sa: b_sa,
            alpha_ff: a_ff,
            beta_ff: b_ff,
            wiring,
            gains: [va, vb, vc, vd],
        }
    }

    pub(crate) fn forward(
        &self,
        h: Tensor<3>,
        ctx: &Ctx,
        mut tap: Option<&mut Tap<'_>>,
        cache: Option<&mut LayerKv>,
    ) -> Tensor<3> {
        let [ga_sa, gb_sa, ga_ff, gb_ff] = self.gains;
        let frame = Frame {
            sink_tokens: ctx.sink_tokens,
            q_start: ctx.q_start,
            slot_cols: 0,
        };
        match self.wiring {
            Wiring::PreNorm => {
                // x̂ = α_SA x + β_SA Attn(N1(x));  out = α_FF x̂ + β_FF MLP(N2(x̂))
                let u = norm_or_id(&self.norm1, h.clone());
                let a = self.attn.forward(u, ctx, tap.as_deref_mut(), cache);
                let a = tap_stream(&mut tap, StreamSite::AttnOut, a, frame);
                let h = mix(vec![(h, &self.alpha_sa, ga_sa), (a, &self.beta_sa, gb_sa)]);
                let h = tap_stream(&mut tap, StreamSite::ResidMid, h, frame);
                let Some(mlp) = &self.mlp else {
                    return scale(h, &self.alpha_ff, ga_ff);
                };
                let m = mlp.forward(norm_or_id(&self.norm2, h.clone()), ctx.compute);
                let m = tap_stream(&mut tap, StreamSite::MlpOut, m, frame);
                mix(vec![(h, &self.alpha_ff, ga_ff), (m, &self.beta_ff, gb_ff)])
            }
            Wiring::PostNorm => {
                // x = N1(x + Attn(x));  x = N2(x + MLP(x))
                let a = self.attn.forward(h.clone(), ctx, tap.as_deref_mut(), cache);
                let a = tap_stream(&mut tap, StreamSite::AttnOut, a, frame);
                let h = norm_or_id(&self.norm1, h + a);
                let h = tap_stream(&mut tap, StreamSite::ResidMid, h, frame);
                match &self.mlp {
                    Some(mlp) => {
                        let m = mlp.forward(h.clone(), ctx.compute);
                        let m = tap_stream(&mut tap, StreamSite::MlpOut, m, frame);
                        norm_or_id(&self.norm2, h + m)
                    }
                    None => h,
                }
            }
            Wiring::Parallel => {
                // out = α x + β_SA Attn(N1(x)) + β_FF MLP(N(x)), N = N2 with separate norms
                // (GPT-NeoX), else N1; no resid_mid
                let u = norm_or_id(&self.norm1, h.clone());
                let a = self.attn.forward(u.clone(), ctx, tap.as_deref_mut(), cache);
                let a = tap_stream(&mut tap, StreamSite::AttnOut, a, frame);
                let mut terms = vec![
                    (h.clone(), &self.alpha_sa, ga_sa),
                    (a, &self.beta_sa, gb_sa),
                ];
                if let Some(mlp) = &self.mlp {
                    let u = match &self.norm2 {
                        Some(n2) => n2.forward(h),
                        None => u,
                    };
                    let m = tap_stream(
                        &mut tap,
                        StreamSite::MlpOut,
                        mlp.forward(u, ctx.compute),
                        frame,
                    );
                    terms.push((m, &self.beta_ff, gb_ff));
                }
                mix(terms)
            }
        } // (B, S, d)
    }
}
