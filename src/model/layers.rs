//! Building blocks shared by the model's parts: the seeded host RNG and the two init streams,
//! linear layers (plain or reparameterised, docs/reference.md §3.1), RMSNorm / LayerNorm,
//! scalar gains, and the dtype of matrix products under mixed precision ([`Compute`]).

use crate::config::{Gain, NormConfig, Precision, WInit};
use burn::module::{Module, Param};
use burn::tensor::module::linear;
use burn::tensor::{Device, FloatDType, Tensor, TensorData};
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
    /// Build a skeleton: random draws are skipped and parameters stay uninitialized (a zero
    /// tensor if ever read), for a model whose weights come from a checkpoint.
    pub lazy: bool,
}

impl Init<'_> {
    /// An uninitialized parameter of `shape` (zeros if read before it is replaced).
    fn lazy_param<const D: usize>(&self, shape: [usize; D], trainable: bool) -> Param<Tensor<D>> {
        Param::uninitialized(
            burn::module::ParamId::new(),
            move |dev: &Device, grad: bool| Tensor::<D>::zeros(shape, dev).set_require_grad(grad),
            self.device.clone(),
            trainable,
            burn::tensor::Shape::from(shape),
        )
    }
    pub fn tensor<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Tensor<D> {
        Tensor::from_data(TensorData::new(data, shape), self.device)
    }
    pub fn param<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Param<Tensor<D>> {
        Param::from_tensor(self.tensor(data, shape))
    }
    /// A parameter that is saved with the model but never trained.
    pub fn constant<const D: usize>(&self, data: Vec<f32>, shape: [usize; D]) -> Param<Tensor<D>> {
        if self.lazy {
            return self.lazy_param(shape, false);
        }
        Param::from_tensor(self.tensor(data, shape)).set_require_grad(false)
    }
    pub fn filled<const D: usize>(&self, value: f32, shape: [usize; D]) -> Param<Tensor<D>> {
        if self.lazy {
            return self.lazy_param(shape, true);
        }
        self.param(vec![value; shape.iter().product()], shape)
    }
    /// N(0, std) from the baseline stream.
    pub fn normal<const D: usize>(&mut self, shape: [usize; D]) -> Param<Tensor<D>> {
        if self.lazy {
            return self.lazy_param(shape, true);
        }
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
        if self.lazy {
            return self.lazy_param(shape, true);
        }
        let n = shape.iter().product();
        let data = self.extra.normal(n, std);
        self.param(data, shape)
    }
}

/// `y = x W + b`, W stored `[d_in, d_out]`. A reparameterised linear layer (docs/reference.md §3.1)
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
    /// [`Linear::forward`] with the product in the `compute` dtype (mixed precision): input,
    /// matrix and bias cast down, the result cast back to f32.
    pub fn forward_in<const D: usize>(&self, x: Tensor<D>, compute: Compute) -> Tensor<D> {
        match compute {
            // the linear kernel where it runs (crate::kernels), in f32
            None if crate::kernels::on_device(&x.device()) => {
                let y = crate::kernels::linear(x, self.matrix(), false);
                match &self.bias {
                    Some(b) => y + b.val().unsqueeze::<D>(),
                    None => y,
                }
            }
            None => self.forward(x),
            Some(dt) => self.forward_low(x, dt).cast(FloatDType::F32),
        }
    }
    /// The product in `dt` (input, matrix and bias cast down), left in `dt`.
    pub fn forward_low<const D: usize>(&self, x: Tensor<D>, dt: FloatDType) -> Tensor<D> {
        linear(
            x.cast(dt),
            self.matrix().cast(dt),
            self.bias.as_ref().map(|b| b.val().cast(dt)),
        )
    }
}

/// The dtype the matrix products of a forward run in: `None` for f32, or bf16 / f16 (mixed
/// precision, `train.precision`): the two operands are cast down, the product is cast back to
/// f32, and everything between products (norms, softmax, activations, the residual stream, the
/// loss) stays f32 — PyTorch autocast's split for matrix products. Burn's cast is
/// differentiable: the gradient reaches the f32 operands as f32.
pub type Compute = Option<FloatDType>;

/// The [`Compute`] dtype of a precision.
pub fn compute_dtype(p: Precision) -> Compute {
    match p {
        Precision::F32 => None,
        Precision::Bf16 => Some(FloatDType::BF16),
        Precision::F16 => Some(FloatDType::F16),
    }
}

/// `a · b` (batched over leading dimensions) in the `compute` dtype, returned in f32.
pub(crate) fn matmul_in<const D: usize>(a: Tensor<D>, b: Tensor<D>, compute: Compute) -> Tensor<D> {
    match compute {
        None => a.matmul(b),
        Some(dt) => a.cast(dt).matmul(b.cast(dt)).cast(FloatDType::F32),
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
        #[cfg(feature = "flex")]
        if crate::kernels::on_device(&x.device()) {
            use crate::kernels::{cpu::norm::Kind, ops::NormArgs};
            let kind = match self.kind {
                NormKind::Rms => Kind::Rms,
                NormKind::Layer => Kind::Layer,
            };
            let b = match &self.bias {
                Some(b) => b.val(),
                None => Tensor::zeros([x.dims()[2]], &x.device()), // unread by RMSNorm
            };
            let args = NormArgs {
                kind,
                eps: self.eps as f32,
            };
            return crate::kernels::norm(x, self.gain.val(), b, args);
        }
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

/// A scalar gain of a block: a trained parameter, or a constant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum GainValue {
    Constant(f64),
    Trained,
}

pub(crate) fn gain_param(g: &Gain, init: &Init) -> (Option<Param<Tensor<1>>>, GainValue) {
    if g.trainable {
        (Some(init.filled(g.init as f32, [1])), GainValue::Trained)
    } else {
        (None, GainValue::Constant(g.init))
    }
}

/// `g · x` for a gain that is a parameter (shape [1]) or a constant (1 costs nothing).
pub(crate) fn scale<const D: usize>(
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
pub(crate) fn mix(terms: Vec<(Tensor<3>, &Option<Param<Tensor<1>>>, GainValue)>) -> Tensor<3> {
    terms
        .into_iter()
        .filter(|(_, _, g)| *g != GainValue::Constant(0.0))
        .map(|(x, p, g)| scale(x, p, g))
        .reduce(|a, b| a + b)
        .expect("a block with every gain fixed at 0 is rejected by validation")
}

/// `N(x)`, or x when the model has no norms.
pub(crate) fn norm_or_id(n: &Option<Norm>, x: Tensor<3>) -> Tensor<3> {
    match n {
        Some(n) => n.forward(x),
        None => x,
    }
}
