//! The causal LM and every block variant (REFERENCE §2), one module per part, configured by
//! the closed enums of [`crate::config::ModelConfig`]:
//!
//! ```text
//! h_0 = E[x] (+ positions P[0..T] if absolute)        # (B, T, d)
//! h_0 = [S ; h_0]  with N learnable sink tokens S     # (B, N+T, d)
//! for each block: h = Block(h)                        # pre-norm / post-norm / parallel
//! logits = N_f(h[:, N:]) W_head                       # (B, T, V); W_head = Eᵀ when tied
//! ```
//!
//! Attention lives in [`crate::attention`]. Two paths share the weights: [`Lm::forward`]
//! (training and eval loss) and [`Lm::forward_probe`], which also returns every layer's
//! attention weights (slot columns included), keys, values, gate values and block outputs for
//! the sink metrics.
//!
//! Parameter names (safetensors, optimizer state) are the module paths, e.g.
//! `blocks.0.attn.wq.weight`. Linear weights are stored `[d_in, d_out]` (y = x W + b), the
//! transpose of PyTorch's `nn.Linear.weight`. The README lists every name.
//!
//! Init: every matrix (and the sink tokens and learned positions) N(0, init_std) from a seeded
//! host RNG, so initial weights are identical on every backend; biases 0, norm gains 1. The
//! baseline's weights are drawn first, in a fixed order, and every variant-specific parameter
//! from a second stream, so two variants of one seed share all the weights they have in common.

use crate::attention::{Attention, Ctx, LayerKv, LayerProbe, PositionTables};
use crate::config::{
    BlockConfig, FfnConfig, Gain, HeadKind, MaskConfig, ModelConfig, NormConfig, PositionsConfig,
    WInit,
};
use crate::signal::SpaLayer;
use burn::module::{Module, Param};
use burn::tensor::activation::{gelu, relu, silu};
use burn::tensor::module::{embedding, linear};
use burn::tensor::{Device, Int, Tensor, TensorData};
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

/// The two init streams: the baseline's weights, then everything a variant adds.
pub struct Init<'a> {
    pub base: HostRng,
    pub extra: HostRng,
    pub std: f64,
    pub device: &'a Device,
}

impl Init<'_> {
    pub fn tensor<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Tensor<D> {
        Tensor::from_data(TensorData::new(data, shape), self.device)
    }
    pub fn param<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Param<Tensor<D>> {
        Param::from_tensor(self.tensor(data, shape))
    }
    /// A parameter that is saved with the model but never trained.
    pub fn constant<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Param<Tensor<D>> {
        Param::from_tensor(self.tensor(data, shape)).set_require_grad(false)
    }
    pub fn filled<const D: usize>(&self, value: f32, shape: [usize; D]) -> Param<Tensor<D>> {
        self.param(vec![value; shape.iter().product()], shape)
    }
    /// N(0, std) from the baseline stream.
    pub fn normal<const D: usize>(&mut self, shape: [usize; D]) -> Param<Tensor<D>> {
        let n = shape.iter().product();
        let data = self.base.normal(n, self.std);
        self.param(data, shape)
    }
    /// N(0, std) from the variant stream.
    pub fn normal_extra<const D: usize>(
        &mut self,
        shape: [usize; D],
        std: f64,
    ) -> Param<Tensor<D>> {
        let n = shape.iter().product();
        let data = self.extra.normal(n, std);
        self.param(data, shape)
    }
}

/// `y = x W + b`, W stored `[d_in, d_out]`. A reparameterised linear layer (REFERENCE §3.1)
/// uses `W = α_W W_init + β_W ΔW`: `weight` is then ΔW (trainable, zero-initialised) and
/// `w_init` the fixed W_init (saved with the model, never trained).
#[derive(Module, Debug)]
pub struct Linear {
    pub weight: Param<Tensor<2>>,
    pub bias: Option<Param<Tensor<1>>>,
    /// W_init of a reparameterised layer.
    pub w_init: Option<Param<Tensor<2>>>,
    /// Trained α_W and β_W (shape [1]); constant ones live in `gains`.
    pub alpha: Option<Param<Tensor<1>>>,
    pub beta: Option<Param<Tensor<1>>>,
    /// α_W, β_W of a reparameterised layer.
    #[module(skip)]
    pub gains: [GainValue; 2],
}

impl Linear {
    fn plain(weight: Param<Tensor<2>>, bias: Option<Param<Tensor<1>>>) -> Self {
        Self {
            weight,
            bias,
            w_init: None,
            alpha: None,
            beta: None,
            gains: [GainValue::Constant(1.0); 2],
        }
    }
    /// Weight from the baseline stream.
    pub fn new(init: &mut Init, d_in: usize, d_out: usize, bias: bool) -> Self {
        let weight = init.normal([d_in, d_out]);
        Self::plain(weight, bias.then(|| init.filled(0.0, [d_out])))
    }
    /// Weight from the variant stream.
    pub fn new_extra(init: &mut Init, d_in: usize, d_out: usize, bias: bool) -> Self {
        let std = init.std;
        let weight = init.normal_extra([d_in, d_out], std);
        Self::plain(weight, bias.then(|| init.filled(0.0, [d_out])))
    }
    /// All-zero weight (a zero-initialised W_Q).
    pub fn zeros(init: &Init, d_in: usize, d_out: usize, bias: bool) -> Self {
        Self::plain(
            init.filled(0.0, [d_in, d_out]),
            bias.then(|| init.filled(0.0, [d_out])),
        )
    }
    /// `W = α W_init + β ΔW` (d×d), W_init the identity or a random orthogonal matrix drawn
    /// from the variant stream, ΔW = 0.
    pub fn reparam(
        init: &mut Init,
        d: usize,
        w_init: WInit,
        alpha: Gain,
        beta: Gain,
        bias: bool,
    ) -> Self {
        let w0 = match w_init {
            WInit::Identity => identity(d),
            WInit::Orthogonal => orthogonal(&mut init.extra, d),
        };
        let (a, va) = gain_param(&alpha, init);
        let (b, vb) = gain_param(&beta, init);
        Self {
            weight: init.filled(0.0, [d, d]),
            bias: bias.then(|| init.filled(0.0, [d])),
            w_init: Some(init.constant(w0, [d, d])),
            alpha: a,
            beta: b,
            gains: [va, vb],
        }
    }
    /// The matrix the layer applies (α W_init + β ΔW when reparameterised).
    pub fn matrix(&self) -> Tensor<2> {
        match &self.w_init {
            None => self.weight.val(),
            Some(w0) => {
                scale(w0.val(), &self.alpha, self.gains[0])
                    + scale(self.weight.val(), &self.beta, self.gains[1])
            }
        }
    }
    pub fn forward<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        linear(x, self.matrix(), self.bias.as_ref().map(|b| b.val()))
    }
}

/// The d×d identity, row-major.
pub fn identity(d: usize) -> Vec<f32> {
    let mut w = vec![0f32; d * d];
    (0..d).for_each(|i| w[i * d + i] = 1.0);
    w
}

/// A random orthogonal d×d matrix: Gram–Schmidt (in f64, twice for accuracy) on the columns of
/// a Gaussian draw, i.e. the Q of its QR decomposition with a positive diagonal of R (Haar).
pub fn orthogonal(rng: &mut HostRng, d: usize) -> Vec<f32> {
    let g: Vec<f64> = rng.normal(d * d, 1.0).into_iter().map(f64::from).collect();
    let mut cols: Vec<Vec<f64>> = (0..d)
        .map(|j| (0..d).map(|i| g[i * d + j]).collect())
        .collect();
    for j in 0..d {
        for _ in 0..2 {
            for k in 0..j {
                let (done, rest) = cols.split_at_mut(j);
                let (q, c) = (&done[k], &mut rest[0]);
                let dot: f64 = q.iter().zip(c.iter()).map(|(a, b)| a * b).sum();
                c.iter_mut().zip(q).for_each(|(x, qi)| *x -= dot * qi);
            }
        }
        let norm = cols[j].iter().map(|v| v * v).sum::<f64>().sqrt();
        cols[j].iter_mut().for_each(|v| *v /= norm);
    }
    (0..d * d)
        .map(|idx| cols[idx % d][idx / d] as f32)
        .collect()
}

/// Which normalisation a [`Norm`] computes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NormKind {
    /// `x / sqrt(mean(x²) + eps) · g`.
    Rms,
    /// `(x − mean x) / sqrt(var x + eps) · g + b`.
    Layer,
}

/// RMSNorm or LayerNorm over the last dimension.
#[derive(Module, Debug)]
pub struct Norm {
    pub gain: Param<Tensor<1>>,
    /// LayerNorm only.
    pub bias: Option<Param<Tensor<1>>>,
    #[module(skip)]
    pub kind: NormKind,
    #[module(skip)]
    pub eps: f64,
}

impl Norm {
    /// None for `kind = "none"`.
    pub fn new(cfg: &NormConfig, d: usize, init: &Init) -> Option<Self> {
        Some(match *cfg {
            NormConfig::None {} => return None,
            NormConfig::RmsNorm { eps } => Self {
                gain: init.filled(1.0, [d]),
                bias: None,
                kind: NormKind::Rms,
                eps,
            },
            NormConfig::LayerNorm { eps } => Self {
                gain: init.filled(1.0, [d]),
                bias: Some(init.filled(0.0, [d])),
                kind: NormKind::Layer,
                eps,
            },
        })
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let g = self.gain.val().unsqueeze::<3>(); // (1, 1, d)
        match self.kind {
            NormKind::Rms => {
                let inv_rms = x
                    .clone()
                    .square()
                    .mean_dim(2)
                    .add_scalar(self.eps)
                    .sqrt()
                    .recip(); // (B, T, 1)
                x * inv_rms * g
            }
            NormKind::Layer => {
                let mu = x.clone().mean_dim(2); // (B, T, 1)
                let xc = x - mu;
                let inv_std = xc
                    .clone()
                    .square()
                    .mean_dim(2)
                    .add_scalar(self.eps)
                    .sqrt()
                    .recip();
                let b = self.bias.as_ref().expect("layer norm bias").val();
                xc * inv_std * g + b.unsqueeze::<3>()
            }
        }
    }
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
    fn new(cfg: &ModelConfig, init: &mut Init) -> Option<Self> {
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
        let w_down = Linear::new(init, f, d, b);
        Some(Self {
            w_gate,
            w_up,
            w_down,
            kind: cfg.ffn,
        })
    }

    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let gate = |x: Tensor<3>| self.w_gate.as_ref().expect("gated FFN").forward(x); // (B, T, f)
        let hidden = match self.kind {
            FfnConfig::Relu {} => relu(self.w_up.forward(x)),
            FfnConfig::Gelu {} => gelu(self.w_up.forward(x)),
            FfnConfig::Silu {} => silu(self.w_up.forward(x)),
            FfnConfig::Swiglu {} => silu(gate(x.clone())) * self.w_up.forward(x),
            FfnConfig::Geglu {} => gelu(gate(x.clone())) * self.w_up.forward(x),
            FfnConfig::Reglu {} => relu(gate(x.clone())) * self.w_up.forward(x),
            FfnConfig::None {} => unreachable!("no MLP is built for ffn = none"),
        }; // (B, T, f)
        self.w_down.forward(hidden) // (B, T, d)
    }
}

/// A scalar gain of a block: a trained parameter, or a constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GainValue {
    Constant(f64),
    Trained,
}

fn gain_param(g: &Gain, init: &Init) -> (Option<Param<Tensor<1>>>, GainValue) {
    if g.trainable {
        (Some(init.filled(g.init as f32, [1])), GainValue::Trained)
    } else {
        (None, GainValue::Constant(g.init))
    }
}

/// `g · x` for a gain that is a parameter (shape [1]) or a constant (1 costs nothing).
fn scale<const D: usize>(
    x: Tensor<D>,
    param: &Option<Param<Tensor<1>>>,
    value: GainValue,
) -> Tensor<D> {
    match (value, param) {
        (GainValue::Constant(1.0), _) => x,
        (GainValue::Constant(c), _) => x * c,
        (GainValue::Trained, Some(p)) => x * p.val().unsqueeze::<D>(),
        (GainValue::Trained, None) => unreachable!("trained gain without a parameter"),
    }
}

/// `Σ g_i x_i`, skipping terms whose gain is the constant 0 (skipless blocks).
fn mix(terms: Vec<(Tensor<3>, &Option<Param<Tensor<1>>>, GainValue)>) -> Tensor<3> {
    terms
        .into_iter()
        .filter(|(_, _, g)| *g != GainValue::Constant(0.0))
        .map(|(x, p, g)| scale(x, p, g))
        .reduce(|a, b| a + b)
        .expect("a block with every gain fixed at 0 is rejected by validation")
}

/// `N(x)`, or x when the model has no norms.
fn norm_or_id(n: &Option<Norm>, x: Tensor<3>) -> Tensor<3> {
    match n {
        Some(n) => n.forward(x),
        None => x,
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
    fn new(cfg: &ModelConfig, init: &mut Init, layer: usize, spa: Option<&SpaLayer>) -> Self {
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
            BlockConfig::Parallel { gains } => (
                Wiring::Parallel,
                [gains.alpha, gains.beta_sa, one, gains.beta_ff],
            ),
            BlockConfig::Sas { beta_ff } => (Wiring::PreNorm, [zero, one, one, *beta_ff]),
            BlockConfig::SasP { beta_sa, beta_ff } => {
                (Wiring::Parallel, [zero, *beta_sa, one, *beta_ff])
            }
        };
        let norm2 = if wiring != Wiring::Parallel && mlp.is_some() {
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

    fn forward(
        &self,
        h: Tensor<3>,
        ctx: &Ctx,
        probe: Option<&mut LayerProbe>,
        cache: Option<&mut LayerKv>,
    ) -> Tensor<3> {
        let [ga_sa, gb_sa, ga_ff, gb_ff] = self.gains;
        match self.wiring {
            Wiring::PreNorm => {
                // x̂ = α_SA x + β_SA Attn(N1(x));  out = α_FF x̂ + β_FF MLP(N2(x̂))
                let a = self
                    .attn
                    .forward(norm_or_id(&self.norm1, h.clone()), ctx, probe, cache);
                let h = mix(vec![(h, &self.alpha_sa, ga_sa), (a, &self.beta_sa, gb_sa)]);
                let Some(mlp) = &self.mlp else {
                    return scale(h, &self.alpha_ff, ga_ff);
                };
                let m = mlp.forward(norm_or_id(&self.norm2, h.clone()));
                mix(vec![(h, &self.alpha_ff, ga_ff), (m, &self.beta_ff, gb_ff)])
            }
            Wiring::PostNorm => {
                // x = N1(x + Attn(x));  x = N2(x + MLP(x))
                let h = norm_or_id(
                    &self.norm1,
                    h.clone() + self.attn.forward(h, ctx, probe, cache),
                );
                match &self.mlp {
                    Some(mlp) => norm_or_id(&self.norm2, h.clone() + mlp.forward(h)),
                    None => h,
                }
            }
            Wiring::Parallel => {
                // out = α x + β_SA Attn(N(x)) + β_FF MLP(N(x))
                let u = norm_or_id(&self.norm1, h.clone());
                let a = self.attn.forward(u.clone(), ctx, probe, cache);
                let mut terms = vec![(h, &self.alpha_sa, ga_sa), (a, &self.beta_sa, gb_sa)];
                if let Some(mlp) = &self.mlp {
                    terms.push((mlp.forward(u), &self.beta_ff, gb_ff));
                }
                mix(terms)
            }
        } // (B, S, d)
    }
}

/// The language model.
#[derive(Module, Debug)]
pub struct Lm {
    /// Token embedding (V, d).
    pub embed: Param<Tensor<2>>,
    /// Learned absolute positions (ctx, d).
    pub pos_embed: Option<Param<Tensor<2>>>,
    /// T5 relative-position bias table (buckets, H), shared by all layers.
    pub rel_bias: Option<Param<Tensor<2>>>,
    /// Learnable sink tokens (N, d), prepended to every sequence.
    pub sink_tokens: Option<Param<Tensor<2>>>,
    /// Norm of the block-0 input (`model.input_norm`).
    pub input_norm: Option<Norm>,
    pub blocks: Vec<Block>,
    /// Final norm (absent in post-norm models).
    pub norm_f: Option<Norm>,
    /// Output head (d, V); absent when tied to the embedding.
    pub head: Option<Linear>,
    #[module(skip)]
    pub tables: PositionTables,
    #[module(skip)]
    pub cfg: ModelConfig,
}

impl Lm {
    /// Build with weights drawn from N(0, init_std) by seeded host RNGs (identical on every
    /// backend).
    pub fn new(cfg: &ModelConfig, vocab: usize, seed: u64, device: &Device) -> Self {
        let d = cfg.d_model;
        let mut init = Init {
            base: HostRng::new(seed),
            extra: HostRng::new(seed ^ 0x005e_ed0f_7a41_a7e5),
            std: cfg.resolved_init_std(),
            device,
        };
        let embed = init.normal([vocab, d]);
        let spa = match cfg.attention.spa {
            crate::config::SpaConfig::None {} => Vec::new(),
            spa => crate::signal::spa_layers(&spa, cfg.n_layers, cfg.ctx)
                .expect("validated: every causal entry of A_l is positive"),
        };
        let blocks: Vec<Block> = (0..cfg.n_layers)
            .map(|l| Block::new(cfg, &mut init, l, spa.get(l)))
            .collect();
        let head = match cfg.head {
            HeadKind::Untied => Some(Linear::new(&mut init, d, vocab, cfg.bias)),
            HeadKind::Tied => None,
        };
        let norm_f = match cfg.block {
            BlockConfig::PostNorm {} => None,
            _ => Norm::new(&cfg.norm, d, &init),
        };
        let input_norm = cfg.input_norm.as_ref().and_then(|n| Norm::new(n, d, &init));
        let std = init.std;
        let pos_embed = matches!(cfg.positions, PositionsConfig::Learned {})
            .then(|| init.normal_extra([cfg.ctx, d], std));
        let sink_tokens =
            (cfg.sink_tokens > 0).then(|| init.normal_extra([cfg.sink_tokens, d], std));
        let rel_bias = match cfg.positions {
            PositionsConfig::Relative { buckets, .. } => {
                Some(init.filled(0.0, [buckets, cfg.n_heads]))
            }
            _ => None,
        };
        Self {
            embed,
            pos_embed,
            rel_bias,
            sink_tokens,
            input_norm,
            blocks,
            norm_f,
            head,
            tables: PositionTables::new(cfg, device),
            cfg: cfg.clone(),
        }
    }

    /// The block-0 input (B, N+T, d) (embedding, absolute positions, sink tokens, input norm)
    /// and the forward context for `t` real tokens.
    fn input(&self, tokens: Tensor<2, Int>) -> (Tensor<3>, Ctx) {
        let [b, t] = tokens.dims();
        let n_sink = self.cfg.sink_tokens;
        let mut h = embedding(self.embed.val(), tokens); // (B, T, d)
        if let Some(pe) = &self.tables.sinusoidal {
            h = h + pe.clone().slice(0..t).unsqueeze::<3>(); // + (1, T, d)
        }
        if let Some(pe) = &self.pos_embed {
            h = h + pe.val().slice(0..t).unsqueeze::<3>();
        }
        if let Some(s) = &self.sink_tokens {
            let d = self.cfg.d_model;
            let sinks = s.val().unsqueeze::<3>().expand([b, n_sink, d]); // (B, N, d)
            h = Tensor::cat(vec![sinks, h], 1); // (B, N+T, d)
        }
        h = norm_or_id(&self.input_norm, h);
        let ctx = self.context(t, &h.device());
        (h, ctx)
    }

    fn context(&self, t: usize, device: &Device) -> Ctx {
        Ctx::new(
            &self.cfg,
            &self.tables,
            self.rel_bias.as_ref().map(|p| p.val()),
            t,
            device,
        )
    }

    /// Real-token hidden states after the last block, (B, T, d), recording probes if asked and
    /// applying a residual-stream filter if given.
    fn run(
        &self,
        tokens: Tensor<2, Int>,
        mut probe: Option<&mut Vec<LayerProbe>>,
        filter: Option<&StreamFilter>,
    ) -> Tensor<3> {
        let t = tokens.dims()[1];
        let n_sink = self.cfg.sink_tokens;
        let (mut h, ctx) = self.input(tokens);
        let apply = |l: usize, h: Tensor<3>| match filter {
            Some(f) if f.layers.contains(&l) => h.matmul(f.matrix.clone().unsqueeze::<3>()),
            _ => h,
        };
        for (l, block) in self.blocks.iter().enumerate() {
            h = apply(l, h);
            let mut layer = probe.as_ref().map(|_| LayerProbe::default());
            h = block.forward(h, &ctx, layer.as_mut(), None);
            if let (Some(p), Some(mut layer)) = (probe.as_deref_mut(), layer) {
                layer.hidden = Some(h.clone().narrow(1, n_sink, t)); // (B, T, d)
                p.push(layer);
            }
        }
        h = apply(self.blocks.len(), h);
        if n_sink > 0 {
            h = h.narrow(1, n_sink, t); // drop the sink tokens: (B, T, d)
        }
        h
    }

    /// The real-token representations entering block 0 and leaving every block: L + 1
    /// tensors (B, T, d) (for `sinklab init-check`).
    pub fn hidden_states(&self, tokens: Tensor<2, Int>) -> Vec<Tensor<3>> {
        let t = tokens.dims()[1];
        let n_sink = self.cfg.sink_tokens;
        let (mut h, ctx) = self.input(tokens);
        let mut out = vec![h.clone().narrow(1, n_sink, t)];
        for block in &self.blocks {
            h = block.forward(h, &ctx, None, None);
            out.push(h.clone().narrow(1, n_sink, t));
        }
        out
    }

    /// Run the blocks on a given block-0 input (B, T, d), bypassing the embedding (a model
    /// without sink tokens): the input and every block's output, L + 1 tensors. For
    /// signal-propagation tests that start from a chosen token kernel.
    pub fn propagate(&self, h0: Tensor<3>) -> Vec<Tensor<3>> {
        assert_eq!(
            self.cfg.sink_tokens, 0,
            "propagate needs a model without sink tokens"
        );
        let ctx = self.context(h0.dims()[1], &h0.device());
        let mut out = vec![h0];
        for block in &self.blocks {
            let h = block.forward(out.last().expect("input").clone(), &ctx, None, None);
            out.push(h);
        }
        out
    }

    /// Logits (B, T, V) from real-token hidden states (B, T, d).
    fn logits(&self, h: Tensor<3>) -> Tensor<3> {
        let h = match &self.norm_f {
            Some(n) => n.forward(h),
            None => h,
        };
        match &self.head {
            Some(head) => head.forward(h),
            None => linear(h, self.embed.val().transpose(), None), // tied: h Eᵀ
        }
    }

    /// Logits (B, T, V) for token ids (B, T).
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let h = self.run(tokens, None, None);
        self.logits(h)
    }

    /// Logits with `filter` applied to the residual stream (dark-signal experiments).
    pub fn forward_filtered(&self, tokens: Tensor<2, Int>, filter: &StreamFilter) -> Tensor<3> {
        let h = self.run(tokens, None, Some(filter));
        self.logits(h)
    }

    /// Logits plus every layer's attention weights, queries, keys, values, gates and block
    /// output, with an optional residual-stream filter.
    pub fn forward_probe_filtered(
        &self,
        tokens: Tensor<2, Int>,
        filter: Option<&StreamFilter>,
    ) -> (Tensor<3>, Vec<LayerProbe>) {
        let mut probe = Vec::with_capacity(self.blocks.len());
        let h = self.run(tokens, Some(&mut probe), filter);
        (self.logits(h), probe)
    }

    /// Logits plus every layer's attention weights, queries, keys, values, gates and block
    /// output.
    pub fn forward_probe(&self, tokens: Tensor<2, Int>) -> (Tensor<3>, Vec<LayerProbe>) {
        self.forward_probe_filtered(tokens, None)
    }

    /// An empty key/value cache for [`Lm::forward_cached`]. Refuses masks that token-by-token
    /// decoding cannot reproduce (a bidirectional prefix) and caches larger than the training
    /// context (positions past `model.ctx` are not defined for every position scheme).
    pub fn cache(&self, policy: CachePolicy) -> anyhow::Result<KvCache> {
        if let MaskConfig::Prefix { p } = self.cfg.attention.mask {
            anyhow::bail!(
                "model.attention.mask = prefix (p = {p}) is bidirectional inside the prefix, so \
                 token-by-token decoding with a KV cache does not reproduce it; cached decoding \
                 supports the causal, sliding_window and sinks_window masks"
            );
        }
        if let Some(w) = policy.window
            && (w == 0 || policy.sinks + w > self.cfg.ctx)
        {
            anyhow::bail!(
                "cache of {} sink tokens + a window of {w}: need a window ≥ 1 and sinks + \
                 window ≤ model.ctx = {} (positions past the training context are not defined)",
                policy.sinks,
                self.cfg.ctx
            );
        }
        Ok(KvCache {
            layers: vec![LayerKv::default(); self.blocks.len()],
            real: 0,
            started: false,
            policy,
        })
    }

    /// Logits (B, n, V) for `n` new tokens (B, n) given everything already in `cache`, which is
    /// then updated. Keys are cached before RoPE and rotated with their cache-local positions
    /// at every call; ALiBi, T5 buckets, absolute positions, masks and U-SPA / E-SPA terms all
    /// use cache-local positions (StreamingLLM, REFERENCE §6). The model's own sink tokens
    /// and slots are part of the model and always stay in the cache. With no eviction this
    /// equals [`Lm::forward`] on the whole sequence.
    pub fn forward_cached(
        &self,
        tokens: Tensor<2, Int>,
        cache: &mut KvCache,
    ) -> anyhow::Result<Tensor<3>> {
        let [b, n] = tokens.dims();
        let n_sink = self.cfg.sink_tokens;
        let policy = cache.policy;
        let total = cache.real + n;
        let cap = policy.window.map(|w| policy.sinks + w);
        let kept = cap.map_or(total, |c| total.min(c));
        if let Some(w) = policy.window
            && n > w
        {
            anyhow::bail!("{n} new tokens do not fit a window of {w}");
        }
        if kept > self.cfg.ctx {
            anyhow::bail!(
                "the cache would hold {kept} tokens but model.ctx = {}: positions past the \
                 training context are not defined (use a window)",
                self.cfg.ctx
            );
        }
        let device = tokens.device();
        let mut h = embedding(self.embed.val(), tokens); // (B, n, d)
        if let Some(pe) = &self.tables.sinusoidal {
            h = h + pe.clone().slice(kept - n..kept).unsqueeze::<3>();
        }
        if let Some(pe) = &self.pos_embed {
            h = h + pe.val().slice(kept - n..kept).unsqueeze::<3>();
        }
        let first = !cache.started;
        if first && let Some(s) = &self.sink_tokens {
            let sinks = s
                .val()
                .unsqueeze::<3>()
                .expand([b, n_sink, self.cfg.d_model]);
            h = Tensor::cat(vec![sinks, h], 1); // (B, N+n, d)
        }
        h = norm_or_id(&self.input_norm, h);
        let q_start = if first { 0 } else { n_sink + kept - n };
        let mut ctx = Ctx::rows(
            &self.cfg,
            &self.tables,
            self.rel_bias.as_ref().map(|p| p.val()),
            kept,
            q_start,
            &device,
        );
        ctx.keep = policy.window.map(|w| (n_sink + policy.sinks, w));
        for (block, layer) in self.blocks.iter().zip(cache.layers.iter_mut()) {
            h = block.forward(h, &ctx, None, Some(layer));
        }
        cache.real = kept;
        cache.started = true;
        if first && n_sink > 0 {
            h = h.narrow(1, n_sink, n);
        }
        Ok(self.logits(h))
    }
}

/// A linear map applied to the residual stream entering the given blocks (`h ← h M`); layer
/// `L` (the number of blocks) is the input of the final norm and unembedding.
pub struct StreamFilter {
    pub layers: Vec<usize>,
    /// (d, d).
    pub matrix: Tensor<2>,
}

/// Which tokens a decoding cache keeps (StreamingLLM): the first `sinks` real tokens and the
/// most recent `window` ones (the current token included); everything when `window` is None.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CachePolicy {
    pub sinks: usize,
    pub window: Option<usize>,
}

impl CachePolicy {
    /// Keep every token (dense attention, bounded by `model.ctx`).
    pub const DENSE: CachePolicy = CachePolicy {
        sinks: 0,
        window: None,
    };
}

/// Per-layer key/value caches of one decoding stream (see [`Lm::forward_cached`]).
pub struct KvCache {
    layers: Vec<LayerKv>,
    /// Real tokens currently cached.
    real: usize,
    /// Whether the model's sink tokens are in the cache yet.
    started: bool,
    policy: CachePolicy,
}

impl KvCache {
    /// Real tokens currently cached.
    pub fn len(&self) -> usize {
        self.real
    }
    pub fn is_empty(&self) -> bool {
        self.real == 0
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

/// Number of parameters in the model's `Param`s (trained or not).
pub fn count_params(model: &Lm) -> usize {
    model.num_params()
}

/// Parameter count without the token embedding (for FLOP estimates, as in Kaplan et al.).
/// A tied head counts as a (d, V) matrix, since it costs the same FLOPs.
pub fn non_embedding_params(model: &Lm) -> usize {
    let [v, d] = model.embed.dims();
    let tied = if model.head.is_none() { v * d } else { 0 };
    model.num_params() - v * d + tied
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
