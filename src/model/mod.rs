//! The causal LM and every block variant (docs/reference.md §2), one module per part, configured by
//! the closed enums of [`crate::config::ModelConfig`]:
//!
//! ```text
//! h_0 = E[x] (+ positions P[0..T] if absolute)        # (B, T, d)
//! h_0 = [S ; h_0]  with N learnable sink tokens S     # (B, N+T, d)
//! for each block: h = Block(h)                        # pre-norm / post-norm / parallel
//! logits = N_f(h[:, N:]) W_head                       # (B, T, V); W_head = Eᵀ when tied
//! ```
//!
//! Files: [`layers`] (seeded init, linear layers, norms, gains), [`attention`] (the one
//! attention module), [`block`] (FFN and block wiring), [`context`] (position tables, masks and
//! the per-forward context), [`cache`] (key/value caches for decoding, StreamingLLM eviction).
//! The blocks are walked in one place, [`Lm::walk`], with named hook points ([`hooks`]:
//! resid_pre, q, k, v, pattern, z, attn_out, mlp_out, …) that record, replace or add. Training
//! ([`Lm::forward`]) walks without hooks; the sink probe ([`Lm::forward_probe`],
//! [`Lm::probe_by_layer`], [`probe`]), dark's residual filters, the hidden states of
//! init-check, cached decoding and the head scores, ablations and patches are all uses of it.
//!
//! Parameter names (safetensors, optimizer state) are the module paths, e.g.
//! `blocks.0.attn.wq.weight`. Linear weights are stored `[d_in, d_out]` (y = x W + b), the
//! transpose of PyTorch's `nn.Linear.weight`. docs/zoo.md lists every name.
//!
//! Init: every matrix (and the sink tokens and learned positions) N(0, init_std) from a seeded
//! host RNG, so initial weights are identical on every backend; biases 0, norm gains 1. The
//! baseline's weights are drawn first, in a fixed order, and every variant-specific parameter
//! from a second stream, so two variants of one seed share all the weights they have in common.

pub mod attention;
pub mod block;
pub mod cache;
pub mod context;
pub mod hooks;
pub mod layers;
pub mod probe;

pub use attention::{Attention, time_attention};
pub use block::Block;
pub use cache::{CachePolicy, KvCache};
pub use context::Ctx;
pub use hooks::{Chain, Edit, Frame, HeadSite, HookPoint, HookSet, Hooks, Site, StreamSite};
pub use layers::{Compute, HostRng, Init, Linear, Norm, compute_dtype, identity, orthogonal};
pub use probe::{LayerProbe, ProbeRecorder, StreamFilter};

use crate::config::{BlockConfig, HeadKind, ModelConfig, PositionsConfig};
use burn::module::{Module, Param};
use burn::tensor::module::{embedding, linear};
use burn::tensor::{Device, Int, Tensor};
use context::{LayerKv, PositionTables};
use hooks::{Tap, tap_stream};
use layers::norm_or_id;
use std::ops::Range;

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
    /// The dtype of the matrix products of every forward (mixed precision, [`Lm::with_precision`]);
    /// None: f32.
    #[module(skip)]
    pub compute: Compute,
    /// The last full-sequence context built ([`Lm::context`]), shared by clones of the model:
    /// its mask, bias and kernel plan depend only on the length, the device and the precision,
    /// and building them is O(T²) host work (at T = 2048, tens of milliseconds a forward that
    /// a GPU would wait for).
    #[module(skip)]
    pub ctx_cache: CtxCache,
}

/// One cached [`Ctx`] with what it was built for: (t, device, whether it is an autodiff device
/// — `Device`'s equality ignores that —, compute, measurements).
#[derive(Clone, Default)]
pub struct CtxCache(std::sync::Arc<std::sync::Mutex<Option<(CtxKey, Ctx)>>>);

impl std::fmt::Debug for CtxCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CtxCache")
    }
}

type CtxKey = (usize, Device, bool, Compute, u64);

impl Lm {
    /// Build with weights drawn from N(0, init_std) by seeded host RNGs (identical on every
    /// backend).
    pub fn new(cfg: &ModelConfig, vocab: usize, seed: u64, device: &Device) -> Self {
        Self::build(cfg, vocab, seed, device, false)
    }

    /// The model's structure with uninitialized parameters, for weights that come from a
    /// checkpoint (no random draws; nothing is allocated until a parameter is read).
    pub fn skeleton(cfg: &ModelConfig, vocab: usize, device: &Device) -> Self {
        Self::build(cfg, vocab, 0, device, true)
    }

    /// Every parameter's name and shape (the names checkpoints use), without allocating them.
    pub fn param_shapes(
        cfg: &ModelConfig,
        vocab: usize,
        device: &Device,
    ) -> std::collections::BTreeMap<String, Vec<usize>> {
        crate::optim::param_shapes(&Self::skeleton(cfg, vocab, device))
    }

    fn build(cfg: &ModelConfig, vocab: usize, seed: u64, device: &Device, lazy: bool) -> Self {
        let d = cfg.d_model;
        let mut init = Init {
            base: HostRng::new(seed),
            extra: HostRng::new(seed ^ 0x005e_ed0f_7a41_a7e5),
            std: cfg.resolved_init_std(),
            device,
            lazy,
        };
        let embed = init.normal([vocab, d]);
        let spa = match cfg.attention.spa.target() {
            None => Vec::new(),
            Some(target) => crate::spa::spa_layers(&target, cfg.n_layers, cfg.ctx)
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
            tables: PositionTables::new(cfg, cfg.ctx, device),
            cfg: cfg.clone(),
            compute: None,
            ctx_cache: CtxCache::default(),
        }
    }

    /// This model with its forwards' matrix products in `p` (mixed precision: the parameters
    /// stay f32 and are cast at each product, so gradients reach them as f32; see
    /// [`layers::Compute`]).
    pub fn with_precision(mut self, p: crate::config::Precision) -> Self {
        self.compute = layers::compute_dtype(p);
        self
    }

    /// The block-0 input (B, N+T, d) (embedding, absolute positions, sink tokens, input norm)
    /// and the forward context for `t` real tokens: where [`Lm::walk`] starts.
    pub fn embed(&self, tokens: Tensor<2, Int>) -> (Tensor<3>, Ctx) {
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
        let build = || {
            Ctx::new(
                &self.cfg,
                &self.tables,
                self.rel_bias.as_ref().map(|p| p.val()),
                t,
                device,
                self.compute,
            )
        };
        // a learned relative bias changes every step: never cached
        if self.rel_bias.is_some() {
            return build();
        }
        let key = (
            t,
            device.clone(),
            device.is_autodiff(),
            self.compute,
            crate::kernels::attention::generation(),
        );
        let mut cached = self.ctx_cache.0.lock().unwrap_or_else(|e| e.into_inner());
        match &*cached {
            Some((k, ctx)) if *k == key => ctx.clone(),
            _ => {
                let ctx = build();
                *cached = Some((key, ctx.clone()));
                ctx
            }
        }
    }

    /// The one walk over the blocks: the residual stream `h` (B, S, d) entering block
    /// `layers.start` through the blocks of `layers`, with `hooks` at every named point
    /// ([`hooks`]) and, when decoding, each block's key/value cache. Returns the stream leaving
    /// the last block walked; when that is the last block of the model, `resid_pre` of layer L
    /// (the final norm's input) is hooked too. Starting at a later layer from a recorded
    /// `resid_pre` reproduces the rest of a whole walk exactly (the restart of the ablation
    /// scans). Without hooks and cache this is exactly the training forward.
    pub fn walk(
        &self,
        mut h: Tensor<3>,
        ctx: &Ctx,
        layers: Range<usize>,
        mut hooks: Option<&mut dyn Hooks>,
        mut cache: Option<&mut [LayerKv]>,
    ) -> Tensor<3> {
        let frame = Frame {
            sink_tokens: ctx.sink_tokens,
            q_start: ctx.q_start,
            slot_cols: 0,
        };
        let n_layers = self.blocks.len();
        let end = layers.end;
        for l in layers {
            let mut tap = hooks.as_deref_mut().map(|hooks| Tap { layer: l, hooks });
            h = tap_stream(&mut tap.as_mut(), StreamSite::ResidPre, h, frame); // hook resid_pre
            let kv = cache.as_deref_mut().map(|c| &mut c[l]);
            h = self.blocks[l].forward(h, ctx, tap.as_mut(), kv);
            h = tap_stream(&mut tap.as_mut(), StreamSite::ResidPost, h, frame); // hook resid_post
        }
        if end == n_layers {
            let mut tap = hooks.map(|hooks| Tap {
                layer: n_layers,
                hooks,
            });
            h = tap_stream(&mut tap.as_mut(), StreamSite::ResidPre, h, frame); // final norm input
        }
        h
    }

    /// Real-token hidden states after the last block, (B, T, d), through `hooks`.
    fn run(&self, tokens: Tensor<2, Int>, hooks: Option<&mut dyn Hooks>) -> Tensor<3> {
        let t = tokens.dims()[1];
        let n_sink = self.cfg.sink_tokens;
        let (h, ctx) = self.embed(tokens);
        let h = self.walk(h, &ctx, 0..self.blocks.len(), hooks, None);
        if n_sink > 0 {
            h.narrow(1, n_sink, t) // drop the sink tokens: (B, T, d)
        } else {
            h
        }
    }

    /// Logits (B, T, V) for token ids (B, T) through `hooks` (a forward with interventions).
    pub fn forward_hooked(&self, tokens: Tensor<2, Int>, hooks: &mut dyn Hooks) -> Tensor<3> {
        let h = self.run(tokens, Some(hooks));
        self.logits(h)
    }

    /// Every layer's probe for a batch given in chunks, one layer at a time (each head's z too
    /// when `z` is set): `f(l, c, input, probe)` receives, for chunk `c` in order, the real-token input of block `l` (B, T, d,
    /// after the filter) and the block's records, before the next chunk or block runs. Only
    /// the chunks' residual streams live between calls, so at most one chunk of one layer's
    /// attention weights is held, and no logits are formed (the memory of `analyze` on a
    /// pretrained model stays near its size).
    pub fn probe_by_layer(
        &self,
        chunks: Vec<Tensor<2, Int>>,
        filter: Option<&StreamFilter>,
        z: bool,
        f: &mut dyn FnMut(usize, usize, Tensor<3>, LayerProbe),
    ) {
        let streams = chunks.into_iter().map(|x| self.embed(x)).collect();
        self.probe_by_layer_from(streams, 0, filter, z, f)
    }

    /// [`Lm::probe_by_layer`] from the chunks' streams entering block `from`
    /// ([`Lm::stream_at`]): layers `from..L` only (a filter's sites must be ≥ `from`).
    pub fn probe_by_layer_from(
        &self,
        mut streams: Vec<(Tensor<3>, Ctx)>,
        from: usize,
        filter: Option<&StreamFilter>,
        z: bool,
        f: &mut dyn FnMut(usize, usize, Tensor<3>, LayerProbe),
    ) {
        if let Some(fl) = filter {
            assert!(
                fl.layers.iter().all(|&l| l >= from),
                "a filter below the restart layer {from}"
            );
        }
        for l in from..self.blocks.len() {
            for (c, (h, ctx)) in streams.iter_mut().enumerate() {
                let mut rec = ProbeRecorder::new(Some(l), self.cfg.n_heads, true).with_z(z);
                let mut filter = filter;
                let mut hooks: Vec<&mut dyn Hooks> = Vec::with_capacity(2);
                if let Some(f) = filter.as_mut() {
                    hooks.push(f);
                }
                hooks.push(&mut rec);
                *h = self.walk(h.clone(), ctx, l..l + 1, Some(&mut Chain(hooks)), None);
                let input = rec.input.remove(&l).expect("resid_pre is recorded");
                let layer = rec.probes.remove(&l).expect("the layer is recorded");
                f(l, c, input, layer);
            }
        }
    }

    /// The real-token representations entering block 0 and leaving every block: L + 1
    /// tensors (B, T, d) (for `sinklab init-check`): `resid_pre` of layers 0..=L.
    pub fn hidden_states(&self, tokens: Tensor<2, Int>) -> Vec<Tensor<3>> {
        let t = tokens.dims()[1];
        let (h, ctx) = self.embed(tokens);
        self.resid_pres(h, &ctx)
            .into_iter()
            .map(|x| x.narrow(1, self.cfg.sink_tokens, t))
            .collect()
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
        self.resid_pres(h0, &ctx)
    }

    /// `resid_pre` of every layer 0..=L, recorded on one walk from `h`.
    fn resid_pres(&self, h: Tensor<3>, ctx: &Ctx) -> Vec<Tensor<3>> {
        let n = self.blocks.len();
        let resid = Site::Stream(StreamSite::ResidPre);
        let mut rec = (0..=n).fold(HookSet::new(), |s, l| s.record(l, resid));
        self.walk(h, ctx, 0..n, Some(&mut rec), None);
        (0..=n)
            .map(|l| {
                rec.streams
                    .remove(&(l, StreamSite::ResidPre))
                    .expect("recorded")
            })
            .collect()
    }

    /// Logits (…, V) from real-token hidden states (…, d): the final norm and the head.
    pub fn unembed(&self, h: Tensor<3>) -> Tensor<3> {
        self.logits(h)
    }

    /// Logits (B, T, V) from real-token hidden states (B, T, d).
    fn logits(&self, h: Tensor<3>) -> Tensor<3> {
        let h = match &self.norm_f {
            Some(n) => n.forward(h),
            None => h,
        };
        match (&self.head, self.compute) {
            (Some(head), c) => head.forward_in(h, c),
            (None, None) if crate::kernels::on_device(&h.device()) => {
                crate::kernels::linear(h, self.embed.val(), true) // tied: h Eᵀ
            }
            (None, None) => linear(h, self.embed.val().transpose(), None), // tied: h Eᵀ
            (None, Some(dt)) => linear(h.cast(dt), self.embed.val().transpose().cast(dt), None)
                .cast(burn::tensor::FloatDType::F32),
        }
    }

    /// Logits (B, T, V) for token ids (B, T).
    pub fn forward(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let h = self.run(tokens, None);
        self.logits(h)
    }

    /// Logits (B, T, V) for the training loss ([`masked_nll`]): [`Lm::forward`]'s, except that
    /// under mixed precision, where the cross-entropy kernel takes the low precision
    /// (`crate::kernels::xent::choose`: the CubeCL half), the head's product stays in it —
    /// no f32 copy of the (B, T, V) logits, as under PyTorch's autocast.
    pub fn forward_for_loss(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let h = self.run(tokens, None);
        match self.compute {
            Some(dt) if crate::kernels::xent::choose(&h.device(), dt.into()).is_ok() => {
                let h = match &self.norm_f {
                    Some(n) => n.forward(h),
                    None => h,
                };
                match &self.head {
                    Some(head) => head.forward_low(h, dt),
                    None => linear(h.cast(dt), self.embed.val().transpose().cast(dt), None), // tied: h Eᵀ
                }
            }
            _ => self.logits(h),
        }
    }

    /// The real-token hidden states leaving the last block (B, T, d) for token ids (B, T),
    /// before the final norm ([`Lm::unembed`] turns them into logits).
    pub fn forward_hidden(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        self.run(tokens, None)
    }

    /// Logits (B, 1, V) of the last position only, for token ids (B, T): the final norm and
    /// the head run on one row per sequence (a sliding window scored one token at a time).
    pub fn forward_last(&self, tokens: Tensor<2, Int>) -> Tensor<3> {
        let h = self.run(tokens, None); // (B, T, d)
        let t = h.dims()[1];
        self.logits(h.narrow(1, t - 1, 1))
    }

    /// Masked mean NLL ([`masked_nll`]) of token ids under an optional residual-stream filter,
    /// with the logits formed a block of positions at a time when (B, T, V) would exceed
    /// `max_logits` elements: a pretrained vocabulary's logits are never whole (evaluation
    /// only; below the limit the sum is the one-piece [`masked_nll`] exactly).
    pub fn nll(
        &self,
        tokens: Tensor<2, Int>,
        targets: Tensor<2, Int>,
        mask: Tensor<2>,
        denom: f64,
        filter: Option<&StreamFilter>,
        max_logits: usize,
    ) -> f64 {
        let (h, ctx) = self.embed(tokens);
        self.nll_from(h, &ctx, 0, (targets, mask, denom), filter, max_logits)
    }

    /// The residual stream entering block `l` (B, N+T, d) for `tokens`, and the forward
    /// context: where a walk restarted at `l` begins ([`Lm::nll_from`],
    /// [`Lm::probe_by_layer_from`]). It equals the whole walk's stream there.
    pub fn stream_at(&self, tokens: Tensor<2, Int>, l: usize) -> (Tensor<3>, Ctx) {
        let (h, ctx) = self.embed(tokens);
        let h = self.walk(h, &ctx, 0..l, None, None);
        (h, ctx)
    }

    /// [`Lm::nll`] from the stream `h` entering block `from` ([`Lm::stream_at`]): blocks
    /// `from..L` (with `filter`, whose sites must be ≥ `from`), then the logits in blocks of at
    /// most `max_logits` elements. `(targets, mask, denom)` as in [`Lm::nll`].
    pub fn nll_from(
        &self,
        h: Tensor<3>,
        ctx: &Ctx,
        from: usize,
        (targets, mask, denom): (Tensor<2, Int>, Tensor<2>, f64),
        filter: Option<&StreamFilter>,
        max_logits: usize,
    ) -> f64 {
        if let Some(f) = filter {
            assert!(
                f.layers.iter().all(|&l| l >= from),
                "a filter below the restart layer {from}"
            );
        }
        let [b, t] = targets.dims();
        let v = self.embed.dims()[0];
        let mut filter = filter;
        let hooks = filter.as_mut().map(|f| f as &mut dyn Hooks);
        let h = self.walk(h, ctx, from..self.blocks.len(), hooks, None);
        let h = h.narrow(1, self.cfg.sink_tokens, t); // real tokens (B, T, d)
        #[cfg(feature = "flex")]
        if let Some(loss) = self.fused_head_nll(h.clone(), &targets, &mask, denom) {
            return loss;
        }
        let step = (max_logits / (b * v).max(1)).clamp(1, t.max(1));
        let mut total = 0.0;
        for from in (0..t).step_by(step) {
            let n = step.min(t - from);
            let logits = self.logits(h.clone().narrow(1, from, n)); // (B, n, V)
            let loss = masked_nll(
                logits,
                targets.clone().narrow(1, from, n),
                mask.clone().narrow(1, from, n),
                denom,
            );
            total += loss.into_scalar::<f32>() as f64;
        }
        total
    }

    /// The masked NLL of [`Lm::nll_from`] by the fused head + cross-entropy kernel (the
    /// vocabulary a block at a time, never the (B, T, V) logits), where it runs: the CPU
    /// kernels, f32, outside autodiff, a head without bias. None elsewhere.
    #[cfg(feature = "flex")]
    fn fused_head_nll(
        &self,
        h: Tensor<3>,
        targets: &Tensor<2, Int>,
        mask: &Tensor<2>,
        denom: f64,
    ) -> Option<f64> {
        use crate::kernels::ops::{WeightLayout, head_cross_entropy};
        let device = h.device();
        if !crate::kernels::on_device(&device) || device.is_autodiff() || self.compute.is_some() {
            return None;
        }
        let (w, lay) = match &self.head {
            Some(head) if head.bias.is_none() => (head.matrix(), WeightLayout::InOut),
            Some(_) => return None,
            None => (self.embed.val(), WeightLayout::OutIn), // tied: h Eᵀ
        };
        let [b, t, d] = h.dims();
        let h = match &self.norm_f {
            Some(n) => n.forward(h),
            None => h,
        };
        let loss = head_cross_entropy(
            h.reshape([b * t, d]),
            w,
            targets.clone().reshape([b * t]),
            (mask.clone() / denom).reshape([b * t]),
            lay,
        );
        Some(loss.into_scalar::<f32>() as f64)
    }

    /// Logits plus every layer's attention weights, queries, keys, values, gates and block
    /// output, with an optional residual-stream filter.
    pub fn forward_probe_filtered(
        &self,
        tokens: Tensor<2, Int>,
        filter: Option<&StreamFilter>,
    ) -> (Tensor<3>, Vec<LayerProbe>) {
        let mut rec = ProbeRecorder::new(None, self.cfg.n_heads, false);
        let mut filter = filter;
        let mut hooks: Vec<&mut dyn Hooks> = Vec::with_capacity(2);
        if let Some(f) = filter.as_mut() {
            hooks.push(f);
        }
        hooks.push(&mut rec);
        let h = self.run(tokens, Some(&mut Chain(hooks)));
        (self.logits(h), rec.probes.into_values().collect())
    }

    /// Logits plus every layer's attention weights, queries, keys, values, gates and block
    /// output.
    pub fn forward_probe(&self, tokens: Tensor<2, Int>) -> (Tensor<3>, Vec<LayerProbe>) {
        self.forward_probe_filtered(tokens, None)
    }
}

/// Masked mean next-token cross-entropy: `Σ mask·(−log p(target)) / denom`. `denom` is passed
/// in so that gradient-accumulation micro-batches sum to the mean over the whole step.
///
/// Where the cross-entropy kernel runs (`crate::kernels::xent::choose`) this is the fused
/// cross-entropy (one pass over the logits forward, one backward; the logits in the dtype
/// they come in); elsewhere log-softmax and a gather, in f32.
pub fn masked_nll(
    logits: Tensor<3>,
    targets: Tensor<2, Int>,
    mask: Tensor<2>,
    denom: f64,
) -> Tensor<1> {
    if crate::kernels::xent::choose(&logits.device(), logits.dtype()).is_ok() {
        let [b, t, v] = logits.dims();
        return crate::kernels::xent::cross_entropy(
            logits.reshape([b * t, v]),
            targets.reshape([b * t]),
            (mask / denom).reshape([b * t]),
        );
    }
    let logits = if logits.dtype() == burn::tensor::DType::F32 {
        logits
    } else {
        logits.cast(burn::tensor::FloatDType::F32)
    };
    let logp = burn::tensor::activation::log_softmax(logits, 2); // (B, T, V)
    let picked = logp
        .gather(2, targets.unsqueeze_dim::<3>(2))
        .squeeze_dim::<2>(2); // (B, T)
    (picked * mask).sum().neg() / denom
}

/// The parameter elements `train.trainable` leaves trainable (`None`: no patterns, every
/// parameter the model trains), counted on a skeleton of the model (nothing is drawn or
/// allocated): what the memory estimate counts optimizer state and gradients for.
pub fn trainable_elements(exp: &crate::config::Experiment) -> anyhow::Result<Option<u64>> {
    let Some(patterns) = &exp.train.trainable else {
        return Ok(None);
    };
    let compiled = crate::optim::trainable_patterns(patterns)?;
    let vocab = crate::memory::planned_vocab(exp)?;
    let shapes = Lm::param_shapes(&exp.model, vocab, &Device::default());
    Ok(Some(
        shapes
            .iter()
            .filter(|(name, _)| compiled.iter().any(|p| p.matches(name)))
            .map(|(_, shape)| shape.iter().product::<usize>() as u64)
            .sum(),
    ))
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
pub(crate) mod tests {
    use super::*;
    use burn::tensor::TensorData;

    #[test]
    fn a_stream_filter_applies_its_column_map_to_every_row() {
        let dev = crate::backend::device(crate::config::DeviceKind::Flex).unwrap();
        // F = [[1, 2], [3, 4]]: F (1, 0)ᵀ = (1, 3), F (0, 1)ᵀ = (2, 4).
        let f = StreamFilter::from_column_map(&[1.0, 2.0, 3.0, 4.0], 2, &[0], &dev);
        let x = Tensor::<2>::from_data(TensorData::new(vec![1f32, 0.0, 0.0, 1.0], [2, 2]), &dev);
        let y: Vec<f32> = f.apply(x).into_data().try_into_vec::<f32>().unwrap();
        assert_eq!(y, vec![1.0, 3.0, 2.0, 4.0]);
    }

    /// d 16, 2 layers of 2 heads, FFN 24, ctx 8; the rest default (also for other modules'
    /// tests).
    pub(crate) fn tiny_cfg() -> ModelConfig {
        ModelConfig {
            d_model: 16,
            n_layers: 2,
            n_heads: 2,
            d_ff: 24,
            ctx: 8,
            ..ModelConfig::default()
        }
    }

    #[test]
    fn w_down_init_std_scales_the_same_draws_and_nothing_else() {
        let dev = crate::backend::device(crate::config::DeviceKind::Flex).unwrap();
        let cfg = tiny_cfg();
        let std = cfg.resolved_init_std();
        let scaled = ModelConfig {
            w_down_init_std: Some(0.25 * std),
            ..cfg.clone()
        };
        let (a, b) = (Lm::new(&cfg, 11, 3, &dev), Lm::new(&scaled, 11, 3, &dev));
        let host = |t: Tensor<2>| t.into_data().try_into_vec::<f32>().unwrap();
        for (ba, bb) in a.blocks.iter().zip(&b.blocks) {
            let (ma, mb) = (ba.mlp.as_ref().unwrap(), bb.mlp.as_ref().unwrap());
            for (x, y) in host(ma.w_down.weight.val())
                .iter()
                .zip(host(mb.w_down.weight.val()))
            {
                assert!((0.25 * x - y).abs() <= 1e-6 * x.abs().max(1e-3), "{x} {y}");
            }
            assert_eq!(host(ma.w_up().weight.val()), host(mb.w_up().weight.val()));
            assert_eq!(
                host(ba.attn.wo.as_ref().unwrap().weight.val()),
                host(bb.attn.wo.as_ref().unwrap().weight.val())
            );
        }
        assert_eq!(
            host(a.head.as_ref().unwrap().weight.val()),
            host(b.head.as_ref().unwrap().weight.val())
        );
    }

    /// A validation snapshot of a model built for training computes without autodiff: its
    /// position tables (skipped fields, cloned as they are by `Module::valid`) are plain
    /// tensors, so neither the forward of eval/analyze nor cached decoding falls back under
    /// autodiff (before the tables were built off autodiff, every op of both did, and decoding
    /// ran at 19 instead of ~26 tokens/s on the SmolLM2 shape); the values are unchanged.
    #[test]
    fn a_valid_snapshot_of_a_training_model_runs_without_autodiff() {
        let plain = crate::backend::device(crate::config::DeviceKind::Flex).unwrap();
        let ad = plain.clone().autodiff();
        for positions in [
            PositionsConfig::Rope {
                base: 10000.0,
                fraction: 1.0,
                pairing: Default::default(),
            },
            PositionsConfig::Sinusoidal {},
        ] {
            let cfg = ModelConfig {
                positions: positions.clone(),
                ..tiny_cfg()
            };
            let trained = Lm::new(&cfg, 11, 3, &ad);
            let valid = burn::module::Module::valid(&trained);
            let ids =
                Tensor::<2, Int>::from_data(TensorData::new(vec![1i64, 5, 7, 2], [1, 4]), &plain);
            let logits = valid.forward(ids.clone());
            assert!(
                !logits.is_autodiff(),
                "{positions:?}: forward under autodiff"
            );
            let mut cache = valid.cache(CachePolicy::DENSE).unwrap();
            let step = valid.forward_cached(ids.clone().narrow(1, 0, 1), &mut cache);
            assert!(
                !step.unwrap().is_autodiff(),
                "{positions:?}: decoding under autodiff"
            );
            // the same numbers as the same weights built on the plain device
            let fresh = Lm::new(&cfg, 11, 3, &plain).forward(ids);
            let host = |t: Tensor<3>| t.into_data().try_into_vec::<f32>().unwrap();
            assert_eq!(host(logits), host(fresh), "{positions:?}");
        }
    }

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
