//! One run of a sweep, summarised from its `metrics.jsonl` and status file ([`run_result`]).

use crate::rundir::RunDir;
use crate::sweep::{self, Plan, RunPlan};
use crate::tags::{self, HeadMetric, LayerMetric, Record, Scalar, Tag};
use serde::Serialize;
use std::path::Path;

/// What one run's metrics say.
#[derive(Debug, Clone, Serialize)]
pub struct RunResult {
    pub name: String,
    pub seed: u64,
    pub state: String,
    pub error: Option<String>,
    /// Wall-clock seconds of the run's last attempt (its status file).
    pub seconds: Option<f64>,
    pub steps: Option<u64>,
    pub sink1: Option<f64>,
    pub slot_sink1: Option<f64>,
    pub val_loss: Option<f64>,
    pub norm_ratio: Option<f64>,
    pub emergence_step: Option<u64>,
    /// The first evaluation step at which the validation loss has covered half of its drop
    /// (from the first evaluation to the last).
    pub loss_drop_step: Option<u64>,
    /// Final value drain: the smallest `kv/value_drain/*` over heads of the last probe.
    pub value_drain: Option<f64>,
    /// Final Sink_k for k = 1, 2, … (as many positions as the run records).
    pub sink_k: Vec<f64>,
    /// Final first-token attention mass F-Attn (`attn/f_attn`), in %.
    pub first_mass: Option<f64>,
    /// Final slot mass: the mean of `sink/slot_mass/layer*` over layers, in % (models with a
    /// slot, an implicit one included).
    pub slot_mass: Option<f64>,
    /// Final kurtosis of the block outputs, averaged over layers (`act/kurtosis`).
    pub kurtosis: Option<f64>,
    /// Final largest |h| over layers (`act/m_act`).
    pub max_abs: Option<f64>,
    /// Final mean number of secondary sinks per (layer, sequence, head) at the headline ε
    /// (`sink/secondary_count`).
    pub secondary: Option<f64>,
    /// (step, Sink₁) at every probe.
    pub curve: Vec<(u64, f64)>,
    /// (step, validation loss) at every evaluation.
    pub val_curve: Vec<(u64, f64)>,
}

/// A run's `metrics.jsonl` records ([`tags::read`]; none when the run has not recorded yet),
/// with the non-finite values left out: a report reads the last finite value of a tag.
pub(super) fn read_metrics(path: &Path) -> anyhow::Result<Vec<Record>> {
    let mut records = tags::read_if_present(path)?;
    for r in &mut records {
        r.scalars.retain(|_, v| v.is_finite());
    }
    Ok(records)
}

/// Summarise one run. A `metrics.jsonl` it cannot read is the run's error; the other runs of
/// the sweep are summarised as usual.
pub fn run_result(plan: &Plan, run: &RunPlan, eps: &str, threshold: f64) -> RunResult {
    let status = sweep::read_status(&plan.dir, &run.name);
    let (records, unreadable) = match read_metrics(&RunDir(&plan.dir.join(&run.name)).metrics()) {
        Ok(r) => (r, None),
        Err(e) => (Vec::new(), Some(format!("{e:#}"))),
    };
    let key = Tag::sink1(eps);
    let slot_key = Tag::slot_rate(eps);
    let last = |k: &Tag| records.iter().rev().find_map(|r| r.get(k));
    let curve: Vec<(u64, f64)> = records
        .iter()
        .filter_map(|r| r.get(&key).map(|v| (r.step, v)))
        .collect();
    // the last record holding tags of layer metric `m`, folded over its layers
    let last_layers = |m: LayerMetric| {
        let of = |t: &Tag| matches!(t, Tag::Layer(x, _) if *x == m);
        records
            .iter()
            .rev()
            .find(|r| r.scalars.keys().any(of))
            .map(|r| {
                r.scalars
                    .iter()
                    .filter(|(t, _)| of(t))
                    .map(|(_, v)| *v)
                    .collect::<Vec<_>>()
            })
    };
    let norm_ratio = last_layers(LayerMetric::NormRatio)
        .map(|v| v.into_iter().fold(f64::NEG_INFINITY, f64::max));
    let val: Vec<(u64, f64)> = records
        .iter()
        .filter_map(|r| r.get(&Scalar::ValLoss.into()).map(|v| (r.step, v)))
        .collect();
    let loss_drop_step = match (val.first(), val.last()) {
        (Some((_, v0)), Some((_, v1))) if v1 < v0 => {
            let half = v0 - (v0 - v1) / 2.0;
            val.iter().find(|(_, v)| *v <= half).map(|(s, _)| *s)
        }
        _ => None,
    };
    let is_drain = |t: &Tag| matches!(t, Tag::Head(HeadMetric::ValueDrain, _, _));
    let value_drain = records
        .iter()
        .rev()
        .find(|r| r.scalars.keys().any(is_drain))
        .map(|r| {
            r.scalars
                .iter()
                .filter(|(t, _)| is_drain(t))
                .map(|(_, v)| *v)
                .fold(f64::INFINITY, f64::min)
        });
    let slot_layers =
        last_layers(LayerMetric::SlotMass).map(|m| 100.0 * m.iter().sum::<f64>() / m.len() as f64);
    let mut sink_k = Vec::new();
    while let Some(v) = last(&Tag::sink_rate(eps, sink_k.len() + 1)) {
        sink_k.push(v);
    }
    RunResult {
        name: run.name.clone(),
        seed: run.seed,
        state: status
            .as_ref()
            .map_or("not started".to_string(), |s| s.state.clone()),
        seconds: status.as_ref().map(|s| s.seconds),
        error: unreadable.or(status.and_then(|s| s.error)),
        steps: records.last().map(|r| r.step),
        sink1: last(&key),
        slot_sink1: last(&slot_key),
        val_loss: last(&Scalar::ValLoss.into()),
        norm_ratio,
        emergence_step: curve.iter().find(|(_, v)| *v > threshold).map(|(s, _)| *s),
        loss_drop_step,
        value_drain,
        sink_k,
        first_mass: last(&Scalar::FAttn.into()).map(|v| 100.0 * v),
        slot_mass: slot_layers,
        kurtosis: last(&Scalar::Kurtosis.into()),
        max_abs: last(&Scalar::MAct.into()),
        secondary: last(&Scalar::SecondaryCount.into()),
        curve,
        val_curve: val,
    }
}
