//! `sinklab report SWEEP_DIR`: one table and a few plots for a whole sweep.
//!
//! Per run (from its `metrics.jsonl`): the final Sink₁ (`sink/rate_eps{ε}/pos01`), the final
//! slot Sink₁* (`sink/slot_rate_eps{ε}`, models with a slot), the final validation loss, the
//! final norm ratio (largest `act/norm_ratio/layer*` of the last probe), and the emergence step:
//! the first probe step at which Sink₁ exceeds `threshold` percent (None: never); the final slot
//! mass (mean `sink/slot_mass/layer*`), Bondarenko et al.'s outlier numbers (kurtosis
//! `act/kurtosis`, max |h| `act/m_act`) and the secondary-sink count (`sink/secondary_count`,
//! Wong et al.; src/metrics/). Runs that
//! share every axis value (they differ in seed) form a setting; the table gives mean ± sample
//! standard deviation over the seeds that finished, and the emergence step as the median of
//! the seeds that crossed, with how many did.
//!
//! Writes `report.md`, `report.csv`, `sink1_vs_AXIS.png` (final Sink₁ against each axis with
//! error bars; one line per combination of the other axes), `emergence.png` (Sink₁ against
//! step per setting, mean over seeds) and `val_loss.png` (validation loss against step per
//! setting, mean ± sample std over seeds).

mod curves;
mod run;
use crate::rundir::RunDir;
pub use curves::run_curves;
use run::read_metrics;
pub use run::{RunResult, run_result};

use crate::plot::{self, Bars, LinePlot, Scale, Series};
use crate::sweep::{self, Plan};
use anyhow::{Context, Result};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

/// The median of sorted steps (the mean of the middle two for an even count).
fn median_step(sorted: &[u64]) -> Option<f64> {
    let k = sorted.len();
    (k > 0).then(|| {
        if k % 2 == 1 {
            sorted[k / 2] as f64
        } else {
            (sorted[k / 2 - 1] + sorted[k / 2]) as f64 / 2.0
        }
    })
}

/// `metrics.probe_len` of a run's experiment file (the probe length T its sink metrics use).
fn probe_len(plan_file: &Path) -> Option<usize> {
    let text = std::fs::read_to_string(plan_file).ok()?;
    let exp = crate::config::from_str(&plan_file.display().to_string(), &text).ok()?;
    Some(exp.metrics.probe_len)
}

/// Mean and sample standard deviation (NaN for fewer than two values).
pub fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    if xs.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let m = xs.iter().sum::<f64>() / n;
    let sd = if xs.len() > 1 {
        (xs.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
    } else {
        f64::NAN
    };
    (m, sd)
}

fn pm(v: (f64, f64), digits: usize) -> String {
    match v {
        (m, _) if m.is_nan() => "–".into(),
        (m, s) if s.is_nan() => format!("{m:.digits$}"),
        (m, s) => format!("{m:.digits$} ± {s:.digits$}"),
    }
}

/// One setting (runs equal up to the seed).
#[derive(Debug, Clone, Serialize)]
pub struct Setting {
    pub values: BTreeMap<String, String>,
    pub runs: Vec<RunResult>,
}

impl Setting {
    fn finished(&self, f: impl Fn(&RunResult) -> Option<f64>) -> Vec<f64> {
        self.runs
            .iter()
            .filter(|r| r.state == "done")
            .filter_map(f)
            .collect()
    }
    pub fn sink1(&self) -> (f64, f64) {
        mean_std(&self.finished(|r| r.sink1))
    }
    /// The position k with the largest mean final Sink_k over the finished seeds (the smallest
    /// such k on ties), with mean ± std of Sink_k there. None when no finished run recorded any.
    pub fn top_sink(&self) -> Option<(usize, (f64, f64))> {
        let n = self
            .runs
            .iter()
            .filter(|r| r.state == "done")
            .map(|r| r.sink_k.len())
            .min()?;
        (0..n)
            .map(|k| {
                (
                    k + 1,
                    mean_std(&self.finished(|r| r.sink_k.get(k).copied())),
                )
            })
            .fold(None, |best: Option<(usize, (f64, f64))>, cur| match best {
                Some(b) if b.1.0 >= cur.1.0 => Some(b),
                _ => Some(cur),
            })
    }
}

/// Build the report of the sweep directory `dir` in `out` (usually `dir` itself): `report.md`,
/// `report.csv`, `report.json` and the plots; returns the Markdown.
pub fn report(dir: &Path, out: &Path, eps: f64, threshold: f64) -> Result<String> {
    let plan = sweep::read_plan(dir)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let eps_s = crate::metrics::eps_name(eps);
    let settings = collect_settings(&plan, &eps_s, threshold);
    check_eps_recorded(&plan, &settings, eps, &eps_s, dir)?;
    let axes: Vec<(String, String)> = plan
        .axes
        .iter()
        .map(|(p, l, _)| (p.clone(), l.clone()))
        .collect();
    // F-Attn of uniform causal attention at the runs' probe lengths (the floor F-Attn is read
    // against).
    let uniform: std::collections::BTreeSet<String> = plan
        .runs
        .iter()
        .filter_map(|r| probe_len(&plan.dir.join("plans").join(format!("{}.toml", r.name))))
        .map(|t| {
            format!(
                "{:.2} at T = {t}",
                100.0 * crate::metrics::uniform_first_mass(t)
            )
        })
        .collect();
    let uniform = if uniform.is_empty() {
        "?".to_string()
    } else {
        uniform.into_iter().collect::<Vec<_>>().join(", ")
    };
    let (mut md, csv) = tables(&plan, &settings, &axes, &eps_s, threshold, &uniform)?;
    plots(out, &plan, &settings, &axes, &eps_s, threshold, &mut md)?;
    std::fs::write(out.join("report.md"), &md)
        .with_context(|| format!("writing {}", out.join("report.md").display()))?;
    std::fs::write(out.join("report.csv"), &csv)?;
    std::fs::write(
        out.join("report.json"),
        serde_json::to_string_pretty(&settings)?,
    )?;
    Ok(md)
}

/// Runs grouped into settings (equal up to the seed), each run summarised.
fn collect_settings(plan: &Plan, eps_s: &str, threshold: f64) -> Vec<Setting> {
    let mut settings: Vec<Setting> = Vec::new();
    for run in &plan.runs {
        let r = run_result(plan, run, eps_s, threshold);
        match settings.iter_mut().find(|s| s.values == run.values) {
            Some(s) => s.runs.push(r),
            None => settings.push(Setting {
                values: run.values.clone(),
                runs: vec![r],
            }),
        }
    }
    settings
}

/// An ε no run recorded would give an empty table: say which ones exist instead.
fn check_eps_recorded(
    plan: &Plan,
    settings: &[Setting],
    eps: f64,
    eps_s: &str,
    dir: &Path,
) -> Result<()> {
    let any_records = settings
        .iter()
        .flat_map(|s| &s.runs)
        .any(|r| r.steps.is_some());
    if any_records
        && settings
            .iter()
            .flat_map(|s| &s.runs)
            .all(|r| r.curve.is_empty())
    {
        let mut recorded = std::collections::BTreeSet::new();
        for run in &plan.runs {
            let records =
                read_metrics(&RunDir(&plan.dir.join(&run.name)).metrics()).unwrap_or_default();
            for r in records {
                for t in r.scalars.into_keys() {
                    if let crate::tags::Tag::SinkRate { eps, k: 1 } = t {
                        recorded.insert(eps);
                    }
                }
            }
        }
        anyhow::bail!(
            "--eps {eps}: no run of {} recorded Sink1 at ε = {eps_s}; recorded ε: {}",
            dir.display(),
            recorded.into_iter().collect::<Vec<_>>().join(", ")
        );
    }
    Ok(())
}

/// `label=value, …` of a setting.
fn label_of(axes: &[(String, String)], s: &Setting) -> String {
    axes.iter()
        .map(|(p, l)| {
            format!(
                "{l}={}",
                s.values.get(p).map_or("?".into(), |v| shown(p, v))
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Markdown table (with its preamble and the unfinished runs) and the CSV.
fn tables(
    plan: &Plan,
    settings: &[Setting],
    axes: &[(String, String)],
    eps_s: &str,
    threshold: f64,
    uniform: &str,
) -> Result<(String, String)> {
    // Markdown and CSV.
    let sink1_tag = crate::tags::Tag::sink1(eps_s);
    let slot_tag = crate::tags::Tag::slot_rate(eps_s);
    let mut md = String::new();
    let mut csv = String::new();
    writeln!(
        md,
        "# Sweep `{}`\n\nFile `{}`; {} runs ({} settings × seeds {:?}, {:?}); directory `{}` \
         (`tensorboard --logdir {}` shows every run side by side).\n\nFinal values over the \
         seeds that finished: mean ± sample std. Sink₁ = `{sink1_tag}` (%), slot \
         Sink₁* = `{slot_tag}` (%), top Sink_k = the largest mean Sink_k over \
         the probed positions k (@k), F-Attn = mean attention on the first token (%; uniform causal \
         attention gives H_T/T = {uniform}), norm ratio = largest ‖h₁‖/mean‖h_t‖ over \
         layers; value drain = smallest ‖v₁‖/mean‖v_t‖ over heads; emergence = first probe step \
         with Sink₁ > {threshold}% (median over the seeds that crossed, and how many did); loss \
         drop = first evaluation step at which the validation loss has covered half of its drop \
         (median); slot mass = attention on the slot (or the unused share of a row) averaged \
         over layers (%); kurtosis = Bondarenko et al.'s kurtosis of the block outputs averaged \
         over layers; max |h| = the largest |activation| of any block output; secondary sinks = \
         keys after the first with importance > ε per (layer, sequence, head).\n",
        plan.name,
        plan.file.display(),
        plan.runs.len(),
        settings.len(),
        plan.seeds,
        plan.combine,
        plan.dir.display(),
        plan.dir.display()
    )?;
    let mut header: Vec<String> = axes.iter().map(|(_, l)| l.clone()).collect();
    header.extend(
        [
            "done",
            "Sink₁ (%)",
            "slot Sink₁* (%)",
            "top Sink_k (%) @k",
            &format!("F-Attn (%; uniform {uniform})"),
            "val loss",
            "norm ratio",
            "value drain",
            "emergence step",
            "loss-drop step",
            "slot mass (%)",
            "kurtosis",
            "max |h|",
            "secondary sinks",
        ]
        .map(String::from),
    );
    let secs: Vec<f64> = settings
        .iter()
        .flat_map(|s| &s.runs)
        .filter(|r| r.state == "done")
        .filter_map(|r| r.seconds)
        .collect();
    if !secs.is_empty() {
        writeln!(
            md,
            "Run time (wall clock of each finished run's last attempt): {:.0}–{:.0} s each, {:.1} min summed over runs.\n",
            secs.iter().copied().fold(f64::INFINITY, f64::min),
            secs.iter().copied().fold(0.0, f64::max),
            secs.iter().sum::<f64>() / 60.0
        )?;
    }
    writeln!(md, "| {} |", header.join(" | "))?;
    writeln!(md, "|{}|", vec!["---"; header.len()].join("|"))?;
    let mut csv_header: Vec<String> = axes.iter().map(|(_, l)| l.clone()).collect();
    csv_header.extend(
        [
            "seeds_done",
            "seeds",
            "sink1_mean",
            "sink1_std",
            "slot_sink1_mean",
            "slot_sink1_std",
            "top_k",
            "top_sink_mean",
            "top_sink_std",
            "first_mass_mean",
            "first_mass_std",
            "val_loss_mean",
            "val_loss_std",
            "norm_ratio_mean",
            "norm_ratio_std",
            "emergence_step_median",
            "emerged_seeds",
            "value_drain_mean",
            "value_drain_std",
            "loss_drop_step_median",
            "slot_mass_mean",
            "slot_mass_std",
            "kurtosis_mean",
            "kurtosis_std",
            "max_abs_mean",
            "max_abs_std",
            "secondary_mean",
            "secondary_std",
        ]
        .map(String::from),
    );
    writeln!(csv, "{}", csv_header.join(","))?;
    for s in settings {
        let done = s.runs.iter().filter(|r| r.state == "done").count();
        let sink = s.sink1();
        let slot = mean_std(&s.finished(|r| r.slot_sink1));
        let top = s.top_sink();
        let mass = mean_std(&s.finished(|r| r.first_mass));
        let val = mean_std(&s.finished(|r| r.val_loss));
        let norm = mean_std(&s.finished(|r| r.norm_ratio));
        let steps = |f: fn(&RunResult) -> Option<u64>| -> Vec<u64> {
            let mut v: Vec<u64> = s
                .runs
                .iter()
                .filter(|r| r.state == "done")
                .filter_map(f)
                .collect();
            v.sort_unstable();
            v
        };
        let em = steps(|r| r.emergence_step);
        let median = median_step(&em);
        let drop_median = median_step(&steps(|r| r.loss_drop_step));
        let drain = mean_std(&s.finished(|r| r.value_drain));
        let slot_mass = mean_std(&s.finished(|r| r.slot_mass));
        let kurt = mean_std(&s.finished(|r| r.kurtosis));
        let max_abs = mean_std(&s.finished(|r| r.max_abs));
        let secondary = mean_std(&s.finished(|r| r.secondary));
        let emergence = match median {
            Some(m) => format!("{m} ({}/{done})", em.len()),
            None => format!("never (0/{done})"),
        };
        let mut cells: Vec<String> = axes
            .iter()
            .map(|(p, _)| s.values.get(p).map_or(String::new(), |v| shown(p, v)))
            .collect();
        cells.extend([
            format!("{done}/{}", s.runs.len()),
            pm(sink, 1),
            pm(slot, 1),
            top.map_or("–".into(), |(k, v)| format!("{} @{k}", pm(v, 1))),
            pm(mass, 1),
            pm(val, 3),
            pm(norm, 2),
            pm(drain, 3),
            emergence,
            drop_median.map_or("–".into(), |m| m.to_string()),
            pm(slot_mass, 1),
            pm(kurt, 2),
            pm(max_abs, 2),
            pm(secondary, 3),
        ]);
        writeln!(md, "| {} |", cells.join(" | "))?;
        let q = |x: &String| format!("\"{}\"", x.replace('"', "'"));
        let mut row: Vec<String> = axes
            .iter()
            .map(|(p, _)| q(&s.values.get(p).cloned().unwrap_or_default()))
            .collect();
        let f = |x: f64| {
            if x.is_nan() {
                String::new()
            } else {
                format!("{x}")
            }
        };
        row.extend([
            done.to_string(),
            s.runs.len().to_string(),
            f(sink.0),
            f(sink.1),
            f(slot.0),
            f(slot.1),
            top.map_or(String::new(), |t| t.0.to_string()),
            f(top.map_or(f64::NAN, |t| t.1.0)),
            f(top.map_or(f64::NAN, |t| t.1.1)),
            f(mass.0),
            f(mass.1),
            f(val.0),
            f(val.1),
            f(norm.0),
            f(norm.1),
            median.map_or(String::new(), |m| m.to_string()),
            em.len().to_string(),
            f(drain.0),
            f(drain.1),
            drop_median.map_or(String::new(), |m| m.to_string()),
            f(slot_mass.0),
            f(slot_mass.1),
            f(kurt.0),
            f(kurt.1),
            f(max_abs.0),
            f(max_abs.1),
            f(secondary.0),
            f(secondary.1),
        ]);
        writeln!(csv, "{}", row.join(","))?;
    }
    let failed: Vec<&RunResult> = settings
        .iter()
        .flat_map(|s| &s.runs)
        .filter(|r| r.state != "done")
        .collect();
    if !failed.is_empty() {
        writeln!(md, "\n## Runs that did not finish\n")?;
        for r in failed {
            writeln!(
                md,
                "- `{}`: {}{}",
                r.name,
                r.state,
                r.error.as_ref().map_or(String::new(), |e| format!(
                    " — `{}`",
                    e.lines().last().unwrap_or("").replace('`', "'")
                ))
            )?;
        }
    }
    Ok((md, csv))
}

/// `sink1_vs_AXIS.png` for every axis and `emergence.png`, linked from the Markdown.
fn plots(
    dir: &Path,
    plan: &Plan,
    settings: &[Setting],
    axes: &[(String, String)],
    eps_s: &str,
    threshold: f64,
    md: &mut String,
) -> Result<()> {
    // Plots.
    writeln!(md, "\n## Plots\n")?;
    for (ai, (path, label)) in axes.iter().enumerate() {
        let numeric: Option<Vec<f64>> = plan.axes[ai]
            .2
            .iter()
            .map(|v| v.parse::<f64>().ok())
            .collect();
        // Values spanning decades that include 0 (weight decay 0 … 5) fit neither a linear nor
        // a log axis: draw them as categories.
        let numeric = numeric.filter(|xs| {
            let pos: Vec<f64> = xs.iter().copied().filter(|x| *x > 0.0).collect();
            let span = pos.iter().copied().fold(0.0, f64::max)
                / pos.iter().copied().fold(f64::INFINITY, f64::min);
            !(xs.contains(&0.0) && span >= 50.0)
        });
        let file = format!("sink1_vs_{}.png", sanitize(label));
        let title = format!("final Sink (ε = {eps_s}) against {label}, mean ± std over seeds");
        let png = match numeric {
            Some(xs) => {
                // One line per combination of the other axes.
                let mut lines: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
                let mut tops: BTreeMap<String, Vec<(f64, f64, f64)>> = BTreeMap::new();
                let elsewhere = settings
                    .iter()
                    .any(|s| s.top_sink().is_some_and(|t| t.0 != 1 && t.1.0 > threshold));
                for s in settings {
                    // Zipped axes move together: one line through every setting.
                    let others: Vec<String> = axes
                        .iter()
                        .filter(|(p, _)| p != path && plan.combine == sweep::Combine::Grid)
                        .map(|(p, l)| {
                            format!(
                                "{l}={}",
                                s.values.get(p).map_or(String::new(), |v| shown(p, v))
                            )
                        })
                        .collect();
                    let x: f64 = s
                        .values
                        .get(path)
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(f64::NAN);
                    let (m, sd) = s.sink1();
                    let line = if others.is_empty() {
                        "Sink₁".to_string()
                    } else {
                        others.join(", ")
                    };
                    if let Some((_, (tm, tsd))) = s.top_sink().filter(|_| elsewhere) {
                        tops.entry(if others.is_empty() {
                            "top Sink_k".to_string()
                        } else {
                            format!("{line}: top Sink_k")
                        })
                        .or_default()
                        .push((x, tm, tsd));
                    }
                    lines.entry(line).or_default().push((x, m, sd));
                }
                // A second line when the largest sink sits elsewhere than position 1 and above
                // the threshold in some setting (a fixed token at p, random first tokens).
                let series: Vec<Series> = lines
                    .into_iter()
                    .chain(tops)
                    .map(|(name, mut pts)| {
                        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
                        Series {
                            name,
                            points: pts.iter().map(|p| (p.0, p.1)).collect(),
                            err: Some(pts.iter().map(|p| p.2).collect()),
                        }
                    })
                    .collect();
                let pos: Vec<f64> = xs.iter().copied().filter(|x| *x > 0.0).collect();
                let log_x = pos.len() == xs.len()
                    && pos.iter().copied().fold(f64::INFINITY, f64::min) > 0.0
                    && pos.iter().copied().fold(0.0, f64::max)
                        / pos.iter().copied().fold(f64::INFINITY, f64::min)
                        >= 50.0;
                plot::lines(&LinePlot {
                    title: &title,
                    x_label: label,
                    y_label: "Sink (%)",
                    series: &series,
                    x_scale: if log_x { Scale::Log } else { Scale::Linear },
                    y_scale: Scale::Linear,
                    hlines: &[],
                    vlines: &[],
                    markers: true,
                })
            }
            None => {
                // One axis: the value alone; several: every axis as label=value.
                let labels: Vec<String> = settings
                    .iter()
                    .map(|s| {
                        let short = |p: &String| {
                            s.values.get(p).map_or(String::new(), |v| match p.as_str() {
                                "base" => shown(p, v),
                                _ => short_value(v),
                            })
                        };
                        if axes.len() == 1 {
                            short(path)
                        } else {
                            axes.iter()
                                .map(|(p, l)| format!("{l}={}", short(p)))
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    })
                    .collect();
                let stats: Vec<(f64, f64)> = settings.iter().map(Setting::sink1).collect();
                let values: Vec<f64> = stats.iter().map(|s| s.0).collect();
                let err: Vec<f64> = stats
                    .iter()
                    .map(|s| if s.1.is_nan() { 0.0 } else { s.1 })
                    .collect();
                plot::bars(&Bars {
                    title: &title,
                    x_label: label,
                    y_label: "Sink₁ (%)",
                    labels: &labels,
                    values: &values,
                    err: Some(&err),
                    highlight: &[],
                })
            }
        };
        match png {
            Ok(png) => {
                plot::save(&dir.join(&file), &png)?;
                writeln!(md, "![{file}]({file})")?;
            }
            Err(e) => writeln!(md, "- {file}: not drawn ({e})")?,
        }
    }
    let series = seed_means(settings, axes, |r| &r.curve, false);
    match plot::lines(&LinePlot {
        title: &format!("sink emergence: Sink₁ (ε = {eps_s}) against step, mean over seeds"),
        x_label: "step",
        y_label: "Sink₁ (%)",
        series: &series,
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        hlines: &[(format!("threshold {threshold}%"), threshold)],
        vlines: &[],
        markers: false,
    }) {
        Ok(png) => {
            plot::save(&dir.join("emergence.png"), &png)?;
            writeln!(md, "\n![emergence.png](emergence.png)")?;
        }
        Err(e) => writeln!(md, "- emergence.png: not drawn ({e})")?,
    }
    let series = seed_means(settings, axes, |r| &r.val_curve, true);
    match plot::lines(&LinePlot {
        title: "validation loss against step, mean ± std over seeds",
        x_label: "step",
        y_label: "validation loss (nats per token)",
        series: &series,
        x_scale: Scale::Linear,
        y_scale: Scale::Linear,
        hlines: &[],
        vlines: &[],
        markers: true,
    }) {
        Ok(png) => {
            plot::save(&dir.join("val_loss.png"), &png)?;
            writeln!(md, "\n![val_loss.png](val_loss.png)")?;
        }
        Err(e) => writeln!(md, "- val_loss.png: not drawn ({e})")?,
    }
    Ok(())
}

/// One line per setting: the mean over its seeds of a per-step curve at every step they
/// share (with the sample std as error bars when `with_std` and two or more seeds have it).
fn seed_means(
    settings: &[Setting],
    axes: &[(String, String)],
    curve: fn(&RunResult) -> &Vec<(u64, f64)>,
    with_std: bool,
) -> Vec<Series> {
    settings
        .iter()
        .map(|s| {
            let mut by_step: BTreeMap<u64, Vec<f64>> = BTreeMap::new();
            for r in &s.runs {
                for &(st, v) in curve(r) {
                    by_step.entry(st).or_default().push(v);
                }
            }
            let stats: Vec<(f64, (f64, f64))> = by_step
                .into_iter()
                .map(|(st, v)| (st as f64, mean_std(&v)))
                .collect();
            let multi = with_std && s.runs.iter().filter(|r| !curve(r).is_empty()).count() > 1;
            Series {
                name: label_of(axes, s),
                points: stats.iter().map(|(x, (m, _))| (*x, *m)).collect(),
                err: multi.then(|| {
                    stats
                        .iter()
                        .map(|(_, (_, sd))| if sd.is_finite() { *sd } else { 0.0 })
                        .collect()
                }),
            }
        })
        .collect()
}

/// An axis value as the Markdown table and the plots show it: an experiment file of the `base`
/// axis by its name (`sas` for `"../../skipless/sas.toml"`), as in run names; others as written.
fn shown(path: &str, v: &str) -> String {
    match path {
        "base" => Path::new(v.trim_matches('"'))
            .file_stem()
            .map_or_else(|| v.to_string(), |f| f.to_string_lossy().into_owned()),
        _ => v.to_string(),
    }
}

/// A value as written in TOML (`{ kind = "rope", base = 500.0 }`) in its run-name form
/// (`rope-base500.0`); the text itself if it does not parse.
fn short_value(v: &str) -> String {
    toml::from_str::<toml::Table>(&format!("v = {v}"))
        .ok()
        .and_then(|t| t.get("v").map(sweep::value_label))
        .unwrap_or_else(|| v.to_string())
}

fn sanitize(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}
