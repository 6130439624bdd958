//! `sinklab heads` (docs/reference.md §11): detection scores of every (layer, query head) on a
//! probe — previous-token, duplicate-token and induction shares of the row, or
//! TransformerLens's `detect_head` measures —, the dormancy scores (α₁, AHON, AHON-LN, row
//! entropy, value drain, slot mass), the OV copying score from the weights, on Bigram-Backcopy
//! runs each trigger's copy score on validation windows, a class per head, one heat map per
//! score and `heads.json`.

use super::Output;
use super::probes::batch_of;
use super::tasks::trigger_offsets;
use crate::data::Batch;
use crate::data::repeat::repeat_probe;
use crate::eval::heads::{OV_CIRCUIT, head_scores, ov_copy_scores};
use crate::heads::{
    Class, LayerHeads, Measure, Score, Thresholds, TriggerCopy, classify, head_label,
    trigger_copy_score,
};
use crate::metrics::Proxy;
use crate::progress::count;
use crate::recorder::{head_map, score_map};
use crate::run::OpenRun;
use anyhow::{Context, Result, bail};
use rand::SeedableRng;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The probe the pattern scores are read on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ProbeKind {
    /// [first, R, R, …]: `n` distinct random tokens repeated `reps` times.
    Repeat { n: usize, reps: usize },
    /// Validation windows, or the windows of a text file.
    Natural { len: usize, text: Option<PathBuf> },
    /// Uniformly random non-special tokens.
    Random { len: usize },
}

/// Options of `sinklab heads`.
#[derive(Debug, Clone)]
pub struct HeadsOptions {
    pub probe: ProbeKind,
    pub sequences: usize,
    pub seed: u64,
    pub measure: Measure,
    pub thresholds: Thresholds,
    pub dest: super::Destination,
}

/// One head's entry in a top list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TopHead {
    /// `L.H`.
    pub head: String,
    pub layer: usize,
    pub index: usize,
    pub score: f64,
}

/// The probe as run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeInfo {
    #[serde(flatten)]
    pub kind: ProbeKind,
    pub sequences: usize,
    /// Tokens per sequence.
    pub len: usize,
    pub seed: u64,
    /// `BOS`, or `a random token` (runs without BOS), for the repeat and random probes.
    pub first: String,
}

/// What `sinklab heads` found (`heads.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadsReport {
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub probe: ProbeInfo,
    pub measure: Measure,
    /// How rows that do not sum to 1 over the real tokens are read.
    pub rows: String,
    pub n_layers: usize,
    pub n_heads: usize,
    pub kv_heads: usize,
    /// `[layer]` every per-head score.
    pub layers: Vec<LayerHeads>,
    /// `[layer][head]` the OV copying score.
    pub copy: Vec<Vec<f64>>,
    pub ov_circuit: String,
    pub thresholds: Thresholds,
    /// `[layer][head]`.
    pub classes: Vec<Vec<Class>>,
    pub class_counts: BTreeMap<String, usize>,
    /// Score name → the five highest heads.
    pub top: BTreeMap<String, Vec<TopHead>>,
    /// Bigram-Backcopy runs: each trigger's copy score on validation windows.
    pub trigger_copy: Option<TriggerCopies>,
    pub files: Vec<String>,
}

/// The per-trigger copy scores of a Bigram-Backcopy run ([`trigger_copy_score`], docs/reference.md
/// §11), read on validation windows (the task's own data, whatever probe the other scores use).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TriggerCopies {
    pub sequences: usize,
    /// Tokens per window (BOS included).
    pub len: usize,
    /// `[trigger]` the copy offset g_i.
    pub offsets: Vec<usize>,
    /// `[trigger]` the queries counted: input trigger i, q − g_i a task token.
    pub queries: Vec<usize>,
    /// `[trigger][layer][head]` the mean of A[q, q − g_i] over those queries.
    pub scores: Vec<Vec<Vec<f64>>>,
    /// `[trigger]` the head with the highest score (None when trigger i has no query).
    pub top: Vec<Option<TopHead>>,
}

/// The per-trigger copy scores of a Bigram-Backcopy run on `sequences` validation windows of
/// `len` tokens; `None` on other data.
pub fn trigger_copies(
    run: &OpenRun,
    sequences: usize,
    len: usize,
) -> Result<Option<TriggerCopies>> {
    let exp = &run.exp;
    let Some(offsets) = trigger_offsets(exp) else {
        return Ok(None);
    };
    let batch = crate::data::validation_batch(&run.data, sequences, len, exp.data.bos)?;
    let Some((groups, _)) = crate::data::query_groups(&exp.data, &batch.inputs) else {
        return Ok(None);
    };
    let first = usize::from(exp.data.bos);
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    // [layer] ([trigger][head], [trigger] counts)
    let mut layers = Vec::new();
    let spec =
        crate::eval::ProbeSpec::new(&batch, exp.train.micro_batch.max(1), proxy, &run.device);
    crate::eval::probe_each(&run.model, spec, &mut |_, _, a| {
        layers.push(trigger_copy_score(&a.attn, &groups, &offsets, first))
    });
    let queries = layers.first().map(|l| l.1.clone()).unwrap_or_default();
    let scores: Vec<Vec<Vec<f64>>> = (0..offsets.len())
        .map(|i| layers.iter().map(|(s, _)| s[i].clone()).collect())
        .collect();
    let top = scores.iter().map(|s| top_heads(s, 1).pop()).collect();
    Ok(Some(TriggerCopies {
        sequences: batch.batch,
        len: batch.len,
        offsets,
        queries,
        scores,
        top,
    }))
}

impl HeadsReport {
    /// One score as `[layer][head]`.
    pub fn score(&self, s: Score) -> Vec<Vec<f64>> {
        match s {
            Score::Copy => self.copy.clone(),
            _ => self
                .layers
                .iter()
                .map(|l| l.get(s).expect("a probe score").to_vec())
                .collect(),
        }
    }
}

/// How rows that do not sum to 1 are read (written into `heads.json`).
pub const ROWS: &str = "every score is a share of the whole row: weights of normalisers whose rows \
     do not sum to 1 go through the sink metrics' proxy (sigmoid, elu+1: w / (Σw + 1e-8); \
     signed linear kernels: |w| / Σ|w|; softmax_n: as they are, 1 − Σ counted as slot mass); \
     slot columns and sink tokens are part of the row (their share is slot_mass), so a head \
     that parks 0.9 of every row on a slot and 0.1 on its target scores 0.1";

/// The probe batch of `o` (inputs are the scores' tokens).
pub fn probe_batch(run: &OpenRun, o: &HeadsOptions) -> Result<(Batch, ProbeInfo)> {
    let exp = &run.exp;
    let ctx = exp.model.ctx;
    let tok = &run.data.tokenizer;
    let bos = exp.data.bos.then_some(tok.bos_id);
    let first = if bos.is_some() {
        "BOS"
    } else {
        "a random token"
    };
    let ids = tok.regular_ids(run.data.vocab_size() as u32);
    let check_len = |len: usize| -> Result<()> {
        if len < 2 || len > ctx {
            bail!("--len {len}: the probe needs 2 ≤ len ≤ model.ctx = {ctx}");
        }
        Ok(())
    };
    let (batch, first) = match &o.probe {
        ProbeKind::Repeat { n, reps } => {
            let t = reps * n + 1;
            if t > ctx {
                bail!(
                    "--n {n} --reps {reps}: the repeat probe has reps·n + 1 = {t} tokens but \
                     model.ctx = {ctx}; use --n ≤ {}",
                    (ctx - 1) / reps.max(&1)
                );
            }
            let b = repeat_probe(&ids, *n, *reps, o.sequences, o.seed, bos)?;
            (b, first)
        }
        ProbeKind::Random { len } => {
            check_len(*len)?;
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(o.seed);
            let seqs = (0..o.sequences)
                .map(|_| {
                    let mut s: Vec<u32> = bos.into_iter().collect();
                    while s.len() < *len {
                        s.push(ids.draw(&mut rng));
                    }
                    s
                })
                .collect();
            (batch_of(seqs), first)
        }
        ProbeKind::Natural { len, text: None } => {
            check_len(*len)?;
            let b = crate::data::validation_batch(&run.data, o.sequences, *len, exp.data.bos)?;
            (b, "the text's")
        }
        ProbeKind::Natural {
            len,
            text: Some(file),
        } => {
            check_len(*len)?;
            let body = std::fs::read_to_string(file)
                .with_context(|| format!("reading --text {}", file.display()))?;
            let ids = tok.encode(&body)?;
            let mut b = crate::data::text_batch(&ids, *len, bos, true)
                .with_context(|| format!("--text {}", file.display()))?;
            if b.batch > o.sequences {
                b = crate::eval::slice_batch(&b, 0, o.sequences);
            }
            (b, "the text's")
        }
    };
    let info = ProbeInfo {
        kind: o.probe.clone(),
        sequences: batch.batch,
        len: batch.len,
        seed: o.seed,
        first: first.to_string(),
    };
    Ok((batch, info))
}

/// The `k` highest finite values of `rows[layer][head]`, highest first.
pub fn top_heads(rows: &[Vec<f64>], k: usize) -> Vec<TopHead> {
    let mut all: Vec<TopHead> = rows
        .iter()
        .enumerate()
        .flat_map(|(l, r)| {
            r.iter().enumerate().map(move |(h, &s)| TopHead {
                head: head_label(l, h),
                layer: l,
                index: h,
                score: s,
            })
        })
        .filter(|t| t.score.is_finite())
        .collect();
    all.sort_by(|a, b| b.score.total_cmp(&a.score));
    all.truncate(k);
    all
}

/// A probe's short description for titles.
pub fn probe_title(p: &ProbeInfo) -> String {
    match &p.kind {
        ProbeKind::Repeat { n, reps } => {
            format!("repeat probe n = {n} × {reps}, {} sequences", p.sequences)
        }
        ProbeKind::Natural { .. } => format!("natural text, {} × {}", p.sequences, p.len),
        ProbeKind::Random { .. } => format!("random tokens, {} × {}", p.sequences, p.len),
    }
}

/// The TensorBoard prefix of `sinklab heads --tensorboard`: its own, never the live scores'
/// `heads/…` that training writes (the command's probe is not the run's).
pub const TB_PREFIX: &str = "heads_analysis";

/// Run `sinklab heads`: writes its report (`heads_<probe>.json`) and one heat map per score
/// beside it.
pub fn heads(run: &OpenRun, o: &HeadsOptions, log: &mut dyn FnMut(&str)) -> Result<HeadsReport> {
    let claim = o.dest.claim(run, super::names::heads(o))?;
    let exp = &run.exp;
    let (probe, info) = probe_batch(run, o)?;
    let (n_layers, n_heads) = (exp.model.n_layers, exp.model.n_heads);
    log(&format!(
        "{}: {} of {} tokens through {} × {}",
        probe_title(&info),
        count(probe.batch, "sequence", None),
        probe.len,
        count(n_layers, "layer", None),
        count(n_heads, "head", None)
    ));
    let proxy = Proxy::for_normaliser(&exp.model.attention.normaliser);
    let chunk = exp.train.micro_batch.max(1);
    let bar = crate::progress::Progress::new(n_layers as u64, "head scores (layers)");
    let layers = head_scores(
        &run.model,
        &probe,
        chunk,
        proxy,
        o.measure,
        &run.device,
        &mut |_| bar.inc(1),
    );
    bar.finish();
    log("OV copying scores from the weights");
    let copy = ov_copy_scores(&run.model)?;
    let classes: Vec<Vec<Class>> = layers
        .iter()
        .zip(&copy)
        .map(|(l, c)| {
            (0..n_heads)
                .map(|h| classify(l, h, Some(c[h]), &o.thresholds))
                .collect()
        })
        .collect();
    let mut class_counts = BTreeMap::new();
    for c in classes.iter().flatten() {
        let name = serde_json::to_value(c)?
            .as_str()
            .expect("a class is a string")
            .to_string();
        *class_counts.entry(name).or_insert(0) += 1;
    }
    let mut report = HeadsReport {
        run_dir: run.run_dir.clone(),
        checkpoint: run.checkpoint.clone(),
        step: run.state.step,
        probe: info,
        measure: o.measure,
        rows: ROWS.to_string(),
        n_layers,
        n_heads,
        kv_heads: exp.model.kv_heads(),
        layers,
        copy,
        ov_circuit: OV_CIRCUIT.to_string(),
        thresholds: o.thresholds,
        classes,
        class_counts,
        top: BTreeMap::new(),
        trigger_copy: trigger_copies(run, o.sequences, exp.model.ctx)?,
        files: Vec::new(),
    };
    let mut out = Output::new(claim, run)?;
    let what = probe_title(&report.probe);
    let mut scalars = Vec::new();
    for s in Score::ALL {
        let rows = report.score(s);
        report.top.insert(s.name().to_string(), top_heads(&rows, 5));
        let from = match s {
            Score::Copy => "from the weights, norm gains folded in",
            _ => what.as_str(),
        };
        let png = score_map(&rows, s, from)?;
        let name = out.claim.figure(s.name());
        out.png(&name, &format!("{TB_PREFIX}/{}_map", s.name()), png)?;
        for (l, r) in rows.iter().enumerate() {
            for (h, v) in r.iter().enumerate() {
                scalars.push((s.tag(l, h), *v));
            }
        }
    }
    if let Some(tc) = &report.trigger_copy {
        let what = format!("validation windows, {} × {}", tc.sequences, tc.len);
        for (i, (rows, g)) in tc.scores.iter().zip(&tc.offsets).enumerate() {
            let s = TriggerCopy(i);
            report.top.insert(s.name(), top_heads(rows, 5));
            let png = head_map(
                rows,
                &format!("{} ({what})", s.title(*g)),
                Some(TriggerCopy::RANGE),
            )?;
            let name = out.claim.figure(&s.name());
            out.png(&name, &format!("{TB_PREFIX}/{}_map", s.name()), png)?;
            for (l, r) in rows.iter().enumerate() {
                for (h, v) in r.iter().enumerate() {
                    scalars.push((s.tag(l, h), *v));
                }
            }
        }
    }
    // the live scores' tags are `heads/<score>/layerLL_headHH`: the command writes the same
    // names under its own prefix
    let unprefixed: Vec<(String, f64)> = scalars
        .into_iter()
        .map(|(k, v)| (k.to_string().trim_start_matches("heads/").to_string(), v))
        .collect();
    out.scalars(TB_PREFIX, &unprefixed)?;
    report.files = out.files.clone();
    report.files.push(out.claim.report());
    out.report(&report)?;
    Ok(report)
}
