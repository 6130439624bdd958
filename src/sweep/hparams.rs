//! A sweep as TensorBoard's HParams dashboard: the axes (and the seed) as hyper-parameters,
//! the headline sink numbers and the validation loss as metrics. The experiment is written once
//! at the sweep's root; every finished run gets its session (start and end) in an event file of
//! its own directory, next to the scalars the metrics point at (`tensorboard --logdir
//! runs/sweeps/NAME`, then the HPARAMS tab).

use super::{Plan, RunPlan};
use crate::metrics::{HEADLINE_EPS, eps_name};
use crate::tags::{Scalar, Tag};
use crate::tensorboard::EventWriter;
use crate::tensorboard::plugins::{self, HValue, Status};
use anyhow::{Context, Result};
use std::path::Path;

/// The metrics shown for every run: (scalar tag, display name). A run that lacks a tag (Sink₁*
/// without a slot, the copy loss on text) shows an empty cell.
fn metrics() -> Vec<(String, String)> {
    let e = eps_name(HEADLINE_EPS);
    vec![
        (Tag::sink1(&e), format!("Sink1 (eps {e}, %)")),
        (Tag::slot_rate(&e), format!("slot Sink1* (eps {e}, %)")),
        (Scalar::ValLoss.into(), "validation loss".into()),
        (Scalar::FAttn.into(), "F-Attn".into()),
        (
            Scalar::FAttnUniform.into(),
            "F-Attn of uniform attention (floor)".into(),
        ),
        (Scalar::BbLossCopy.into(), "copy loss (synthetic)".into()),
    ]
    .into_iter()
    .map(|(t, name): (Tag, String)| (t.to_string(), name))
    .collect()
}

/// A TOML value (as the sweep file writes it) as a hyper-parameter value: numbers stay
/// numbers, booleans booleans, anything else its run-name label.
fn hvalue(toml_text: &str) -> HValue {
    let parsed: Option<toml::Value> = toml::from_str::<toml::Table>(&format!("v = {toml_text}"))
        .ok()
        .and_then(|mut t| t.remove("v"));
    match parsed {
        Some(toml::Value::Integer(i)) => HValue::Number(i as f64),
        Some(toml::Value::Float(x)) => HValue::Number(x),
        Some(toml::Value::Boolean(b)) => HValue::Bool(b),
        Some(v) => HValue::Text(super::value_label(&v)),
        None => HValue::Text(toml_text.to_string()),
    }
}

/// The experiment (hyper-parameters with their values, metrics) at the sweep root, unless an
/// event file is already there.
pub fn write_experiment(plan: &Plan) -> Result<()> {
    if crate::recorder::has_event_files(&plan.dir) {
        return Ok(());
    }
    let mut hparams: Vec<(String, Vec<HValue>)> = plan
        .axes
        .iter()
        .map(|(path, _, values)| (path.clone(), values.iter().map(|v| hvalue(v)).collect()))
        .collect();
    hparams.push((
        "seed".into(),
        plan.seeds
            .iter()
            .map(|s| HValue::Number(*s as f64))
            .collect(),
    ));
    let mut tb = EventWriter::create(&plan.dir)
        .with_context(|| format!("writing the HParams experiment in {}", plan.dir.display()))?;
    tb.add_hparams(
        plugins::EXPERIMENT_TAG,
        &plugins::experiment(&hparams, &metrics()),
    )?;
    tb.flush()?;
    Ok(())
}

/// A finished run's session: its axis values and seed, start and end time.
pub fn write_session(run_dir: &Path, run: &RunPlan, seconds: f64) -> Result<()> {
    let mut hparams: Vec<(String, HValue)> = run
        .values
        .iter()
        .map(|(path, v)| (path.clone(), hvalue(v)))
        .collect();
    hparams.push(("seed".into(), HValue::Number(run.seed as f64)));
    let end = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut tb = EventWriter::create(run_dir)
        .with_context(|| format!("writing the HParams session in {}", run_dir.display()))?;
    tb.add_hparams(
        plugins::SESSION_START_TAG,
        &plugins::session_start(&hparams, "", end - seconds),
    )?;
    tb.add_hparams(
        plugins::SESSION_END_TAG,
        &plugins::session_end(Status::Success, end),
    )?;
    tb.flush()?;
    Ok(())
}
