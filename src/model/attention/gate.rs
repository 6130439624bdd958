//! The output gates (docs/reference.md §1.2): `out_h ← out_h ⊙ g` after the weighted sum and
//! before W_O, every gate computed from the attention input u (B, Q, d), the same (normed)
//! input W_Q reads. Each variant owns its parameters (`blocks.{l}.attn.gate.weight`, `.bias`).

use super::super::layers::{Compute, Init, Linear};
use crate::config::GateConfig;
use burn::module::{Module, Param};
use burn::tensor::Tensor;
use burn::tensor::activation::sigmoid;

/// A configured output gate.
#[derive(Module, Debug)]
pub enum Gate {
    /// Qwen gated attention, one gate per head: `σ(u W_g)`, W_g (d, H).
    Headwise(Linear),
    /// Qwen gated attention, one gate per output element: `σ(u W_g)`, W_g (d, d).
    Elementwise(Linear),
    /// Bondarenko et al.'s conditional per-token gate: `σ(u_h · w_h + b_h)`, u_h head h's own
    /// slice `u[h·d_h .. (h+1)·d_h]`.
    PerToken(PerToken),
    /// modded-nanogpt's sparse head gate: `σ(u[:k] W)`, W (k, H), no bias.
    Sparse(Linear),
}

/// The per-token gate's parameters.
#[derive(Module, Debug)]
pub struct PerToken {
    /// w (H, d_h): head h's weights on its own slice of u.
    pub weight: Param<Tensor<2>>,
    /// b (H) = logit of the initial gate value.
    pub bias: Param<Tensor<1>>,
}

impl Gate {
    /// The configured gate for d = H·d_h (None for `none`), drawing from the variant stream;
    /// `bias` puts a bias on the Qwen gates (`model.bias`).
    pub fn new(cfg: &GateConfig, init: &mut Init, d: usize, h: usize, bias: bool) -> Option<Self> {
        Some(match *cfg {
            GateConfig::None {} => return None,
            GateConfig::Headwise {} => Gate::Headwise(Linear::new_extra(init, d, h, bias)),
            GateConfig::Elementwise {} => Gate::Elementwise(Linear::new_extra(init, d, d, bias)),
            GateConfig::PerToken { init: g0 } => {
                let std = init.std;
                let b = (g0 / (1.0 - g0)).ln(); // σ(b) = g0
                Gate::PerToken(PerToken {
                    weight: init.normal_extra([h, d / h], std),
                    bias: init.filled(b as f32, [h]),
                })
            }
            GateConfig::Sparse { dims } => Gate::Sparse(Linear::zeros(init, dims, h, false)),
        })
    }

    /// The gate values for `h` heads from the attention input u (B, Q, d): (B, H, Q, 1) for the
    /// per-head gates, (B, H, Q, d_h) for the elementwise one.
    pub fn values(&self, u: Tensor<3>, h: usize, compute: Compute) -> Tensor<4> {
        let [b, q, d] = u.dims();
        // (B, Q, H) → (B, H, Q, 1)
        let per_head = |g: Tensor<3>| g.swap_dims(1, 2).unsqueeze_dim::<4>(3);
        match self {
            Gate::Headwise(w) => per_head(sigmoid(w.forward_in(u, compute))),
            Gate::Elementwise(w) => sigmoid(w.forward_in(u, compute))
                .reshape([b, q, h, d / h])
                .swap_dims(1, 2), // (B, H, Q, d_h)
            Gate::PerToken(p) => {
                // Σ_x u[b, q, h, x] w[h, x] + b_h
                let w = p.weight.val().unsqueeze::<4>(); // (1, 1, H, d_h)
                let logit = (u.reshape([b, q, h, d / h]) * w).sum_dim(3).squeeze_dim::<3>(3) // (B, Q, H)
                    + p.bias.val().reshape([1, 1, h]);
                per_head(sigmoid(logit))
            }
            Gate::Sparse(w) => {
                let k = w.weight.dims()[0];
                per_head(sigmoid(w.forward_in(u.narrow(2, 0, k), compute)))
            }
        }
    }
}
