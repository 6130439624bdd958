//! Attention-head scores as pure functions on host arrays (docs/reference.md §11; Zheng et al.
//! 2024's survey and its sources). Nothing here touches Burn: the head probe
//! (`crate::eval::heads`) copies one layer's weights, values and mixed values to the host and
//! these functions reduce them, so they are tested on planted attention.
//!
//! Inputs per layer: `attn` (B, H, T, T), the real queries' weights on the real keys through
//! the normaliser's proxy ([`crate::metrics::split_attention`]), with `slot` (B, H, T) their
//! mass on slots and sink tokens; `tokens` (B, T) the probe's ids; `z` (B, H, T, d_h) each
//! head's mixed value (the `z` hook point, W_O's input). 0-based positions.
//!
//! - targets of query q: previous `{q − 1}` (q ≥ 1); duplicate `{j < q : tok_j = tok_q}`;
//!   induction `{j + 1 : j < q, tok_j = tok_q}` (the token after each earlier occurrence);
//! - primary score (a share of the *whole* row, slot mass included in the row): the mean over
//!   the (sequence, query) pairs that have a target of `Σ_{j ∈ targets} A[q, j]`; on
//!   [first, R, R] the duplicate and induction queries are the second copy of R;
//! - TransformerLens's `detect_head` ([`tl_score`]): D[q, j] = 1 on the targets, A the real-token
//!   weights (rows that lost mass to a slot are not renormalised), column 0 zeroed with
//!   `exclude_first`; `mul` = Σ(A⊙D)/ΣA, `abs` = 1 − round(Σ|A − D| / T, 3); the mean over
//!   sequences, whatever their number;
//! - α₁ = mean_q A[q, 0] ([`crate::metrics::importance_first`], the number the sink probe
//!   logs), slot mass = mean_q slot[q], sink share = α₁ + slot mass;
//! - row entropy `−Σ_j A log A − m log m` (m the slot mass, one outcome), mean over queries;
//! - AHON = mean_{b,t} ‖z_{b,h,t}‖ (Sandoval-Segura et al.), AHON-LN = AHON / the layer's mean
//!   AHON over heads;
//! - OV copying score `Σ Re λ / Σ |λ|` over the eigenvalues of a d_h × d_h OV circuit
//!   ([`copy_score`]; Elhage et al.): +1 a copier, −1 a copy suppressor;
//! - per-trigger copy score on Bigram-Backcopy ([`trigger_copy_score`], §10): for trigger i of
//!   copy offset g_i, the mean over the queries q whose input is trigger i of A[q, q − g_i],
//!   the share of the row on the token the next one copies.

pub mod eig;

use crate::metrics::{Array, importance, importance_first, value_drain};
use crate::tags::{HeadMetric, Tag};
use anyhow::Result;
use serde::{Deserialize, Serialize};

/// The attention patterns of TransformerLens's head types.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pattern {
    Previous,
    Duplicate,
    Induction,
}

impl Pattern {
    pub const ALL: [Pattern; 3] = [Pattern::Previous, Pattern::Duplicate, Pattern::Induction];

    /// The key positions query `q` of `tokens` (one sequence) is scored on, in order.
    pub fn targets(self, tokens: &[u32], q: usize) -> Vec<usize> {
        match self {
            Pattern::Previous => q.checked_sub(1).into_iter().collect(),
            Pattern::Duplicate => (0..q).filter(|&j| tokens[j] == tokens[q]).collect(),
            Pattern::Induction => (0..q)
                .filter(|&j| tokens[j] == tokens[q])
                .map(|j| j + 1)
                .collect(),
        }
    }

    /// The detection pattern D (T × T, row-major) of one sequence: 1 on every query's targets.
    pub fn detection(self, tokens: &[u32]) -> Vec<f64> {
        let t = tokens.len();
        let mut d = vec![0.0; t * t];
        for q in 0..t {
            for j in self.targets(tokens, q) {
                d[q * t + j] = 1.0;
            }
        }
        d
    }
}

fn dims4(a: &Array, what: &str) -> [usize; 4] {
    match a.shape[..] {
        [b, h, t, x] => [b, h, t, x],
        _ => panic!("{what} must be rank 4, got {:?}", a.shape),
    }
}

/// The primary score of every head for `pattern`: the mean, over the (sequence, query) pairs
/// with at least one target, of the attention on the targets (NaN when no query has one).
pub fn pattern_score(attn: &Array, tokens: &[u32], pattern: Pattern) -> Vec<f64> {
    let [b, h, t, t2] = dims4(attn, "attention");
    assert_eq!(t, t2, "attention (B, H, T, T)");
    assert_eq!(tokens.len(), b * t, "tokens (B, T)");
    let mut sum = vec![0.0; h];
    let mut count = 0usize;
    for bi in 0..b {
        let seq = &tokens[bi * t..(bi + 1) * t];
        for q in 0..t {
            let js = pattern.targets(seq, q);
            if js.is_empty() {
                continue;
            }
            count += 1;
            for (hi, s) in sum.iter_mut().enumerate() {
                let row = &attn.data[((bi * h + hi) * t + q) * t..][..t];
                *s += js.iter().map(|&j| row[j] as f64).sum::<f64>();
            }
        }
    }
    sum.into_iter().map(|s| s / count as f64).collect()
}

/// TransformerLens's two error measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TlMeasure {
    /// `Σ(A⊙D) / ΣA`.
    Mul,
    /// `1 − round(Σ|A − D| / T, 3)`.
    Abs,
}

/// Python's `round(x, 3)`: the nearest 3-decimal number to the exact binary value, ties to
/// even (Rust's formatting rounds the exact value the same way).
pub fn round3(x: f64) -> f64 {
    format!("{x:.3}").parse().expect("a formatted float parses")
}

/// TransformerLens's `detect_head` score of every head, the mean over sequences of the score
/// of each (the same arguments for one sequence and for many). `exclude_first` zeroes column 0
/// of A (and, for `abs`, of |A − D|) first, as its `exclude_bos`.
pub fn tl_score(
    attn: &Array,
    tokens: &[u32],
    pattern: Pattern,
    measure: TlMeasure,
    exclude_first: bool,
) -> Vec<f64> {
    let [b, h, t, _] = dims4(attn, "attention");
    assert_eq!(tokens.len(), b * t, "tokens (B, T)");
    let mut out = vec![0.0; h];
    for bi in 0..b {
        let d = pattern.detection(&tokens[bi * t..(bi + 1) * t]);
        for (hi, o) in out.iter_mut().enumerate() {
            let a = &attn.data[(bi * h + hi) * t * t..][..t * t];
            let keep = |i: usize| !(exclude_first && i.is_multiple_of(t));
            let score = match measure {
                TlMeasure::Mul => {
                    let (mut hit, mut all) = (0.0, 0.0);
                    for (_, (&ai, di)) in a.iter().zip(&d).enumerate().filter(|(i, _)| keep(*i)) {
                        hit += ai as f64 * di;
                        all += ai as f64;
                    }
                    hit / all
                }
                TlMeasure::Abs => {
                    let diff: f64 = a
                        .iter()
                        .zip(&d)
                        .enumerate()
                        .filter(|(i, _)| keep(*i))
                        .map(|(_, (&ai, di))| (ai as f64 - di).abs())
                        .sum();
                    1.0 - round3(diff / t as f64)
                }
            };
            *o += score / b as f64;
        }
    }
    out
}

/// Mean slot mass per head, `mean_{b,q} slot[b, h, q]`.
pub fn mean_slot_mass(slot: &Array) -> Vec<f64> {
    let [b, h, t] = slot.shape[..] else {
        panic!("slot mass must be (B, H, T), got {:?}", slot.shape)
    };
    let mut out = vec![0.0; h];
    for (i, row) in slot.data.chunks_exact(t).enumerate() {
        out[i % h] += row.iter().map(|&x| x as f64).sum::<f64>() / (b * t) as f64;
    }
    out
}

fn plogp(p: f64) -> f64 {
    if p > 0.0 { -p * p.ln() } else { 0.0 }
}

/// Mean row entropy per head (nats) of the whole row: the real keys and the slot mass as one
/// more outcome.
pub fn row_entropy(attn: &Array, slot: Option<&Array>) -> Vec<f64> {
    let [b, h, t, _] = dims4(attn, "attention");
    let mut out = vec![0.0; h];
    for (r, row) in attn.data.chunks_exact(t).enumerate() {
        let m = slot.map_or(0.0, |s| s.data[r] as f64);
        let e = row.iter().map(|&a| plogp(a as f64)).sum::<f64>() + plogp(m);
        out[(r / t) % h] += e / (b * t) as f64;
    }
    out
}

/// First-token importance α₁ per head, `mean_b α[b][h][0]` (the sink probe's number).
pub fn alpha1(attn: &Array) -> Vec<f64> {
    importance_first(&importance(attn))
}

/// AHON per head: `mean_{b,t} ‖z_{b,h,t}‖` for z (B, H, T, d_h).
pub fn ahon(z: &Array) -> Vec<f64> {
    let [b, h, t, dh] = dims4(z, "z");
    let mut out = vec![0.0; h];
    for (i, v) in z.data.chunks_exact(dh).enumerate() {
        let norm = v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
        out[(i / t) % h] += norm / (b * t) as f64;
    }
    out
}

/// AHON-LN: each head's AHON over the layer's mean AHON (Sandoval-Segura et al.).
pub fn ahon_ln(ahon: &[f64]) -> Vec<f64> {
    let mean = ahon.iter().sum::<f64>() / ahon.len() as f64;
    ahon.iter().map(|a| a / mean).collect()
}

/// The OV copying score `Σ Re λ / Σ |λ|` of a row-major n × n matrix (Elhage et al.): +1 when
/// every eigenvalue is positive real (a copier), −1 when every one is negative real (a copy
/// suppressor); 0 for the zero matrix.
pub fn copy_score(m: &[f64], n: usize) -> Result<f64> {
    let ev = eig::eigenvalues(m, n)?;
    let abs: f64 = ev.iter().map(|e| e.abs()).sum();
    let re: f64 = ev.iter().map(|e| e.re).sum();
    Ok(if abs > 0.0 { re / abs } else { 0.0 })
}

/// The per-trigger copy score of every head on Bigram-Backcopy (docs/reference.md §10–§11):
/// for trigger i with copy offset `offsets[i]` = g_i, the mean over the (sequence, query) pairs
/// whose input is trigger i and whose copy source q − g_i is a task token (q − g_i ≥ `first`)
/// of `A[q, q − g_i]`, a share of the whole row (slot mass included), as the primary pattern
/// score. `groups` (B, T) are the task's query groups (0: no trigger, 1 + i: trigger i);
/// `first` is the position of each sequence's first task token (1 after BOS, else 0): a trigger
/// closer than g_i to it has nothing to copy (its next token is a bigram draw) and is not
/// counted. Returns `[trigger][head]` (NaN where trigger i has no counted query) and the number
/// of counted queries per trigger.
pub fn trigger_copy_score(
    attn: &Array,
    groups: &[usize],
    offsets: &[usize],
    first: usize,
) -> (Vec<Vec<f64>>, Vec<usize>) {
    let [b, h, t, t2] = dims4(attn, "attention");
    assert_eq!(t, t2, "attention (B, H, T, T)");
    assert_eq!(groups.len(), b * t, "query groups (B, T)");
    let n = offsets.len();
    let mut sum = vec![vec![0.0; h]; n];
    let mut count = vec![0usize; n];
    for bi in 0..b {
        for q in 0..t {
            let Some(i) = groups[bi * t + q].checked_sub(1) else {
                continue;
            };
            let g = offsets[i];
            if q < first + g {
                continue;
            }
            count[i] += 1;
            for (hi, s) in sum[i].iter_mut().enumerate() {
                *s += attn.data[((bi * h + hi) * t + q) * t + q - g] as f64;
            }
        }
    }
    let score = sum
        .into_iter()
        .zip(&count)
        .map(|(s, &c)| s.into_iter().map(|x| x / c as f64).collect())
        .collect();
    (score, count)
}

/// The per-trigger copy score of trigger `i` as a named score (the one place its names are
/// built): JSON key and top-list key `copy_trigger{i}`, metric tag
/// `heads/copy_trigger{i}/layer{ll}_head{hh}`, heat map `heads_<probe>_copy_trigger{i}.png` (the
/// training probe's `bb/attn_first_trigger{i}/…` names the same queries).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TriggerCopy(pub usize);

impl TriggerCopy {
    pub fn name(self) -> String {
        format!("copy_trigger{}", self.0)
    }

    /// What a heat map of the score says, for copy offset `g`.
    pub fn title(self, g: usize) -> String {
        format!("trigger {} copy score A[q, q − {g}] on its queries", self.0)
    }

    /// The colour range of its heat map: a share of the row.
    pub const RANGE: (f64, f64) = (0.0, 1.0);

    pub fn tag(self, l: usize, h: usize) -> Tag {
        Tag::Head(HeadMetric::Score(self.name()), l, h)
    }
}

/// How the three pattern scores are measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Measure {
    /// The share of the whole row ([`pattern_score`]).
    Primary,
    /// TransformerLens's `detect_head` ([`tl_score`]).
    Tl {
        measure: TlMeasure,
        exclude_first: bool,
    },
}

/// One layer's scores, `[head]` each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerHeads {
    pub previous: Vec<f64>,
    pub duplicate: Vec<f64>,
    pub induction: Vec<f64>,
    pub alpha1: Vec<f64>,
    /// Mean mass on slots and sink tokens (0 without them).
    pub slot_mass: Vec<f64>,
    pub entropy: Vec<f64>,
    pub value_drain: Vec<f64>,
    pub ahon: Vec<f64>,
    pub ahon_ln: Vec<f64>,
}

impl LayerHeads {
    /// The scores of one layer's probe arrays: `attn` (B, H, T, T), `slot` (B, H, T), `values`
    /// (B, H, T, d_h) repeated per query head, `z` (B, H, T, d_h), `tokens` (B, T).
    pub fn of(
        attn: &Array,
        slot: Option<&Array>,
        values: &Array,
        z: &Array,
        tokens: &[u32],
        measure: Measure,
    ) -> Self {
        let score = |p: Pattern| match measure {
            Measure::Primary => pattern_score(attn, tokens, p),
            Measure::Tl {
                measure,
                exclude_first,
            } => tl_score(attn, tokens, p, measure, exclude_first),
        };
        let h = attn.shape[1];
        let ahon = ahon(z);
        Self {
            previous: score(Pattern::Previous),
            duplicate: score(Pattern::Duplicate),
            induction: score(Pattern::Induction),
            alpha1: alpha1(attn),
            slot_mass: slot.map_or_else(|| vec![0.0; h], mean_slot_mass),
            entropy: row_entropy(attn, slot),
            value_drain: value_drain(values),
            ahon_ln: ahon_ln(&ahon),
            ahon,
        }
    }

    /// One score's row.
    pub fn get(&self, s: Score) -> Option<&[f64]> {
        Some(match s {
            Score::Previous => &self.previous,
            Score::Duplicate => &self.duplicate,
            Score::Induction => &self.induction,
            Score::Alpha1 => &self.alpha1,
            Score::SlotMass => &self.slot_mass,
            Score::Entropy => &self.entropy,
            Score::ValueDrain => &self.value_drain,
            Score::Ahon => &self.ahon,
            Score::AhonLn => &self.ahon_ln,
            Score::Copy => return None,
        })
    }
}

/// Every per-head score, with its name (the one place names are built: JSON keys, metric
/// tags, file names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Score {
    Previous,
    Duplicate,
    Induction,
    Alpha1,
    SlotMass,
    Entropy,
    ValueDrain,
    Ahon,
    AhonLn,
    Copy,
}

impl Score {
    pub const ALL: [Score; 10] = [
        Score::Previous,
        Score::Duplicate,
        Score::Induction,
        Score::Alpha1,
        Score::SlotMass,
        Score::Entropy,
        Score::ValueDrain,
        Score::Ahon,
        Score::AhonLn,
        Score::Copy,
    ];
    /// The scores logged while a model trains.
    pub const LIVE: [Score; 4] = [
        Score::Previous,
        Score::Induction,
        Score::Alpha1,
        Score::AhonLn,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Score::Previous => "previous",
            Score::Duplicate => "duplicate",
            Score::Induction => "induction",
            Score::Alpha1 => "alpha1",
            Score::SlotMass => "slot_mass",
            Score::Entropy => "entropy",
            Score::ValueDrain => "value_drain",
            Score::Ahon => "ahon",
            Score::AhonLn => "ahon_ln",
            Score::Copy => "copy",
        }
    }

    /// What a heat map of the score says.
    pub fn title(self) -> &'static str {
        match self {
            Score::Previous => "previous-token score",
            Score::Duplicate => "duplicate-token score",
            Score::Induction => "induction score",
            Score::Alpha1 => "first-token importance α₁",
            Score::SlotMass => "mass on slots and sink tokens",
            Score::Entropy => "row entropy (nats)",
            Score::ValueDrain => "value drain ‖v₁‖ / mean ‖v_t‖",
            Score::Ahon => "AHON: mean ‖z_h‖",
            Score::AhonLn => "AHON-LN: AHON / the layer's mean",
            Score::Copy => "OV copying score Σ Re λ / Σ |λ|",
        }
    }

    /// The colour range of its heat map (None: the data's).
    pub fn range(self) -> Option<(f64, f64)> {
        match self {
            Score::Previous | Score::Duplicate | Score::Induction | Score::Alpha1 => {
                Some((0.0, 1.0))
            }
            Score::SlotMass => Some((0.0, 1.0)),
            Score::Copy => Some((-1.0, 1.0)),
            Score::Entropy | Score::ValueDrain | Score::Ahon | Score::AhonLn => None,
        }
    }

    /// The metric tag of head `h` of layer `l`: `heads/{name}/layer{ll}_head{hh}`.
    pub fn tag(self, l: usize, h: usize) -> Tag {
        Tag::Head(HeadMetric::Score(self.name().to_string()), l, h)
    }
}

/// The live metrics of a training probe: every [`Score::LIVE`] score of every (layer, head)
/// as `heads/{name}/layer{ll}_head{hh}`.
pub fn live_scalars(layers: &[LayerHeads]) -> Vec<(Tag, f64)> {
    Score::LIVE
        .iter()
        .flat_map(|&s| {
            layers.iter().enumerate().flat_map(move |(l, lh)| {
                lh.get(s)
                    .expect("a probe score")
                    .iter()
                    .enumerate()
                    .map(move |(h, &v)| (s.tag(l, h), v))
            })
        })
        .collect()
}

/// `L.H`: how heads are printed (the literature's 5.1, 7.10).
pub fn head_label(l: usize, h: usize) -> String {
    format!("{l}.{h}")
}

/// A head's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    Previous,
    Duplicate,
    Induction,
    Dormant,
    LowOutput,
    CopySuppression,
    Other,
}

/// The thresholds of [`classify`] (written into `heads.json`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Thresholds {
    /// A pattern class needs its score at least this (the highest of the three wins).
    pub pattern: f64,
    /// Dormant ([`Thresholds::dormant`]): sink share α₁ + slot mass at least this (and
    /// AHON-LN at most `low_output_ahon_ln`).
    pub dormant_sink_share: f64,
    /// Copy suppression: OV copying score at most this.
    pub copy_suppression: f64,
    /// Low output: AHON-LN at most this.
    pub low_output_ahon_ln: f64,
}

impl Thresholds {
    /// Dormant, the one definition `sinklab heads` and `sinklab ablate` use (Guo et al.'s
    /// active-dormant heads): the head parks its rows on the sink — sink share (α₁ plus slot
    /// mass) at least `dormant_sink_share` — and writes little — AHON-LN at most
    /// `low_output_ahon_ln`. A head that parks on the sink but still writes is not dormant.
    pub fn dormant(&self, sink_share: f64, ahon_ln: f64) -> bool {
        sink_share >= self.dormant_sink_share && ahon_ln <= self.low_output_ahon_ln
    }
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            pattern: 0.4,
            dormant_sink_share: 0.8,
            copy_suppression: -0.5,
            low_output_ahon_ln: 0.5,
        }
    }
}

/// A head's class, in this order: the best of previous / duplicate / induction if it reaches
/// `pattern`; dormant ([`Thresholds::dormant`]); copy suppression if the copying score (when
/// known) is at most its threshold; low output if AHON-LN is at most its threshold; otherwise
/// other.
pub fn classify(l: &LayerHeads, h: usize, copy: Option<f64>, th: &Thresholds) -> Class {
    let best = [
        (Class::Previous, l.previous[h]),
        (Class::Duplicate, l.duplicate[h]),
        (Class::Induction, l.induction[h]),
    ]
    .into_iter()
    .filter(|(_, s)| s.is_finite() && *s >= th.pattern)
    .max_by(|a, b| a.1.total_cmp(&b.1));
    if let Some((c, _)) = best {
        return c;
    }
    if th.dormant(l.alpha1[h] + l.slot_mass[h], l.ahon_ln[h]) {
        return Class::Dormant;
    }
    if copy.is_some_and(|c| c <= th.copy_suppression) {
        return Class::CopySuppression;
    }
    if l.ahon_ln[h] <= th.low_output_ahon_ln {
        return Class::LowOutput;
    }
    Class::Other
}

#[cfg(test)]
mod tests;
