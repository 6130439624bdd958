//! The baseline causal LM (Gu et al.'s LLaMA-style setting, REFERENCE §2, §5):
//!
//! ```text
//! h_0 = E[x]                                         # (B, T, d)
//! for each block:  h = h + Attn(RMSNorm(h))          # pre-norm
//!                  h = h + SwiGLU(RMSNorm(h))
//! logits = RMSNorm(h) W_head                         # untied head, (B, T, V)
//! ```
//!
//! Attention is written by hand (Burn's `MultiHeadAttention` masks with -1e4 and applies
//! dropout to pre-softmax scores): `A = softmax(q·kᵀ/sqrt(d_h) + causal(-inf))`, `out = A v`.
//! RoPE uses the NeoX/HF "rotate halves" convention: dimension i pairs with i + d_h/2.
//!
//! Two paths share the weights: [`Lm::forward`] (fast: training and eval loss; optionally
//! Burn's fused attention) and [`Lm::forward_probe`], which also returns every layer's
//! attention weights, block outputs, keys and values for the sink metrics.
//!
//! Parameter names (safetensors, optimizer state) are the module paths, e.g.
//! `blocks.0.attn.wq`. Linear weights are stored `[d_in, d_out]` (y = x W), the transpose of
//! PyTorch's `nn.Linear.weight`.

use crate::config::{AttentionImpl, FfnConfig, ModelConfig, NormConfig, PositionsConfig};
use burn::module::{Module, Param};
use burn::tensor::activation::{silu, softmax};
use burn::tensor::module::{attention, embedding, linear};
use burn::tensor::ops::AttentionModuleOptions;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

/// Normal samples from a seeded ChaCha stream (Box–Muller), so that the initial weights are
/// identical on every backend.
pub struct HostRng(ChaCha8Rng);

impl HostRng {
    pub fn new(seed: u64) -> Self {
        Self(ChaCha8Rng::seed_from_u64(seed))
    }
    pub fn normal(&mut self, n: usize, std: f64) -> Vec<f32> {
        use rand::Rng;
        let mut out = Vec::with_capacity(n + 1);
        while out.len() < n {
            let u1: f64 = 1.0 - self.0.r#gen::<f64>(); // (0, 1]
            let u2: f64 = self.0.r#gen::<f64>();
            let r = (-2.0 * u1.ln()).sqrt() * std;
            let th = 2.0 * std::f64::consts::PI * u2;
            out.push((r * th.cos()) as f32);
            out.push((r * th.sin()) as f32);
        }
        out.truncate(n);
        out
    }
}

fn param<const D: usize>(data: Vec<f32>, shape: [usize; D], device: &Device) -> Param<Tensor<D>> {
    Param::from_tensor(Tensor::from_data(TensorData::new(data, shape), device))
}

fn matrix(
    rng: &mut HostRng,
    rows: usize,
    cols: usize,
    std: f64,
    device: &Device,
) -> Param<Tensor<2>> {
    param(rng.normal(rows * cols, std), [rows, cols], device)
}

/// RMSNorm: `x / sqrt(mean(x²) + eps) · g`.
#[derive(Module, Debug)]
pub struct RmsNorm {
    pub gain: Param<Tensor<1>>,
    #[module(skip)]
    pub eps: f64,
}

impl RmsNorm {
    fn new(d: usize, eps: f64, device: &Device) -> Self {
        Self {
            gain: param(vec![1.0; d], [d], device),
            eps,
        }
    }
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let inv_rms = x
            .clone()
            .square()
            .mean_dim(2)
            .add_scalar(self.eps)
            .sqrt()
            .recip(); // (B, T, 1)
        x * inv_rms * self.gain.val().unsqueeze::<3>() // (B, T, d)
    }
}

/// SwiGLU feed-forward: `W_down(silu(x W_gate) ⊙ x W_up)`.
#[derive(Module, Debug)]
pub struct SwiGlu {
    pub w_gate: Param<Tensor<2>>,
    pub w_up: Param<Tensor<2>>,
    pub w_down: Param<Tensor<2>>,
}

impl SwiGlu {
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let g = silu(linear(x.clone(), self.w_gate.val(), None)); // (B, T, f)
        let u = linear(x, self.w_up.val(), None); // (B, T, f)
        linear(g * u, self.w_down.val(), None) // (B, T, d)
    }
}

/// Rotary tables for positions 0..max_len: cos and sin, each (max_len, d_h/2).
#[derive(Debug, Clone)]
pub struct Rope {
    cos: Tensor<2>,
    sin: Tensor<2>,
}

impl Rope {
    fn new(max_len: usize, d_head: usize, base: f64, device: &Device) -> Self {
        let half = d_head / 2;
        let mut cos = Vec::with_capacity(max_len * half);
        let mut sin = Vec::with_capacity(max_len * half);
        for p in 0..max_len {
            for i in 0..half {
                let inv_freq = base.powf(-(2.0 * i as f64) / d_head as f64);
                let a = p as f64 * inv_freq;
                cos.push(a.cos() as f32);
                sin.push(a.sin() as f32);
            }
        }
        Self {
            cos: Tensor::from_data(TensorData::new(cos, [max_len, half]), device),
            sin: Tensor::from_data(TensorData::new(sin, [max_len, half]), device),
        }
    }

    /// Rotate (B, T, H, d_h) by positions 0..T: `[x1, x2] ↦ [x1 cos − x2 sin, x1 sin + x2 cos]`.
    /// Applied before the head transpose, while the layout is contiguous.
    fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let [_, t, _, dh] = x.dims();
        let half = dh / 2;
        let cos = self
            .cos
            .clone()
            .slice(0..t)
            .unsqueeze_dim::<3>(1)
            .unsqueeze::<4>(); // (1, T, 1, d_h/2)
        let sin = self
            .sin
            .clone()
            .slice(0..t)
            .unsqueeze_dim::<3>(1)
            .unsqueeze::<4>();
        let x1 = x.clone().narrow(3, 0, half);
        let x2 = x.narrow(3, half, half);
        Tensor::cat(
            vec![
                x1.clone() * cos.clone() - x2.clone() * sin.clone(),
                x1 * sin + x2 * cos,
            ],
            3,
        )
    }
}

/// What the probe path records for one layer (all on the device).
pub struct LayerProbe {
    /// Attention weights (B, H, T, T); row t is query t.
    pub attn: Tensor<4>,
    /// Keys after positional rotation (B, H, T, d_h).
    pub keys: Tensor<4>,
    /// Values (B, H, T, d_h).
    pub values: Tensor<4>,
    /// The block's output, i.e. the residual stream after this layer (B, T, d).
    pub hidden: Tensor<3>,
}

/// Causal multi-head self-attention, by hand.
#[derive(Module, Debug)]
pub struct Attention {
    pub wq: Param<Tensor<2>>,
    pub wk: Param<Tensor<2>>,
    pub wv: Param<Tensor<2>>,
    pub wo: Param<Tensor<2>>,
    #[module(skip)]
    pub n_heads: usize,
}

/// Per-forward context shared by all layers.
struct Ctx<'a> {
    rope: Option<&'a Rope>,
    /// True above the diagonal: (1, 1, T, T).
    causal: Tensor<4, Bool>,
    fused: bool,
}

impl Attention {
    /// Project and split heads: (B, T, d) → (B, H, T, d_h), rotating by position if `rope`.
    fn heads(&self, x: Tensor<3>, w: &Param<Tensor<2>>, rope: Option<&Rope>) -> Tensor<4> {
        let [b, t, d] = x.dims();
        let h = self.n_heads;
        let y = linear(x, w.val(), None).reshape([b, t, h, d / h]); // (B, T, H, d_h)
        let y = match rope {
            Some(r) => r.apply(y),
            None => y,
        };
        y.swap_dims(1, 2) // (B, H, T, d_h)
    }

    fn forward(&self, x: Tensor<3>, ctx: &Ctx, probe: Option<&mut Vec<LayerProbe>>) -> Tensor<3> {
        let [b, t, d] = x.dims();
        let dh = d / self.n_heads;
        let q = self.heads(x.clone(), &self.wq, ctx.rope);
        let k = self.heads(x.clone(), &self.wk, ctx.rope);
        let v = self.heads(x, &self.wv, None);
        let out = if ctx.fused && probe.is_none() {
            let options = AttentionModuleOptions {
                scale: None,
                softcap: None,
                is_causal: true,
            };
            attention(q, k, v, None, None, options) // (B, H, T, d_h)
        } else {
            // Scale q (B, H, T, d_h) rather than the (B, H, T, T) scores: same maths, fewer flops.
            let scores = (q / (dh as f64).sqrt()).matmul(k.clone().swap_dims(2, 3)); // (B, H, T, T)
            let mask = ctx.causal.clone().expand([b, self.n_heads, t, t]);
            let a = softmax(scores.mask_fill(mask, f32::NEG_INFINITY), 3); // rows sum to 1
            let out = a.clone().matmul(v.clone()); // (B, H, T, d_h)
            if let Some(p) = probe {
                p.push(LayerProbe {
                    attn: a,
                    keys: k,
                    values: v,
                    hidden: Tensor::zeros([1, 1, 1], &out.device()), // filled in by the block
                });
            }
            out
        };
        let out = out.swap_dims(1, 2).reshape([b, t, d]); // (B, T, d): heads concatenated
        linear(out, self.wo.val(), None)
    }
}

/// Pre-norm block: `h = h + Attn(N1(h)); h = h + MLP(N2(h))`.
#[derive(Module, Debug)]
pub struct Block {
    pub norm1: RmsNorm,
    pub attn: Attention,
    pub norm2: RmsNorm,
    pub mlp: SwiGlu,
}

impl Block {
    fn forward(
        &self,
        h: Tensor<3>,
        ctx: &Ctx,
        mut probe: Option<&mut Vec<LayerProbe>>,
    ) -> Tensor<3> {
        let h = h.clone()
            + self
                .attn
                .forward(self.norm1.forward(h), ctx, probe.as_deref_mut());
        let h = h.clone() + self.mlp.forward(self.norm2.forward(h));
        if let Some(p) = probe
            && let Some(last) = p.last_mut()
        {
            last.hidden = h.clone();
        }
        h
    }
}

/// The language model.
#[derive(Module, Debug)]
pub struct Lm {
    /// Token embedding (V, d).
    pub embed: Param<Tensor<2>>,
    pub blocks: Vec<Block>,
    pub norm_f: RmsNorm,
    /// Output head (d, V), untied from the embedding.
    pub head: Param<Tensor<2>>,
    #[module(skip)]
    pub rope: Option<Rope>,
    #[module(skip)]
    pub fused: bool,
}

impl Lm {
    /// Build with weights drawn from N(0, init_std) by a seeded host RNG (identical on every
    /// backend); norm gains start at 1.
    pub fn new(cfg: &ModelConfig, vocab: usize, seed: u64, device: &Device) -> Self {
        let d = cfg.d_model;
        let std = cfg.resolved_init_std();
        let mut rng = HostRng::new(seed);
        let NormConfig::RmsNorm { eps } = cfg.norm;
        let FfnConfig::Swiglu {} = cfg.ffn;
        let embed = matrix(&mut rng, vocab, d, std, device);
        let blocks = (0..cfg.n_layers)
            .map(|_| Block {
                norm1: RmsNorm::new(d, eps, device),
                attn: Attention {
                    wq: matrix(&mut rng, d, d, std, device),
                    wk: matrix(&mut rng, d, d, std, device),
                    wv: matrix(&mut rng, d, d, std, device),
                    wo: matrix(&mut rng, d, d, std, device),
                    n_heads: cfg.n_heads,
                },
                norm2: RmsNorm::new(d, eps, device),
                mlp: SwiGlu {
                    w_gate: matrix(&mut rng, d, cfg.d_ff, std, device),
                    w_up: matrix(&mut rng, d, cfg.d_ff, std, device),
                    w_down: matrix(&mut rng, cfg.d_ff, d, std, device),
                },
            })
            .collect();
        let head = matrix(&mut rng, d, vocab, std, device);
        let rope = match cfg.positions {
            PositionsConfig::Nope {} => None,
            PositionsConfig::Rope { base } => Some(Rope::new(cfg.ctx, cfg.d_head(), base, device)),
        };
        Self {
            embed,
            blocks,
            norm_f: RmsNorm::new(d, eps, device),
            head,
            rope,
            fused: cfg.attention == AttentionImpl::Fused,
        }
    }

    fn run(&self, tokens: Tensor<2, Int>, mut probe: Option<&mut Vec<LayerProbe>>) -> Tensor<3> {
        let [_, t] = tokens.dims();
        let device = tokens.device();
        let ctx = Ctx {
            rope: self.rope.as_ref(),
            causal: Tensor::<2, Bool>::tril_mask([t, t], 0, &device).unsqueeze::<4>(),
            fused: self.fused,
        };
        let mut h = embedding(self.embed.val(), tokens); // (B, T, d)
        for block in &self.blocks {
            h = block.forward(h, &ctx, probe.as_deref_mut());
        }
        linear(self.norm_f.forward(h), self.head.val(), None) // (B, T, V)
    }

    /// Logits (B, T, V) for token ids (B, T).
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        self.run(tokens, None)
    }

    /// Logits plus every layer's attention weights, keys, values and block output.
    pub fn forward_probe(&self, tokens: Tensor<2, Int>) -> (Tensor<3>, Vec<LayerProbe>) {
        let mut probe = Vec::with_capacity(self.blocks.len());
        let logits = self.run(tokens, Some(&mut probe));
        (logits, probe)
    }
}

/// Masked mean next-token cross-entropy: `Σ mask·(−log p(target)) / denom`. `denom` is passed
/// in so that gradient-accumulation micro-batches sum to the mean over the whole step.
pub fn masked_nll(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    mask: Tensor<2>,
    denom: f64,
) -> Tensor<1> {
    let logp = burn::tensor::activation::log_softmax(logits, 2); // (B, T, V)
    let picked = logp
        .gather(2, targets.unsqueeze_dim::<3>(2))
        .squeeze_dim::<2>(2); // (B, T)
    (picked * mask).sum().neg() / denom
}

/// Number of parameters in the model's `Param`s.
pub fn count_params(model: &Lm) -> usize {
    model.num_params()
}

/// Parameter count without the token embedding (for FLOP estimates, as in Kaplan et al.).
pub fn non_embedding_params(model: &Lm) -> usize {
    let [v, d] = model.embed.dims();
    model.num_params() - v * d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_rng_is_normal() {
        let xs = HostRng::new(3).normal(200_000, 0.5);
        let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / xs.len() as f64;
        let var = xs.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / xs.len() as f64;
        assert!(mean.abs() < 0.005, "mean {mean}");
        assert!((var.sqrt() - 0.5).abs() < 0.005, "std {}", var.sqrt());
        assert_eq!(
            HostRng::new(3).normal(5, 1.0),
            HostRng::new(3).normal(5, 1.0)
        );
    }
}
