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
#[derive(Module, Debug)]
pub struct Mlp {
    /// Gated variants (SwiGLU, GeGLU, ReGLU) only.
    pub w_gate: Option<Linear>,
    pub w_up: Linear,
    pub w_down: Linear,
    #[module(skip)]
    pub kind: FfnConfig,
}

impl Mlp {
    /// None for `ffn = none`.
    pub(crate) fn new(cfg: &ModelConfig, init: &mut Init) -> Option<Self> {
        if cfg.ffn == (FfnConfig::None {}) {
            return None;
        }
        let (d, f, b) = (cfg.d_model, cfg.d_ff, cfg.bias);
        let gated = matches!(
            cfg.ffn,
            FfnConfig::Swiglu {} | FfnConfig::Geglu {} | FfnConfig::Reglu {}
        );
        let w_gate = gated.then(|| Linear::new(init, d, f, b));
        let w_up = Linear::new(init, d, f, b);
        // The same draws from the baseline stream, scaled to `w_down_init_std` if it is set.
        let std = init.std;
        init.std = cfg.w_down_init_std.unwrap_or(std);
        let w_down = Linear::new(init, f, d, b);
        init.std = std;
        Some(Self {
            w_gate,
            w_up,
            w_down,
            kind: cfg.ffn,
        })
    }

    /// `x` (B, T, d) → (B, T, d), the products in the `c` dtype (mixed precision).
    pub fn forward(&self, x: Tensor<3>, c: Compute) -> Tensor<3> {
        let up = |x: Tensor<3>| self.w_up.forward_in(x, c);
        let gate = |x: Tensor<3>| self.w_gate.as_ref().expect("gated FFN").forward_in(x, c); // (B, T, f)
        #[cfg(feature = "flex")]
        if crate::kernels::on_device(&x.device()) {
            use crate::kernels::ops::Act;
            match self.kind {
                FfnConfig::Swiglu {} => {
                    let h = crate::kernels::glu(gate(x.clone()), up(x), Act::Silu);
                    return self.w_down.forward_in(h, c);
                }
                FfnConfig::Reglu {} => {
                    let h = crate::kernels::glu(gate(x.clone()), up(x), Act::Relu);
                    return self.w_down.forward_in(h, c);
                }
                _ => {}
            }
        }
        let hidden = match self.kind {
            FfnConfig::Relu {} => relu(up(x)),
            FfnConfig::Gelu {} => gelu(up(x)),
            FfnConfig::GeluTanh {} => gelu_tanh(up(x)),
            FfnConfig::Silu {} => silu(up(x)),
            FfnConfig::Swiglu {} => silu(gate(x.clone())) * up(x),
            FfnConfig::Geglu {} => gelu(gate(x.clone())) * up(x),
            FfnConfig::Reglu {} => relu(gate(x.clone())) * up(x),
            FfnConfig::None {} => unreachable!("no MLP is built for ffn = none"),
        }; // (B, T, f)
        self.w_down.forward_in(hidden, c) // (B, T, d)
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
