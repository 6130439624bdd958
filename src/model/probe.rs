//! Two uses of the hook points that the analyses share: the probe that records what the sink
//! metrics read ([`LayerProbe`], recorded by [`ProbeRecorder`]) and the residual-stream filter
//! of dark signals ([`StreamFilter`], a replacement of `resid_pre`).

use super::attention::repeat_kv;
use super::hooks::{Frame, HeadSite, HookPoint, Hooks, Site, StreamSite};
use burn::tensor::{Device, Tensor, TensorData};
use std::collections::BTreeMap;

/// What the probe records for one layer (device tensors; real tokens only except `attn`).
#[derive(Default)]
pub struct LayerProbe {
    /// Attention weights before the row scale, (B, H, S, C): C = slot columns + S.
    pub attn: Option<Tensor<4>>,
    /// Queries of the real tokens after positional rotation (B, H, T, d_h).
    pub queries: Option<Tensor<4>>,
    /// Keys of the real tokens after positional rotation (B, H, T, d_h), each key/value group
    /// repeated for its query heads.
    pub keys: Option<Tensor<4>>,
    /// Values of the real tokens (B, H, T, d_h), repeated like the keys.
    pub values: Option<Tensor<4>>,
    /// Output-gate values (B, S, H) or (B, S, d), if the layer has a gate.
    pub gate: Option<Tensor<3>>,
    /// The block's output for the real tokens (B, T, d).
    pub hidden: Option<Tensor<3>>,
    /// The attention sub-block's output after W_O for the real tokens (B, T, d).
    pub attn_out: Option<Tensor<3>>,
    /// Each head's mixed value z of the real tokens (B, H, T, d_h), when asked for.
    pub z: Option<Tensor<4>>,
    /// Slot columns at the front of `attn` (sink logit, KV/K bias, memory keys).
    pub slot_cols: usize,
    /// Sink tokens at the front of the sequence.
    pub sink_tokens: usize,
}

/// Records a [`LayerProbe`] for each layer it is asked about (and, if asked, the real-token
/// block input, after any hook before it in a [`super::hooks::Chain`]).
pub struct ProbeRecorder {
    /// Only this layer (None: every layer).
    layer: Option<usize>,
    n_heads: usize,
    inputs: bool,
    z: bool,
    pub probes: BTreeMap<usize, LayerProbe>,
    /// Real-token block inputs (B, T, d) by layer, when asked for.
    pub input: BTreeMap<usize, Tensor<3>>,
}

impl ProbeRecorder {
    pub fn new(layer: Option<usize>, n_heads: usize, inputs: bool) -> Self {
        Self {
            layer,
            n_heads,
            inputs,
            z: false,
            probes: BTreeMap::new(),
            input: BTreeMap::new(),
        }
    }

    /// Record each head's z too.
    pub fn with_z(mut self, z: bool) -> Self {
        self.z = z;
        self
    }
}

/// The real-token rows of a sequence axis `dim` (the model's sink tokens dropped).
fn real<const D: usize>(x: &Tensor<D>, dim: usize, sink_tokens: usize) -> Tensor<D> {
    let s = x.dims()[dim];
    x.clone().narrow(dim, sink_tokens, s - sink_tokens)
}

impl Hooks for ProbeRecorder {
    fn wants(&self, at: HookPoint) -> bool {
        self.layer.is_none_or(|l| l == at.layer)
            && match at.site {
                Site::Stream(StreamSite::ResidPre) => self.inputs,
                Site::Stream(StreamSite::ResidPost | StreamSite::AttnOut) => true,
                Site::Stream(_) => false,
                Site::Head(HeadSite::Z) => self.z,
                Site::Head(_) => true,
            }
    }
    fn changes(&self, _: HookPoint) -> bool {
        false // records only
    }

    fn stream(&mut self, l: usize, site: StreamSite, x: Tensor<3>, f: Frame) -> Tensor<3> {
        let r = real(&x, 1, f.sink_tokens); // (B, T, d)
        match site {
            StreamSite::ResidPre => {
                self.input.insert(l, r);
            }
            StreamSite::AttnOut => self.probes.entry(l).or_default().attn_out = Some(r),
            _ => self.probes.entry(l).or_default().hidden = Some(r),
        }
        x
    }

    fn heads(&mut self, l: usize, site: HeadSite, x: Tensor<4>, f: Frame) -> Tensor<4> {
        let p = self.probes.entry(l).or_default();
        p.sink_tokens = f.sink_tokens;
        match site {
            HeadSite::Q => p.queries = Some(real(&x, 2, f.sink_tokens)), // (B, H, T, d_h)
            HeadSite::K => p.keys = Some(repeat_kv(real(&x, 2, f.sink_tokens), self.n_heads)),
            HeadSite::V => p.values = Some(repeat_kv(real(&x, 2, f.sink_tokens), self.n_heads)),
            HeadSite::Pattern => {
                p.attn = Some(x.clone());
                p.slot_cols = f.slot_cols;
            }
            HeadSite::Gate => {
                // back to the gate's own layout: (B, H, Q, 1) → (B, Q, H); (B, H, Q, d_h) → (B, Q, d)
                let [b, h, q, w] = x.dims();
                p.gate = Some(x.clone().swap_dims(1, 2).reshape([b, q, h * w]));
            }
            HeadSite::Z => p.z = Some(real(&x, 2, f.sink_tokens)), // (B, H, T, d_h)
        }
        x
    }
}

/// A linear map applied to the residual stream entering the given blocks (`h ← h M`, a
/// replacement at `resid_pre`); layer `L` (the number of blocks) is the input of the final
/// norm and unembedding.
pub struct StreamFilter {
    pub layers: Vec<usize>,
    /// (d, d), acting on row vectors.
    pub matrix: Tensor<2>,
}

impl StreamFilter {
    /// The filter that maps every residual vector h to `F h`, for F a row-major d × d map on
    /// column vectors (the papers' convention): the stream holds rows, so M = Fᵀ.
    pub fn from_column_map(f: &[f64], d: usize, layers: &[usize], device: &Device) -> Self {
        assert_eq!(f.len(), d * d, "a d × d map");
        let mut m = vec![0f32; d * d];
        for i in 0..d {
            for j in 0..d {
                m[j * d + i] = f[i * d + j] as f32;
            }
        }
        Self {
            layers: layers.to_vec(),
            matrix: Tensor::from_data(TensorData::new(m, [d, d]), device),
        }
    }

    /// `F h` for each row h of `x` (…, d).
    pub fn apply<const D: usize>(&self, x: Tensor<D>) -> Tensor<D> {
        x.matmul(self.matrix.clone().unsqueeze::<D>())
    }
}

/// The filter as hooks (it changes nothing it holds, so a shared reference will do).
impl Hooks for &StreamFilter {
    fn wants(&self, at: HookPoint) -> bool {
        at.site == Site::Stream(StreamSite::ResidPre) && self.layers.contains(&at.layer)
    }
    fn stream(&mut self, _: usize, _: StreamSite, x: Tensor<3>, _: Frame) -> Tensor<3> {
        self.apply(x)
    }
    fn heads(&mut self, _: usize, _: HeadSite, x: Tensor<4>, _: Frame) -> Tensor<4> {
        x
    }
}
