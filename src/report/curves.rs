//! `sinklab report RUN_DIR`: one run's curves as PNG charts and a Markdown table, from its
//! `metrics.jsonl` (the same numbers TensorBoard shows):
//!
//! - `plots/sink1.png`: Sink₁ at every ε against step;
//! - `plots/heads.png`: every head's attention to token 1 (`sink/importance_first/*`);
//! - `plots/heads_forming.png`: each layer's best previous-token and induction head and its
//!   mean α₁ on the live repeat probe (`heads/…`), beside Sink₁ / 100 at the headline ε;
//! - `plots/loss.png`: training and validation loss (and, on a synthetic task, the copy and
//!   bigram losses, or the repeated and fresh targets' losses);
//! - `plots/drain.png`: every head's value drain ‖v₁‖ / mean ‖v_t‖ and every layer's
//!   massive-activation ratio ‖h₁‖ / mean ‖h_t‖;
//! - `plots/curves.md`: those values at a few steps.

use super::read_metrics;
use crate::heads::Score;
use crate::plot::{self, LinePlot, Scale, Series};
use crate::rundir::RunDir;
use crate::tags::{HeadMetric, LayerMetric, Record, Scalar, Tag};
use anyhow::{Result, bail};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// Every tag `name` selects as one series, named by what it returns; the series in the order
/// of their tags' names (as TensorBoard lists them).
fn series(records: &[Record], name: &dyn Fn(&Tag) -> Option<String>) -> Vec<Series> {
    let mut by_tag: BTreeMap<String, Series> = BTreeMap::new();
    for r in records {
        for (tag, v) in &r.scalars {
            if let Some(n) = name(tag)
                && v.is_finite()
            {
                by_tag
                    .entry(tag.to_string())
                    .or_insert_with(|| Series {
                        name: n,
                        points: Vec::new(),
                        err: None,
                    })
                    .points
                    .push((r.step as f64, *v));
            }
        }
    }
    by_tag.into_values().collect()
}

/// A live head score (`heads/{name}/layer{ll}_head{hh}`) reduced over each layer's heads at
/// each step by `reduce`, one series per layer named `{name} L{l} ({what})`.
fn per_layer(
    records: &[Record],
    score: Score,
    reduce: fn(&[f64]) -> f64,
    what: &str,
) -> Vec<Series> {
    let mut by_layer: BTreeMap<usize, BTreeMap<u64, Vec<f64>>> = BTreeMap::new();
    for r in records {
        for (tag, v) in &r.scalars {
            if let Tag::Head(HeadMetric::Score(n), layer, _) = tag
                && n == score.name()
                && v.is_finite()
            {
                by_layer
                    .entry(*layer)
                    .or_default()
                    .entry(r.step)
                    .or_default()
                    .push(*v);
            }
        }
    }
    by_layer
        .into_iter()
        .map(|(l, steps)| Series {
            name: format!("{} L{l} ({what})", score.name()),
            points: steps
                .into_iter()
                .map(|(s, v)| (s as f64, reduce(&v)))
                .collect(),
            err: None,
        })
        .collect()
}

fn best(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::MIN, f64::max)
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn chart(path: &Path, title: &str, y: &str, series: &[Series], y_scale: Scale) -> Result<bool> {
    if series.is_empty() {
        return Ok(false);
    }
    let png = plot::lines(&LinePlot {
        title,
        x_label: "step",
        y_label: y,
        series,
        x_scale: Scale::Linear,
        y_scale,
        hlines: &[],
        vlines: &[],
        markers: false,
    })?;
    plot::save(path, &png)?;
    Ok(true)
}

/// Write a run's charts into `out` (usually `RUN/plots/`) and return the Markdown that links
/// them.
pub fn run_curves(run_dir: &Path, out: &Path) -> Result<String> {
    let records = read_metrics(&RunDir(run_dir).metrics())?;
    if records.is_empty() {
        bail!(
            "{}: no metrics.jsonl records (is it a run directory? a sweep directory holds sweep.json)",
            run_dir.display()
        );
    }
    let dir = out.to_path_buf();
    let name = run_dir
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    let mut md = format!("# Run `{name}`\n\n");
    let sink = series(&records, &|t| match t {
        Tag::SinkRate { eps, k: 1 } => Some(format!("ε = {eps}")),
        _ => None,
    });
    let mut losses = Vec::new();
    for (s, name) in [
        (Scalar::TrainLoss, "train"),
        (Scalar::ValLoss, "val"),
        (Scalar::ValLossUnchanged, "val_unchanged"),
        (Scalar::BbLossBigram, "bigram (val)"),
        (Scalar::BbLossCopy, "copy (val)"),
        (Scalar::RepeatLossFresh, "fresh (val)"),
        (Scalar::RepeatLossRepeated, "repeated (val)"),
    ] {
        losses.extend(series(&records, &|t| {
            (*t == Tag::Run(s)).then(|| name.to_string())
        }));
    }
    let mut drain = series(&records, &|t| match t {
        Tag::Head(HeadMetric::ValueDrain, l, h) => Some(format!("drain L{l:02} H{h:02}")),
        _ => None,
    });
    drain.extend(series(&records, &|t| match t {
        Tag::Layer(LayerMetric::NormRatio, l) => Some(format!("‖h₁‖/‖h‖ L{l:02}")),
        _ => None,
    }));
    let heads = series(&records, &|t| match t {
        Tag::Head(HeadMetric::ImportanceFirst, l, h) => Some(format!("L{l:02} H{h:02}")),
        _ => None,
    });
    // heads forming: each layer's best previous-token and induction head, beside Sink₁ / 100
    let mut forming = per_layer(&records, Score::Previous, best, "best head");
    forming.extend(per_layer(&records, Score::Induction, best, "best head"));
    forming.extend(per_layer(&records, Score::Alpha1, mean, "mean over heads"));
    if !forming.is_empty() {
        let headline = format!(
            "ε = {}",
            crate::metrics::eps_name(crate::metrics::HEADLINE_EPS)
        );
        if let Some(s) = sink.iter().find(|s| s.name == headline) {
            forming.push(Series {
                name: format!("Sink₁ / 100 ({headline})"),
                points: s.points.iter().map(|&(x, y)| (x, y / 100.0)).collect(),
                err: None,
            });
        }
    }
    let charts = [
        (
            "sink1.png",
            "Sink₁: % of (sequence, head) pairs with α₁ > ε",
            "Sink₁ (%)",
            &sink,
            Scale::Linear,
        ),
        (
            "heads.png",
            "attention importance of token 1, per head",
            "α₁",
            &heads,
            Scale::Linear,
        ),
        (
            "heads_forming.png",
            "heads forming (repeat probe): best previous / induction head, mean α₁; the sink",
            "score",
            &forming,
            Scale::Linear,
        ),
        ("loss.png", "loss", "nats per token", &losses, Scale::Linear),
        (
            "drain.png",
            "value drain per head; massive-activation ratio per layer",
            "ratio",
            &drain,
            Scale::Log,
        ),
    ];
    for (file, title, y, s, y_scale) in charts {
        if chart(&dir.join(file), &format!("{name}: {title}"), y, s, y_scale)? {
            writeln!(md, "![{file}]({file})\n")?;
        }
    }
    // the curves at a few steps: the probe steps at 0, 1/8, 1/4, 1/2, 3/4 and the end
    let steps: Vec<u64> = sink
        .first()
        .map_or(vec![], |s| s.points.iter().map(|p| p.0 as u64).collect());
    if let Some(&last) = steps.last() {
        let mut picks: Vec<u64> = [0.0, 0.125, 0.25, 0.5, 0.75, 1.0]
            .iter()
            .map(|f| {
                let target = (last as f64 * f) as u64;
                *steps.iter().find(|&&s| s >= target).unwrap_or(&last)
            })
            .collect();
        picks.dedup();
        let at = |s: &Series, step: u64| {
            s.points
                .iter()
                .find(|p| p.0 as u64 == step)
                .map_or("–".to_string(), |p| format!("{:.3}", p.1))
        };
        let mut cols: Vec<&Series> = sink.iter().collect();
        cols.extend(losses.iter().filter(|s| s.name != "train"));
        cols.extend(drain.iter());
        cols.extend(forming.iter().filter(|s| !s.name.starts_with("Sink")));
        writeln!(
            md,
            "| step | {} |",
            cols.iter()
                .map(|s| s.name.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        )?;
        writeln!(md, "|{}|", vec!["---"; cols.len() + 1].join("|"))?;
        for step in picks {
            let cells: Vec<String> = cols.iter().map(|s| at(s, step)).collect();
            writeln!(md, "| {step} | {} |", cells.join(" | "))?;
        }
    }
    std::fs::write(dir.join("curves.md"), &md)?;
    Ok(md)
}
