//! Evaluations under a residual-stream filter at one block input `l`, restarted at `l`: the
//! blocks below `l` see no filter, so their output — the stream entering block `l` — is the
//! same for every filter. It is computed once ([`Lm::stream_at`]) for the validation and probe
//! batches, and each filtered evaluation walks only blocks `l..L` (plus the head). The probe's
//! per-layer summaries below `l` are the unfiltered ones, also computed once. The results equal
//! the whole walk's (the walk restarted from a recorded `resid_pre` is the same computation;
//! tested in `tests/suite/` against [`super::eval_loss_filtered`] and
//! [`super::probe_report`]).
//!
//! Cost per filtered evaluation, L blocks and a head costing H blocks' worth: (L − l + H) /
//! (L + H) of the whole walk (H ≈ 6 on SmolLM2-135M, whose 49,152-id head is large).

use super::{Record, batch_tensors, probe_chunks, probe_pass_from, slice_batch};
use crate::data::Batch;
use crate::metrics::{LayerSummary, Proxy, SinkReport};
use crate::model::{Ctx, Lm, StreamFilter};
use burn::module::Module;
use burn::tensor::{Device, Int, Tensor};

/// One validation chunk entering the restart layer: stream (B, N+T, d), context, targets
/// (B, T) and loss mask (B, T).
type ValChunk = (Tensor<3>, Ctx, Tensor<2, Int>, Tensor<2>);

/// A validation batch and a probe batch prepared for filtered evaluations at block input
/// `layer` (0..=L; L = before the final norm).
pub struct RestartAt {
    pub layer: usize,
    val: Vec<ValChunk>,
    /// Σ loss mask over the validation batch (the mean's denominator).
    denom: f64,
    probe: Vec<(Tensor<3>, Ctx)>,
    /// The unfiltered summaries of the probe's layers below `layer`.
    below: Vec<LayerSummary>,
}

impl RestartAt {
    /// Walk `val` and `probe` (in chunks of `chunk` sequences) up to block input `layer` once.
    /// `unfiltered` holds the probe's unfiltered summaries of every layer
    /// ([`super::summaries`] without a filter); those below `layer` are kept.
    pub fn new(
        model: &Lm,
        (val, probe): (&Batch, &Batch),
        chunk: usize,
        device: &Device,
        layer: usize,
        unfiltered: &[LayerSummary],
    ) -> Self {
        assert!(
            layer <= model.blocks.len(),
            "block input {layer} out of range"
        );
        let model = model.valid();
        let chunk = chunk.max(1);
        let denom = val.loss_mask.iter().map(|&m| m as f64).sum();
        let val = (0..val.batch)
            .step_by(chunk)
            .map(|from| {
                let to = (from + chunk).min(val.batch);
                let (x, y, m) = batch_tensors(&slice_batch(val, from, to), device);
                let (h, ctx) = model.stream_at(x, layer);
                (h, ctx, y, m)
            })
            .collect();
        let probe = probe_chunks(probe, chunk, device)
            .into_iter()
            .map(|x| model.stream_at(x, layer))
            .collect();
        Self {
            layer,
            val,
            denom,
            probe,
            below: unfiltered[..layer.min(unfiltered.len())].to_vec(),
        }
    }

    /// The validation loss under `filter` (its sites at or above `layer`): as
    /// [`super::eval_loss_filtered`].
    pub fn nll(&self, model: &Lm, filter: Option<&StreamFilter>) -> f64 {
        let model = model.valid();
        self.val
            .iter()
            .map(|(h, ctx, y, m)| {
                model.nll_from(
                    h.clone(),
                    ctx,
                    self.layer,
                    (y.clone(), m.clone(), self.denom),
                    filter,
                    super::MAX_EVAL_LOGITS,
                )
            })
            .sum()
    }

    /// The probe's sink report under `filter`: as [`super::probe_report`] without groups.
    pub fn probe_report(
        &self,
        model: &Lm,
        proxy: Proxy,
        filter: Option<&StreamFilter>,
        (eps, k_max): (&[f64], usize),
    ) -> SinkReport {
        let model = model.valid();
        let mut layers = self.below.clone();
        let record = Record {
            queries: false,
            z: false,
        };
        probe_pass_from(
            &model,
            self.probe.clone(),
            self.layer,
            proxy,
            filter,
            record,
            &mut |_, _, la, _| layers.push(LayerSummary::of(&la, None)),
        );
        SinkReport::from_summaries(&layers, eps, k_max)
    }
}
