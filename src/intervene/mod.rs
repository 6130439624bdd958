//! Causal interventions on the one forward (docs/reference.md §11): ablations of heads and
//! key/value groups, activation patching and directional addition, all as edits at the hook
//! points of [`Lm::walk`]. A batch is walked once with its `resid_pre` of every layer (and the
//! activations the edits need) recorded ([`Prepared`]); every intervention then restarts at its
//! first layer from that record, many interventions at once as copies of the batch (one copy
//! per intervention, masks picking each copy's heads), and only per-row reductions of the
//! logits leave the device ([`Scoring`]).

pub mod ablate;
pub mod patch;

use crate::data::Batch;
use crate::eval::batch_tensors;
use crate::model::{Ctx, HeadSite, HookSet, Lm, Site, StreamSite};
use anyhow::{Result, bail};
use burn::tensor::activation::log_softmax;
use burn::tensor::{Bool, Device, Int, Tensor, TensorData};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What an ablation acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Unit {
    /// A query head's z (its pattern for move-to-first).
    Head { layer: usize, head: usize },
    /// A key/value group's k and v (grouped-query attention; a head's own k, v without it).
    KvGroup { layer: usize, group: usize },
}

impl Unit {
    pub fn layer(&self) -> usize {
        match *self {
            Unit::Head { layer, .. } | Unit::KvGroup { layer, .. } => layer,
        }
    }
    /// `L.H`, or `kv L.G`.
    pub fn label(&self) -> String {
        match *self {
            Unit::Head { layer, head } => crate::heads::head_label(layer, head),
            Unit::KvGroup { layer, group } => format!("kv {layer}.{group}"),
        }
    }
}

/// How an ablated activation is replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AblationKind {
    Zero,
    /// The position-wise mean over a reference set of sequences.
    Mean,
    /// The same position of another sequence of the batch (a seeded derangement).
    Resample,
    /// Guo et al.: the head's pattern row put entirely on the first real token.
    MoveToFirst,
}

/// Where a metric is read, per (sequence, position).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Positions {
    All,
    /// The last position with a counted target.
    Last,
    /// Positions t ≥ T/2 with a counted target.
    SecondHalf,
}

impl Positions {
    /// The (B, T) weights of a batch's counted targets at these positions.
    pub fn weights(self, b: &Batch) -> Vec<f32> {
        let t = b.len;
        let mut w = vec![0f32; b.batch * t];
        for s in 0..b.batch {
            let m = &b.loss_mask[s * t..(s + 1) * t];
            match self {
                Positions::All => w[s * t..(s + 1) * t].copy_from_slice(m),
                Positions::SecondHalf => {
                    for i in t / 2..t {
                        w[s * t + i] = m[i];
                    }
                }
                Positions::Last => {
                    if let Some(i) = (0..t).rev().find(|&i| m[i] > 0.0) {
                        w[s * t + i] = m[i];
                    }
                }
            }
        }
        w
    }
}

/// The metric of an intervention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Metric {
    /// Mean next-token NLL over the weighted positions.
    Loss,
    /// logit(answer) − logit(wrong) at the last position, mean over sequences.
    LogitDiff,
    /// KL(clean ‖ intervened) of the next-token distributions, mean over the weighted positions.
    Kl,
}

/// What the metric reads: the batch's targets, (B, T) position weights, per-sequence
/// (answer, wrong) ids for the logit difference.
#[derive(Debug, Clone)]
pub struct Scoring {
    pub metric: Metric,
    pub weights: Vec<f32>,
    pub answers: Option<Vec<(u32, u32)>>,
}

/// The most logits (rows × positions × V) formed at once.
const MAX_LOGITS: usize = 1 << 22;
/// The most attention weights (rows × H × S × C) one walk of copies may hold.
const MAX_ATTENTION: usize = 1 << 26;

/// A batch walked once: its block inputs and the activations interventions read, recorded at
/// every layer, and its own metric per sequence.
pub struct Prepared<'a> {
    pub model: &'a Lm,
    pub ctx: Ctx,
    pub batch: Batch,
    /// `resid_pre` of layers 0..L, (B, S, d).
    pub resid: Vec<Tensor<3>>,
    /// Recorded activations by (layer, site).
    pub acts: BTreeMap<(usize, Site), Activation>,
    pub scoring: Scoring,
    /// Clean log-probabilities at the weighted positions' span (B, P, V), for the KL.
    logp: Option<(usize, Tensor<3>)>,
    /// The batch's own metric per sequence: (sum, weight).
    pub rows: Vec<(f64, f64)>,
    tokens: Tensor<2, Int>,
}

/// A recorded activation of either rank.
#[derive(Clone)]
pub enum Activation {
    Stream(Tensor<3>),
    Heads(Tensor<4>),
}

impl<'a> Prepared<'a> {
    /// Walk `batch` once recording `resid_pre` of every layer and `sites` at every layer.
    pub fn new(
        model: &'a Lm,
        batch: &Batch,
        sites: &[Site],
        scoring: Scoring,
        device: &Device,
    ) -> Result<Self> {
        if scoring.weights.len() != batch.batch * batch.len {
            bail!("scoring weights do not match the batch");
        }
        if scoring.metric == Metric::LogitDiff && scoring.answers.is_none() {
            bail!("--metric logit-diff needs answers: a task with an answer and a wrong answer");
        }
        let n = model.blocks.len();
        let (x, _, _) = batch_tensors(batch, device);
        let (h0, ctx) = model.embed(x.clone());
        let resid = Site::Stream(StreamSite::ResidPre);
        let mut rec = (0..=n).fold(HookSet::new(), |s, l| s.record(l, resid));
        for &site in sites {
            rec = (0..n).fold(rec, |s, l| s.record(l, site));
        }
        let end = model.walk(h0, &ctx, 0..n, Some(&mut rec), None);
        let mut resids = Vec::with_capacity(n);
        for l in 0..n {
            resids.push(rec.streams[&(l, StreamSite::ResidPre)].clone());
        }
        let mut acts = BTreeMap::new();
        for ((l, s), t) in rec.streams {
            acts.insert((l, Site::Stream(s)), Activation::Stream(t));
        }
        for ((l, s), t) in rec.heads {
            acts.insert((l, Site::Head(s)), Activation::Heads(t));
        }
        let mut p = Self {
            model,
            ctx,
            batch: batch.clone(),
            resid: resids,
            acts,
            scoring,
            logp: None,
            rows: Vec::new(),
            tokens: x,
        };
        if p.scoring.metric == Metric::Kl {
            let (from, len) = p.span();
            let h = p.real(end.clone()).narrow(1, from, len);
            p.logp = Some((from, log_softmax(model_logits(model, h), 2)));
        }
        p.rows = p.metric_rows(end, 1);
        Ok(p)
    }

    /// The recorded activation at (layer, site) as a per-head tensor.
    pub fn heads(&self, layer: usize, site: HeadSite) -> Result<Tensor<4>> {
        match self.acts.get(&(layer, Site::Head(site))) {
            Some(Activation::Heads(t)) => Ok(t.clone()),
            _ => bail!("{} of layer {layer} was not recorded", Site::Head(site)),
        }
    }

    /// The recorded activation at (layer, site) on the residual stream.
    pub fn stream(&self, layer: usize, site: StreamSite) -> Result<Tensor<3>> {
        match self.acts.get(&(layer, Site::Stream(site))) {
            Some(Activation::Stream(t)) => Ok(t.clone()),
            _ => bail!("{} of layer {layer} was not recorded", Site::Stream(site)),
        }
    }

    /// The batch's metric, aggregated over its sequences.
    pub fn metric(&self) -> f64 {
        aggregate(&self.rows)
    }

    /// Each sequence's metric (its weighted sum over its weight).
    pub fn per_sequence(&self) -> Vec<f64> {
        self.rows.iter().map(|(x, w)| x / w).collect()
    }

    /// Real-token rows of a stream (the model's sink tokens dropped).
    fn real(&self, h: Tensor<3>) -> Tensor<3> {
        let n = self.model.cfg.sink_tokens;
        let s = h.dims()[1];
        h.narrow(1, n, s - n)
    }

    /// The first weighted position and the span up to the last one.
    fn span(&self) -> (usize, usize) {
        let t = self.batch.len;
        let cols: Vec<usize> = (0..t)
            .filter(|&i| (0..self.batch.batch).any(|b| self.scoring.weights[b * t + i] > 0.0))
            .collect();
        match (cols.first(), cols.last()) {
            (Some(&a), Some(&z)) => (a, z + 1 - a),
            _ => (t - 1, 1),
        }
    }

    /// Copies of the batch that walked from some layer: `end` (copies·B, S, d). Each row's
    /// (metric sum, weight) against sequence `row % B`.
    pub fn metric_rows(&self, end: Tensor<3>, copies: usize) -> Vec<(f64, f64)> {
        let b = self.batch.batch;
        let t = self.batch.len;
        let h = self.real(end); // (N, T, d)
        let n = h.dims()[0];
        let v = self.model.embed.dims()[0];
        let device = h.device();
        let mut out = Vec::with_capacity(n);
        match self.scoring.metric {
            Metric::LogitDiff => {
                let answers = self.scoring.answers.as_ref().expect("checked in new");
                let last = self.model_logits_at(h, t - 1); // (N, 1, V)
                let vals = crate::eval::to_array(last);
                for r in 0..n {
                    let (a, w) = answers[r % b];
                    let row = &vals.data[r * v..(r + 1) * v];
                    out.push((row[a as usize] as f64 - row[w as usize] as f64, 1.0));
                }
            }
            Metric::Loss | Metric::Kl => {
                let (from, len) = self.span();
                let per = (MAX_LOGITS / (len * v).max(1)).max(1);
                let weights: Vec<f32> = (0..copies)
                    .flat_map(|_| self.scoring.weights.iter().copied())
                    .collect();
                let mut r0 = 0;
                while r0 < n {
                    let k = per.min(n - r0);
                    let logits =
                        model_logits(self.model, h.clone().narrow(0, r0, k).narrow(1, from, len)); // (k, P, V)
                    let logp = log_softmax(logits, 2);
                    let per_pos: Vec<f32> = match self.scoring.metric {
                        Metric::Loss => {
                            let idx: Vec<i64> = (r0..r0 + k)
                                .flat_map(|r| {
                                    let s = r % b;
                                    (from..from + len)
                                        .map(move |i| self.batch.targets[s * t + i] as i64)
                                })
                                .collect();
                            let idx = Tensor::<3, Int>::from_data(
                                TensorData::new(idx, [k, len, 1]),
                                &device,
                            );
                            let picked = logp.gather(2, idx).neg(); // (k, P, 1)
                            crate::eval::to_array(picked).data
                        }
                        _ => {
                            let (_, clean) = self.logp.as_ref().expect("recorded for the KL");
                            let rows: Vec<i64> = (r0..r0 + k).map(|r| (r % b) as i64).collect();
                            let rows =
                                Tensor::<1, Int>::from_data(TensorData::new(rows, [k]), &device);
                            let c = clean.clone().select(0, rows); // (k, P, V)
                            let kl = (c.clone().exp() * (c - logp)).sum_dim(2); // (k, P, 1)
                            crate::eval::to_array(kl).data
                        }
                    };
                    for (i, r) in (r0..r0 + k).enumerate() {
                        let (mut sum, mut wsum) = (0.0, 0.0);
                        for p in 0..len {
                            let w = weights[r * t + from + p] as f64;
                            sum += w * per_pos[i * len + p] as f64;
                            wsum += w;
                        }
                        out.push((sum, wsum));
                    }
                    r0 += k;
                }
            }
        }
        out
    }

    /// Logits at one position of every row, (N, 1, V).
    fn model_logits_at(&self, h: Tensor<3>, pos: usize) -> Tensor<3> {
        model_logits(self.model, h.narrow(1, pos, 1))
    }

    /// How many copies of the batch one walk may hold.
    pub fn max_copies(&self) -> usize {
        let cfg = &self.model.cfg;
        let s = cfg.sink_tokens + self.batch.len;
        let c = cfg.attention.slot.slot_columns() + s;
        let per_copy = self.batch.batch * cfg.n_heads * s * c;
        (MAX_ATTENTION / per_copy.max(1)).clamp(1, 64)
    }

    /// Walk `copies` copies of the batch from `layer` with `hooks`: the final stream.
    pub fn walk_copies(&self, layer: usize, copies: usize, hooks: &mut HookSet) -> Tensor<3> {
        let h = self.resid[layer].clone();
        let h = if copies == 1 {
            h
        } else {
            Tensor::cat(vec![h; copies], 0)
        };
        let n = self.model.blocks.len();
        self.model.walk(h, &self.ctx, layer..n, Some(hooks), None)
    }

    /// The token ids (B, T) on the device.
    pub fn tokens(&self) -> Tensor<2, Int> {
        self.tokens.clone()
    }
}

/// Logits (…, V) of real-token hidden states through the final norm and the head.
fn model_logits(model: &Lm, h: Tensor<3>) -> Tensor<3> {
    model.unembed(h)
}

/// Σ sums / Σ weights of rows (a mean over sequences for the logit difference).
pub fn aggregate(rows: &[(f64, f64)]) -> f64 {
    let (s, w) = rows
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x, b + y));
    s / w
}

/// A (rows, n, 1, 1) boolean mask, true where `on(row, index)`.
pub fn unit_mask(
    rows: usize,
    n: usize,
    device: &Device,
    on: impl Fn(usize, usize) -> bool,
) -> Tensor<4, Bool> {
    let data: Vec<bool> = (0..rows * n).map(|i| on(i / n, i % n)).collect();
    Tensor::from_data(TensorData::new(data, [rows, n, 1, 1]), device)
}

/// A seeded derangement of 0..n (no fixed point; the identity for n = 1).
pub fn derangement(n: usize, seed: u64) -> Vec<usize> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    if n < 2 {
        return (0..n).collect();
    }
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    loop {
        let mut p: Vec<usize> = (0..n).collect();
        p.shuffle(&mut rng);
        if p.iter().enumerate().all(|(i, &j)| i != j) {
            return p;
        }
    }
}
