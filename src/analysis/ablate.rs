//! `sinklab ablate` (docs/reference.md §11): which heads (or key/value groups) matter — every
//! unit ablated on its own (a Δmetric map per (layer, head)), or a named set against R
//! matched-random sets from the same layers — with the dormancy of each head on the same batch,
//! to ask whether sink heads matter. The metric is the loss, the KL from the clean distribution,
//! or, on `--task prompts`, the logit difference `sinklab patch` reads.

use super::Output;
use super::tasks::{Task, task_batch};
use crate::eval::heads::head_scores;
use crate::heads::{Measure, Thresholds};
use crate::intervene::ablate::{Ablation, ablate_sets, matched_random, percentile, scan, sites};
use crate::intervene::{AblationKind, Metric, Positions, Prepared, Scoring, Unit};
use crate::metrics::Proxy;
use crate::plot::{self, Bars, Heatmap};
use crate::run::OpenRun;
use anyhow::{Result, bail};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// Which units `sinklab ablate` ablates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Units {
    /// Every query head on its own.
    AllHeads,
    /// Every key/value group on its own.
    AllGroups,
    /// A named set, ablated at once, against matched-random controls.
    Named { units: Vec<Unit> },
}

/// The reference set of a mean ablation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MeanFrom {
    /// The evaluated batch itself.
    Batch,
    /// Validation windows of the same length.
    Natural,
    /// A second draw of the task (another seed).
    Task,
}

/// Options of `sinklab ablate`.
#[derive(Debug, Clone)]
pub struct AblateOptions {
    pub kind: AblationKind,
    pub units: Units,
    pub metric: Metric,
    pub task: Task,
    pub positions: Positions,
    pub sequences: usize,
    pub mean_from: MeanFrom,
    /// Matched-random control sets of a named set.
    pub controls: usize,
    pub seed: u64,
    pub dest: super::Destination,
}

/// The reference set as used (written into the report).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MeanReference {
    pub from: MeanFrom,
    pub sequences: usize,
    pub len: usize,
    pub seed: u64,
}

/// A named set against its controls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Named {
    pub units: Vec<String>,
    pub delta: f64,
    /// Δ of each matched-random set, in draw order.
    pub controls: Vec<f64>,
    pub control_sets: Vec<Vec<String>>,
    /// 100 · (#controls below + ½ #equal) / #controls.
    pub percentile: f64,
    /// How many distinct matched-random sets exist (saturating at 2⁶⁴ − 1); the controls are
    /// distinct sets (never one drawn twice).
    #[serde(default)]
    pub distinct_sets: u64,
    /// Every distinct matched set is a control: the percentile is over the exact distribution
    /// (when there are no more than `--controls` of them), not a sample.
    #[serde(default)]
    pub exact: bool,
    pub seed: u64,
    /// With `--task bb`: the same on the bigram targets.
    pub delta_bigram: Option<f64>,
}

/// `--task bb`: the copy metric split by trigger (the query groups: trigger i's targets are
/// those whose input is trigger i; together they are the copy targets).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerDeltas {
    /// `[trigger]` the copy offset g_i.
    pub offsets: Vec<usize>,
    /// `[trigger]` the targets the metric is read at.
    pub targets: Vec<usize>,
    /// `[trigger]` the unablated metric.
    pub baseline: Vec<f64>,
    /// `[trigger][layer][head or group]` Δ, when every unit is scanned.
    pub scan: Option<Vec<Vec<Vec<f64>>>>,
    /// `[trigger]` Δ of the named set.
    pub named: Option<Vec<f64>>,
}

/// Heads grouped by dormancy on the task batch, and how much their ablation moved the metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DormancyGroup {
    pub heads: usize,
    /// None for an empty group.
    pub mean_delta: Option<f64>,
    pub median_delta: Option<f64>,
    pub max_delta: Option<f64>,
}

/// Each head's dormancy on the task batch and the scan split by it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Dormancy {
    /// `[layer][head]` α₁ and slot mass summed (the sink share).
    pub sink_share: Vec<Vec<f64>>,
    pub ahon_ln: Vec<Vec<f64>>,
    /// Dormant: [`Thresholds::dormant`] (the definition `sinklab heads` classifies by).
    pub thresholds: Thresholds,
    pub dormant: DormancyGroup,
    pub active: DormancyGroup,
    /// Spearman rank correlation of the sink share with Δ over every head (None when either
    /// is constant).
    pub spearman_sink_share_delta: Option<f64>,
}

/// What `sinklab ablate` found (its report, `ablate_….json`: [`super::names::ablate`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AblateReport {
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub task: Task,
    pub sequences: usize,
    pub len: usize,
    pub kind: AblationKind,
    pub metric: Metric,
    pub positions: Positions,
    /// The mean-ablation reference set.
    pub mean_from: Option<MeanReference>,
    /// Sequence b takes sequence perm[b]'s values (resample).
    pub resample_perm: Option<Vec<usize>>,
    /// The unablated metric (copy targets with `--task bb`).
    pub baseline: f64,
    pub baseline_bigram: Option<f64>,
    /// `[layer][head or group]` Δ = ablated − baseline, when every unit is scanned.
    pub scan: Option<Vec<Vec<f64>>>,
    pub scan_bigram: Option<Vec<Vec<f64>>>,
    pub groups: bool,
    pub named: Option<Named>,
    /// With `--task bb`: the copy targets of each trigger measured apart.
    pub triggers: Option<TriggerDeltas>,
    pub dormancy: Option<Dormancy>,
    pub seconds: f64,
    pub files: Vec<String>,
}

fn stats(v: &[f64]) -> DormancyGroup {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    DormancyGroup {
        heads: v.len(),
        mean_delta: (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64),
        median_delta: (!s.is_empty()).then(|| crate::metrics::median(s.clone())),
        max_delta: s.last().copied(),
    }
}

/// Ranks (average ranks for ties), 1-based.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < idx.len() {
        let mut j = i;
        while j + 1 < idx.len() && v[idx[j + 1]] == v[idx[i]] {
            j += 1;
        }
        for k in i..=j {
            r[idx[k]] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let (ma, mb) = (ra.iter().sum::<f64>() / n, rb.iter().sum::<f64>() / n);
    let cov: f64 = ra.iter().zip(&rb).map(|(x, y)| (x - ma) * (y - mb)).sum();
    let va: f64 = ra.iter().map(|x| (x - ma).powi(2)).sum();
    let vb: f64 = rb.iter().map(|y| (y - mb).powi(2)).sum();
    cov / (va * vb).sqrt()
}

/// Everything `sinklab ablate` needs before a model pass, every refusal made: the report's
/// name claimed, the task's batch, the mean-ablation reference set, the target masks of each
/// pass.
pub struct AblatePlan {
    pub claim: super::Claim,
    pub task: super::tasks::TaskBatch,
    /// `--mean-from natural | task`: the reference batch (None: the batch itself, or no mean).
    pub reference: Option<crate::data::Batch>,
    pub mean_ref: Option<MeanReference>,
    /// The copy targets of each Bigram-Backcopy trigger (empty on other tasks).
    pub targets: Vec<usize>,
}

/// One pass's result: the baseline metric and the scan or the named set's Δ.
struct Pass {
    baseline: f64,
    scan: Option<Vec<Vec<f64>>>,
    named: Option<Named>,
    perm: Vec<usize>,
}

/// Run `sinklab ablate`: [`plan`] (every refusal), [`compute`] (the typed report, no files),
/// [`render`] (the Δ map or the control chart and the report,
/// `ablate_<task>_<units>_<kind>_<metric>.json`).
pub fn ablate(run: &OpenRun, o: &AblateOptions, log: &mut dyn FnMut(&str)) -> Result<AblateReport> {
    let clock = std::time::Instant::now();
    let plan = plan(run, o)?;
    let mut report = compute(run, o, &plan, log)?;
    report.seconds = clock.elapsed().as_secs_f64();
    render(run, plan.claim, report)
}

/// The options checked against the run and the task drawn: every refusal of `ablate`.
pub fn plan(run: &OpenRun, o: &AblateOptions) -> Result<AblatePlan> {
    let claim = o.dest.claim(run, super::names::ablate(o))?;
    let exp = &run.exp;
    let is_prompts = matches!(o.task, Task::Prompts { .. });
    if o.metric == Metric::LogitDiff && !is_prompts {
        bail!(
            "--metric logit-diff needs an answer and a wrong answer per prompt: use --task prompts \
             FILE (the JSON Lines file of sinklab patch --prompts), or --metric loss | kl here"
        );
    }
    let task = task_batch(run, &o.task, o.sequences, o.seed)?;
    let batch = &task.batch;
    if o.kind == AblationKind::Resample && batch.batch < 2 {
        bail!(
            "--kind resample takes each sequence's activations from another sequence: it needs at \
             least 2 sequences, the task has {}",
            batch.batch
        );
    }
    // The reference set of a mean ablation.
    let (reference, mean_ref) = match (o.kind, o.mean_from) {
        (AblationKind::Mean, MeanFrom::Batch) => (
            None,
            Some(MeanReference {
                from: MeanFrom::Batch,
                sequences: batch.batch,
                len: batch.len,
                seed: o.seed,
            }),
        ),
        (AblationKind::Mean, from) => {
            let seed = o.seed.wrapping_add(1);
            let rb = match (&o.task, from) {
                (_, MeanFrom::Natural) => {
                    crate::data::validation_batch(&run.data, batch.batch, batch.len, exp.data.bos)?
                }
                // a prompts file has no second draw: its corrupted prompts are the other sample
                (Task::Prompts { file }, _) => super::tasks::file_pairs(run, file)?.corrupt,
                _ => task_batch(run, &o.task, o.sequences, seed)?.batch,
            };
            if rb.len != batch.len {
                bail!(
                    "the mean-ablation reference set has {} tokens per sequence, the task {}",
                    rb.len,
                    batch.len
                );
            }
            let r = MeanReference {
                from,
                sequences: rb.batch,
                len: rb.len,
                seed,
            };
            (Some(rb), Some(r))
        }
        (AblationKind::Zero | AblationKind::Resample | AblationKind::MoveToFirst, _) => {
            (None, None)
        }
    };
    let targets: Vec<usize> = task
        .by_trigger
        .iter()
        .map(|m| {
            weights(o, batch, Some(m))
                .iter()
                .filter(|&&w| w > 0.0)
                .count()
        })
        .collect();
    if let Some(i) = targets.iter().position(|&n| n == 0) {
        bail!(
            "--task bb: trigger {i} has no copy target among the {} positions of {} sequences; \
             raise --sequences or --len",
            serde_json::to_value(o.positions)?.as_str().unwrap_or(""),
            batch.batch
        );
    }
    Ok(AblatePlan {
        claim,
        task,
        reference,
        mean_ref,
        targets,
    })
}

/// The positions' weights of `batch`, restricted to `mask` (a pass's targets) when given.
fn weights(o: &AblateOptions, batch: &crate::data::Batch, mask: Option<&Vec<f32>>) -> Vec<f32> {
    let mut b = batch.clone();
    if let Some(m) = mask {
        b.loss_mask = m.clone();
    }
    o.positions.weights(&b)
}

/// The ablations of a plan: the typed report (its `files` empty, `seconds` 0; [`render`] and
/// [`ablate`] fill them). Writes nothing.
pub fn compute(
    run: &OpenRun,
    o: &AblateOptions,
    plan: &AblatePlan,
    log: &mut dyn FnMut(&str),
) -> Result<AblateReport> {
    let exp = &run.exp;
    let tb = &plan.task;
    let batch = &tb.batch;
    let scanned_units: Vec<Unit> = match &o.units {
        Units::AllHeads => vec![Unit::Head { layer: 0, head: 0 }],
        Units::AllGroups => vec![Unit::KvGroup { layer: 0, group: 0 }],
        Units::Named { units } => units.clone(),
    };
    let site_list = sites(o.kind, &scanned_units);
    let scoring = |mask| Scoring {
        metric: o.metric,
        weights: weights(o, batch, mask),
        answers: tb.answers.clone(),
    };
    log(&format!(
        "{} of {} tokens; {} ablation, metric {} at {} positions",
        crate::progress::count(batch.batch, "sequence", None),
        batch.len,
        serde_json::to_value(o.kind)?.as_str().unwrap_or(""),
        serde_json::to_value(o.metric)?.as_str().unwrap_or(""),
        serde_json::to_value(o.positions)?.as_str().unwrap_or("")
    ));
    let ref_prepared = match &plan.reference {
        Some(rb) => Some(Prepared::new(
            &run.model,
            rb,
            &site_list,
            scoring(None),
            &run.device,
        )?),
        None => None,
    };
    // The passes: the whole metric, or the copy, bigram and each trigger's copy targets.
    let masks: Vec<Option<&Vec<f32>>> = match &tb.split {
        Some((copy, bigram)) => [copy, bigram]
            .into_iter()
            .chain(&tb.by_trigger)
            .map(Some)
            .collect(),
        None => vec![None],
    };
    let mut passes = Vec::new();
    for mask in &masks {
        let p = Prepared::new(&run.model, batch, &site_list, scoring(*mask), &run.device)?;
        let ab = Ablation::new(o.kind, batch.batch, o.seed, ref_prepared.as_ref());
        passes.push(one_pass(run, o, &p, &ab, log)?);
    }
    let mut first = passes.remove(0);
    let second = (!passes.is_empty()).then(|| passes.remove(0));
    // what is left: one pass per trigger (`--task bb`)
    let triggers = (!passes.is_empty()).then(|| TriggerDeltas {
        offsets: super::tasks::trigger_offsets(exp).unwrap_or_default(),
        targets: plan.targets.clone(),
        baseline: passes.iter().map(|r| r.baseline).collect(),
        scan: passes.iter().map(|r| r.scan.clone()).collect(),
        named: passes
            .iter()
            .map(|r| r.named.as_ref().map(|n| n.delta))
            .collect(),
    });
    if let (
        Some(n),
        Some(Pass {
            named: Some(n2), ..
        }),
    ) = (first.named.as_mut(), &second)
    {
        n.delta_bigram = Some(n2.delta);
    }
    let dormancy = match (&o.units, &first.scan) {
        (Units::AllHeads, Some(delta)) => Some(dormancy(run, batch, delta)),
        _ => None,
    };
    Ok(AblateReport {
        run_dir: run.run_dir.clone(),
        checkpoint: run.checkpoint.clone(),
        step: run.state.step,
        task: o.task.clone(),
        sequences: batch.batch,
        len: batch.len,
        kind: o.kind,
        metric: o.metric,
        positions: o.positions,
        mean_from: plan.mean_ref.clone(),
        resample_perm: (o.kind == AblationKind::Resample).then(|| first.perm.clone()),
        baseline: first.baseline,
        baseline_bigram: second.as_ref().map(|s| s.baseline),
        scan: first.scan,
        scan_bigram: second.and_then(|s| s.scan),
        groups: matches!(o.units, Units::AllGroups),
        named: first.named,
        triggers,
        dormancy,
        seconds: 0.0,
        files: Vec::new(),
    })
}

/// One pass over the prepared batch: every unit on its own, or the named set and its controls.
fn one_pass(
    run: &OpenRun,
    o: &AblateOptions,
    p: &Prepared,
    ab: &Ablation,
    log: &mut dyn FnMut(&str),
) -> Result<Pass> {
    let cfg = &run.exp.model;
    let baseline = p.metric();
    let perm = ab.perm.clone();
    Ok(match &o.units {
        Units::AllHeads | Units::AllGroups => {
            let groups = matches!(o.units, Units::AllGroups);
            let bar = crate::progress::Progress::new(cfg.n_layers as u64, "ablation scan (layers)");
            let s = scan(p, ab, groups, &mut |_| bar.inc(1))?;
            bar.finish();
            let delta: Vec<Vec<f64>> = s
                .iter()
                .map(|r| r.iter().map(|x| x - baseline).collect())
                .collect();
            Pass {
                baseline,
                scan: Some(delta),
                named: None,
                perm,
            }
        }
        Units::Named { units } => {
            let per = match units[0] {
                Unit::Head { .. } => cfg.n_heads,
                Unit::KvGroup { .. } => cfg.kv_heads(),
            };
            let controls = matched_random(units, per, o.controls, o.seed)?;
            if controls.exact {
                log(&format!(
                    "controls: {} distinct matched-random sets exist; all of them are used \
                     (the exact distribution, not {} draws)",
                    controls.distinct, o.controls
                ));
            }
            let mut sets = vec![units.clone()];
            sets.extend(controls.sets.iter().cloned());
            let bar = crate::progress::Progress::new(sets.len() as u64, "named set and controls");
            let v = ablate_sets(p, ab, &sets, &mut |k| bar.inc(k as u64))?;
            bar.finish();
            let deltas: Vec<f64> = v.iter().map(|x| x - baseline).collect();
            let named = Named {
                units: units.iter().map(Unit::label).collect(),
                delta: deltas[0],
                percentile: percentile(deltas[0], &deltas[1..]),
                controls: deltas[1..].to_vec(),
                control_sets: controls
                    .sets
                    .iter()
                    .map(|s| s.iter().map(Unit::label).collect())
                    .collect(),
                distinct_sets: controls.distinct,
                exact: controls.exact,
                seed: o.seed,
                delta_bigram: None,
            };
            Pass {
                baseline,
                scan: None,
                named: Some(named),
                perm,
            }
        }
    })
}

/// Dormancy of each head on the same batch (head scans only): sink share and AHON-LN per head,
/// the Δ of dormant against active heads, and Spearman(sink share, Δ).
fn dormancy(run: &OpenRun, batch: &crate::data::Batch, delta: &[Vec<f64>]) -> Dormancy {
    let (exp, cfg) = (&run.exp, &run.exp.model);
    let proxy = Proxy::for_normaliser(&cfg.attention.normaliser);
    let scores = head_scores(
        &run.model,
        batch,
        exp.train.micro_batch.max(1),
        proxy,
        Measure::Primary,
        &run.device,
        &mut |_| {},
    );
    let th = Thresholds::default();
    // sink share = α₁ + slot mass, [layer][head]
    let share: Vec<Vec<f64>> = scores
        .iter()
        .map(|l| {
            l.alpha1
                .iter()
                .zip(&l.slot_mass)
                .map(|(a, m)| a + m)
                .collect()
        })
        .collect();
    let ahon: Vec<Vec<f64>> = scores.iter().map(|l| l.ahon_ln.clone()).collect();
    let (mut dorm, mut act) = (Vec::new(), Vec::new());
    for l in 0..cfg.n_layers {
        for h in 0..cfg.n_heads {
            if th.dormant(share[l][h], ahon[l][h]) {
                dorm.push(delta[l][h]);
            } else {
                act.push(delta[l][h]);
            }
        }
    }
    let flat_share: Vec<f64> = share.iter().flatten().copied().collect();
    let flat_delta: Vec<f64> = delta.iter().flatten().copied().collect();
    Dormancy {
        spearman_sink_share_delta: Some(spearman(&flat_share, &flat_delta))
            .filter(|r| r.is_finite()),
        sink_share: share,
        ahon_ln: ahon,
        thresholds: th,
        dormant: stats(&dorm),
        active: stats(&act),
    }
}

/// The figures (Δ maps, the control chart) and the report, under the plan's claimed name.
pub fn render(
    run: &OpenRun,
    claim: super::Claim,
    mut report: AblateReport,
) -> Result<AblateReport> {
    let mut out = Output::new(claim, run)?;
    let what = describe(&report);
    if let Some(s) = &report.scan {
        let png = delta_map(s, &format!("Δ {what}"), report.groups)?;
        let name = out.claim.figure("delta");
        out.png(&name, "ablate/delta_map", png)?;
    }
    if let Some(s) = &report.scan_bigram {
        let png = delta_map(s, &format!("Δ bigram loss, {what}"), report.groups)?;
        let name = out.claim.figure("delta_bigram");
        out.png(&name, "ablate/delta_bigram_map", png)?;
    }
    if let Some(n) = &report.named {
        let mut vals = n.controls.clone();
        vals.sort_by(f64::total_cmp);
        let mut labels: Vec<String> = (1..=vals.len()).map(|i| format!("control {i}")).collect();
        let at = vals.partition_point(|&x| x < n.delta);
        vals.insert(at, n.delta);
        labels.insert(at, n.units.join(" "));
        let highlight: Vec<bool> = (0..vals.len()).map(|i| i == at).collect();
        let png = plot::bars(&Bars {
            title: &format!(
                "Δ {what}: the named set (percentile {:.0}) against {} matched-random sets",
                n.percentile,
                n.controls.len()
            ),
            x_label: "set (sorted by Δ)",
            y_label: "Δ metric",
            labels: &labels,
            values: &vals,
            err: None,
            highlight: &highlight,
        })?;
        let name = out.claim.figure("controls");
        out.png(&name, "ablate/controls", png)?;
    }
    report.files = out.files.clone();
    report.files.push(out.claim.report());
    out.report(&report)?;
    Ok(report)
}

/// "loss (second-half positions), zero ablation, repeat task" and the like.
pub fn describe(r: &AblateReport) -> String {
    let metric = match r.metric {
        Metric::Loss => "loss",
        Metric::Kl => "KL(clean ‖ ablated)",
        Metric::LogitDiff => "logit difference",
    };
    let pos = match r.positions {
        Positions::All => "all positions",
        Positions::Last => "last position",
        Positions::SecondHalf => "second half",
    };
    let task = match &r.task {
        Task::Repeat { n, .. } => format!("repeat task n = {n}"),
        Task::Natural { .. } => "natural text".into(),
        Task::Text { .. } => "text file".into(),
        Task::Bb { .. } => "Bigram-Backcopy copy targets".into(),
        Task::Prompts { file } => format!("prompts {}", file.display()),
    };
    let kind = serde_json::to_value(r.kind)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default();
    format!("{metric} ({pos}) under {kind} ablation, {task}")
}

/// The Δ map, layers down and heads (groups) across.
pub fn delta_map(rows: &[Vec<f64>], title: &str, groups: bool) -> Result<Vec<u8>> {
    plot::heatmap(&Heatmap {
        title,
        x_label: if groups { "key/value group" } else { "head" },
        y_label: "layer",
        rows,
        x_ticks: None,
        y_ticks: None,
        range: None,
        annotate: true,
        colours: crate::plot::Colours::Diverging,
    })
}

/// Parse `L:H,L:H` (heads) or `kv L:G,…` (groups).
pub fn parse_units(s: &str) -> Result<Units> {
    let s = s.trim();
    if s == "all" {
        return Ok(Units::AllHeads);
    }
    let (groups, list) = match s.strip_prefix("kv") {
        Some(rest) => (true, rest.trim()),
        None => (false, s),
    };
    if groups && list == "all" {
        return Ok(Units::AllGroups);
    }
    let units = list
        .split(',')
        .map(|p| {
            let bad = || {
                anyhow::anyhow!(
                    "--heads {s}: expected `all`, `L:H,L:H` (e.g. 5:1,7:10; or 5.1,7.10), `kv L:G` or `kv all`"
                )
            };
            let p = p.trim();
            let (l, h) = p
                .split_once(':')
                .or_else(|| p.split_once('.'))
                .ok_or_else(bad)?;
            let number = |x: &str| x.trim().parse::<usize>().map_err(|_| bad());
            let (layer, i) = (number(l)?, number(h)?);
            Ok(if groups {
                Unit::KvGroup { layer, group: i }
            } else {
                Unit::Head { layer, head: i }
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Units::Named { units })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_parse_as_printed_and_as_typed() {
        let heads = |v: &[(usize, usize)]| Units::Named {
            units: v
                .iter()
                .map(|&(layer, head)| Unit::Head { layer, head })
                .collect(),
        };
        assert_eq!(parse_units("all").unwrap(), Units::AllHeads);
        assert_eq!(parse_units("kv all").unwrap(), Units::AllGroups);
        assert_eq!(parse_units("5:1, 7:10").unwrap(), heads(&[(5, 1), (7, 10)]));
        assert_eq!(
            parse_units("18.6,17.4").unwrap(),
            heads(&[(18, 6), (17, 4)])
        );
        assert_eq!(
            parse_units("kv 4:2").unwrap(),
            Units::Named {
                units: vec![Unit::KvGroup { layer: 4, group: 2 }]
            }
        );
        let e = parse_units("1-2").unwrap_err().to_string();
        assert!(e.contains("expected `all`"), "{e}");
        let e = parse_units("1:x").unwrap_err().to_string();
        assert!(e.contains("expected `all`"), "{e}");
    }
}
