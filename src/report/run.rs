//! One run of a sweep, summarised from its `metrics.jsonl` and status file ([`run_result`]).

use crate::sweep::{self, Plan, RunPlan};
use serde::Serialize;
use std::collections::BTreeMap;
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

/// Read `metrics.jsonl` into step-ordered (step, scalars) records.
pub(super) fn read_metrics(path: &Path) -> Vec<(u64, BTreeMap<String, f64>)> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| {
            let step = v["step"].as_u64()?;
            let scalars = v["scalars"]
                .as_object()?
                .iter()
                .filter_map(|(k, x)| Some((k.clone(), x.as_f64()?)))
                .collect();
            Some((step, scalars))
        })
        .collect()
}

/// Summarise one run.
pub fn run_result(plan: &Plan, run: &RunPlan, eps: &str, threshold: f64) -> RunResult {
    let status = sweep::read_status(&plan.dir, &run.name);
    let records = read_metrics(&plan.dir.join(&run.name).join("metrics.jsonl"));
    let key = format!("sink/rate_eps{eps}/pos01");
    let slot_key = format!("sink/slot_rate_eps{eps}");
    let last = |k: &str| records.iter().rev().find_map(|(_, s)| s.get(k).copied());
    let curve: Vec<(u64, f64)> = records
        .iter()
        .filter_map(|(st, s)| s.get(&key).map(|v| (*st, *v)))
        .collect();
    // the last record holding `prefix*` tags, folded over them
    let last_fold = |prefix: &str, init: f64, f: fn(f64, f64) -> f64| {
        records
            .iter()
            .rev()
            .find(|(_, s)| s.keys().any(|k| k.starts_with(prefix)))
            .map(|(_, s)| {
                s.iter()
                    .filter(|(k, _)| k.starts_with(prefix))
                    .map(|(_, v)| *v)
                    .fold(init, f)
            })
    };
    let norm_ratio = last_fold("act/norm_ratio/", f64::NEG_INFINITY, f64::max);
    let val: Vec<(u64, f64)> = records
        .iter()
        .filter_map(|(st, s)| s.get("val/loss").map(|v| (*st, *v)))
        .collect();
    let loss_drop_step = match (val.first(), val.last()) {
        (Some((_, v0)), Some((_, v1))) if v1 < v0 => {
            let half = v0 - (v0 - v1) / 2.0;
            val.iter().find(|(_, v)| *v <= half).map(|(s, _)| *s)
        }
        _ => None,
    };
    let value_drain = last_fold("kv/value_drain/", f64::INFINITY, f64::min);
    let slot_layers = records
        .iter()
        .rev()
        .find(|(_, s)| s.keys().any(|k| k.starts_with("sink/slot_mass/")))
        .map(|(_, s)| {
            let m: Vec<f64> = s
                .iter()
                .filter(|(k, _)| k.starts_with("sink/slot_mass/"))
                .map(|(_, v)| *v)
                .collect();
            100.0 * m.iter().sum::<f64>() / m.len() as f64
        });
    let mut sink_k = Vec::new();
    while let Some(v) = last(&format!("sink/rate_eps{eps}/pos{:02}", sink_k.len() + 1)) {
        sink_k.push(v);
    }
    RunResult {
        name: run.name.clone(),
        seed: run.seed,
        state: status
            .as_ref()
            .map_or("not started".to_string(), |s| s.state.clone()),
        seconds: status.as_ref().map(|s| s.seconds),
        error: status.and_then(|s| s.error),
        steps: records.last().map(|(s, _)| *s),
        sink1: last(&key),
        slot_sink1: last(&slot_key),
        val_loss: last("val/loss"),
        norm_ratio,
        emergence_step: curve.iter().find(|(_, v)| *v > threshold).map(|(s, _)| *s),
        loss_drop_step,
        value_drain,
        sink_k,
        first_mass: last("attn/f_attn").map(|v| 100.0 * v),
        slot_mass: slot_layers,
        kurtosis: last("act/kurtosis"),
        max_abs: last("act/m_act"),
        secondary: last("sink/secondary_count"),
        curve,
        val_curve: val,
    }
}
