//! Decoding with a key/value cache (StreamingLLM, docs/reference.md §6): what a cache keeps,
//! how positions become cache coordinates, and running the model past its training context
//! where the position scheme allows.

use super::Lm;
use super::context::{Ctx, Keep, LayerKv, PositionTables};
use super::layers::norm_or_id;
use crate::config::MaskConfig;
use burn::tensor::module::embedding;
use burn::tensor::{Int, Tensor};

impl Lm {
    /// Why positions past `model.ctx` do not exist for this model (learned absolute positions,
    /// U-SPA / E-SPA's ctx × ctx logit bias), or None when they are defined (RoPE, NoPE, ALiBi,
    /// T5 buckets and sinusoids extend to any position).
    pub fn fixed_length(&self) -> Option<&'static str> {
        if self.pos_embed.is_some() {
            Some("learned absolute positions exist only for 0..model.ctx")
        } else if self.cfg.attention.spa.target().is_some() {
            Some("the U-SPA / E-SPA logit bias is a model.ctx × model.ctx table")
        } else {
            None
        }
    }

    /// Let cached decoding run up to `len` real positions, past `model.ctx` where the position
    /// scheme defines them (dense attention past the training length, StreamingLLM's control).
    pub fn extend_positions(&mut self, len: usize) -> anyhow::Result<()> {
        if len <= self.tables.len {
            return Ok(());
        }
        if let Some(why) = self.fixed_length() {
            anyhow::bail!(
                "cannot decode {len} positions with model.ctx = {}: {why}",
                self.cfg.ctx
            );
        }
        let device = self.embed.val().device();
        self.tables = PositionTables::new(&self.cfg, len, &device);
        Ok(())
    }

    /// Absolute positions are added to the embedding (sinusoidal, learned), so a cache that
    /// evicts must re-embed what it keeps to give it cache coordinates.
    fn absolute_positions(&self) -> bool {
        self.pos_embed.is_some() || self.tables.sinusoidal.is_some()
    }

    /// An empty key/value cache for [`Lm::forward_cached`]. Refuses masks that token-by-token
    /// decoding cannot reproduce (a bidirectional prefix) and evicting caches larger than the
    /// training context (StreamingLLM's cache lives inside the trained positions).
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
            policies: vec![policy],
            ids: None,
        })
    }

    /// Logits (B, n, V) for `n` new tokens (B, n) given everything already in `cache`, which is
    /// then updated. Every position is a cache coordinate (StreamingLLM, docs/reference.md §6): keys
    /// are cached before RoPE and rotated with their cache-local positions at every call;
    /// ALiBi, T5 buckets, masks and U-SPA / E-SPA terms use cache-local positions; with
    /// absolute positions (sinusoidal, learned), which live in the embedding, a cache that
    /// evicts re-embeds the tokens it keeps at positions 0..kept (a forward over them). The
    /// model's own sink tokens and slots are part of the model and always stay in the cache.
    /// With no eviction this equals [`Lm::forward`] on the whole sequence; with eviction and
    /// absolute positions it equals [`Lm::forward`] on the kept tokens.
    ///
    /// On the CPU it runs on a thread of rayon's pool ([`crate::parallel::on_pool`]): a decoded
    /// token is a few hundred small products one after another. Other devices keep the
    /// caller's thread (a GPU backend's work is queued per thread).
    pub fn forward_cached(
        &self,
        tokens: Tensor<2, Int>,
        cache: &mut KvCache,
    ) -> anyhow::Result<Tensor<3>> {
        if crate::backend::is_cpu(&tokens.device()) {
            crate::parallel::on_pool(|| self.forward_cached_here(tokens, cache))
        } else {
            self.forward_cached_here(tokens, cache)
        }
    }

    /// [`Lm::forward_cached`] on the calling thread.
    fn forward_cached_here(
        &self,
        tokens: Tensor<2, Int>,
        cache: &mut KvCache,
    ) -> anyhow::Result<Tensor<3>> {
        let [b, n] = tokens.dims();
        let n_sink = self.cfg.sink_tokens;
        // One policy for every row, or one per row with the same budget ([`KvCache::fork_rows`]).
        let policies = cache.policies.clone();
        let policy = policies[0];
        let total = cache.real + n;
        let cap = policy.window.map(|w| policy.sinks + w);
        let kept = cap.map_or(total, |c| total.min(c));
        if let Some(w) = policies.iter().filter_map(|p| p.window).min()
            && n > w
        {
            anyhow::bail!("{n} new tokens do not fit a window of {w}");
        }
        if policies.len() > 1 && policies.len() != b {
            anyhow::bail!("a cache of {} rows fed {b} rows", policies.len());
        }
        if kept > self.tables.len {
            anyhow::bail!(
                "the cache would hold {kept} tokens but positions exist only up to {} \
                 (model.ctx = {}){}",
                self.tables.len,
                self.cfg.ctx,
                match self.fixed_length() {
                    Some(why) => format!(": {why}"),
                    None => "; extend them first (Lm::extend_positions) or use a window".into(),
                }
            );
        }
        if self.absolute_positions() {
            // Keep the ids of what the cache holds, to re-embed them after an eviction.
            let all = match cache.ids.take() {
                Some(old) => Tensor::cat(vec![old, tokens.clone()], 1),
                None => tokens.clone(),
            }; // (B, total)
            if kept < total {
                // (B', total) → (B', kept): the first `s` ids and the most recent kept − s.
                let keep = |x: Tensor<2, Int>, s: usize| {
                    let mut parts = Vec::with_capacity(2);
                    if s > 0 {
                        parts.push(x.clone().narrow(1, 0, s));
                    }
                    parts.push(x.narrow(1, total - (kept - s), kept - s));
                    Tensor::cat(parts, 1)
                };
                let keep_ids = match policies[..] {
                    [p] => keep(all, p.sinks),
                    _ => Tensor::cat(
                        (0..b)
                            .map(|r| keep(all.clone().narrow(0, r, 1), policies[r].sinks))
                            .collect(),
                        0,
                    ),
                }; // (B, kept)
                let mut fresh = KvCache {
                    layers: vec![LayerKv::default(); self.blocks.len()],
                    real: 0,
                    started: false,
                    policies: vec![CachePolicy::DENSE],
                    ids: None,
                };
                let logits = self.forward_cached(keep_ids.clone(), &mut fresh)?; // (B, kept, V)
                cache.layers = fresh.layers;
                cache.real = kept;
                cache.started = true;
                cache.ids = Some(keep_ids);
                return Ok(logits.narrow(1, kept - n, n));
            }
            cache.ids = Some(all);
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
            self.compute,
        );
        ctx.keep = cap.map(|c| Keep {
            front: policies.iter().map(|p| n_sink + p.sinks).collect(),
            total: n_sink + c,
        });
        h = self.walk(h, &ctx, 0..self.blocks.len(), None, Some(&mut cache.layers));
        cache.real = kept;
        cache.started = true;
        if first && n_sink > 0 {
            h = h.narrow(1, n_sink, n);
        }
        Ok(self.logits(h))
    }
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
    /// The policy of every row, or of each row (then all with the same budget).
    policies: Vec<CachePolicy>,
    /// Token ids the cache holds (B, real), kept for models with absolute positions only.
    ids: Option<Tensor<2, Int>>,
}

impl KvCache {
    /// A copy of this dense cache that continues under `policy`. Allowed while everything
    /// cached fits `policy`'s budget: no cache has evicted anything yet, so both hold the same
    /// tokens at the same positions and give the same logits so far (StreamingLLM's caches all
    /// start as the dense one).
    pub fn fork(&self, policy: CachePolicy) -> anyhow::Result<KvCache> {
        self.check_fork(policy)?;
        Ok(KvCache {
            layers: self.layers.clone(),
            real: self.real,
            started: self.started,
            policies: vec![policy],
            ids: self.ids.clone(),
        })
    }

    /// [`KvCache::fork`] into one batch row per policy, decoded together (each token reads the
    /// weights once for every row): this cache must hold one sequence, and every policy must
    /// evict (a window) with the same budget sinks + window, so the rows always hold the same
    /// number of tokens. Row r's logits equal those of `fork(policies[r])` (tested).
    pub fn fork_rows(&self, policies: &[CachePolicy]) -> anyhow::Result<KvCache> {
        let budget = |p: &CachePolicy| p.window.map(|w| p.sinks + w);
        let first = policies.first().and_then(budget);
        if first.is_none() || policies.iter().any(|p| budget(p) != first) {
            anyhow::bail!(
                "rows of one cache need evicting policies of one budget (sinks + window), got \
                 {policies:?}"
            );
        }
        for p in policies {
            self.check_fork(*p)?;
        }
        let rows = policies.len();
        let repeat = |x: &Option<Tensor<4>>| x.as_ref().map(|t| t.clone().repeat_dim(0, rows));
        let layers = self
            .layers
            .iter()
            .map(|l| {
                if l.keys.as_ref().is_some_and(|k| k.dims()[0] != 1) {
                    anyhow::bail!("only a cache of one sequence forks into rows");
                }
                Ok(LayerKv {
                    keys: repeat(&l.keys),
                    values: repeat(&l.values),
                })
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(KvCache {
            layers,
            real: self.real,
            started: self.started,
            policies: policies.to_vec(),
            ids: self.ids.as_ref().map(|t| t.clone().repeat_dim(0, rows)),
        })
    }

    /// A fork of this cache under `policy` is allowed (see [`KvCache::fork`]).
    fn check_fork(&self, policy: CachePolicy) -> anyhow::Result<()> {
        if self.policies != [CachePolicy::DENSE] {
            anyhow::bail!("only a dense cache can be forked (this one evicts)");
        }
        if let Some(w) = policy.window
            && self.real > policy.sinks + w
        {
            anyhow::bail!(
                "a cache of {} tokens does not fit {} sink tokens + a window of {w}",
                self.real,
                policy.sinks
            );
        }
        Ok(())
    }

    /// Real tokens currently cached.
    pub fn len(&self) -> usize {
        self.real
    }
    pub fn is_empty(&self) -> bool {
        self.real == 0
    }
}
