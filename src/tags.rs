//! The name of every scalar a training run records, and the line of `metrics.jsonl` that
//! holds them.
//!
//! A TensorBoard tag and a `metrics.jsonl` key are the same string: [`Tag`]'s `Display` writes
//! it and its `FromStr` reads it back, so no module spells a tag by hand. One line of
//! `metrics.jsonl` is one [`Record`], written and read by the same serde derive; [`read`] reads
//! a file of them and names the file and line of anything it cannot read. Indices are
//! zero-padded (`pos01`, `layer07`, `head03`) so that tags sort.
//!
//! ```text
//! {scalar}                             Tag::Run        train/loss, val/loss, attn/f_attn, …  (Scalar)
//! sink/rate_eps{ε}/pos{kk}             Tag::SinkRate   Sink_k at ε (%), k = 1, 2, …
//! sink/slot_rate_eps{ε}                Tag::SlotRate   Sink₁* on the slot at ε (%)
//! sink/layer_rate_eps{ε}/layer{ll}     Tag::LayerRate  Sink₁ of one layer at ε (%)
//! {metric}/layer{ll}                   Tag::Layer      one number per layer             (LayerMetric)
//! {metric}/layer{ll}_head{hh}          Tag::Head       one number per head              (HeadMetric)
//! gains/{param}[/h{h}]                 Tag::Gain       a learned gain (one per head: /h{h})
//! ```
//!
//! ε is written as `metrics::eps_name` writes it (`0.3`, `0.05`). The head scores
//! (`heads/{score}/layer{ll}_head{hh}`) carry the score's name as `heads::Score::name` spells
//! it: the list of scores belongs to `heads`, which sits above this module.

use anyhow::{Context, Result, bail};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

/// A scalar with no index: one number per record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scalar {
    TrainLoss,
    TrainLr,
    TrainGradNorm,
    TrainTokensPerS,
    TrainTokensSeen,
    /// The dynamic loss scale of fp16 training.
    TrainLossScale,
    /// Steps skipped by the loss scale (non-finite gradients), so far.
    TrainSkippedSteps,
    ValLoss,
    /// The validation loss on the tokens a `[data.changes]` leaves unchanged.
    ValLossUnchanged,
    /// Bigram-Backcopy: the loss on the copy targets and on the bigram targets.
    BbLossCopy,
    BbLossBigram,
    /// The repeat task: the loss on repeated and on fresh targets.
    RepeatLossRepeated,
    RepeatLossFresh,
    /// F-Attn: the mean over layers of the attention to token 1.
    FAttn,
    /// F-Attn of uniform causal attention at the probe length: its floor.
    FAttnUniform,
    /// M-Act: the largest per-layer mean top-1 |h|.
    MAct,
    /// The block output's kurtosis, averaged over layers.
    Kurtosis,
    /// Secondary sinks per (layer, sequence, head), and the share (%) with at least one.
    SecondaryCount,
    SecondaryHeads,
}

impl Scalar {
    pub const ALL: [Scalar; 19] = [
        Scalar::TrainLoss,
        Scalar::TrainLr,
        Scalar::TrainGradNorm,
        Scalar::TrainTokensPerS,
        Scalar::TrainTokensSeen,
        Scalar::TrainLossScale,
        Scalar::TrainSkippedSteps,
        Scalar::ValLoss,
        Scalar::ValLossUnchanged,
        Scalar::BbLossCopy,
        Scalar::BbLossBigram,
        Scalar::RepeatLossRepeated,
        Scalar::RepeatLossFresh,
        Scalar::FAttn,
        Scalar::FAttnUniform,
        Scalar::MAct,
        Scalar::Kurtosis,
        Scalar::SecondaryCount,
        Scalar::SecondaryHeads,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scalar::TrainLoss => "train/loss",
            Scalar::TrainLr => "train/lr",
            Scalar::TrainGradNorm => "train/grad_norm",
            Scalar::TrainTokensPerS => "train/tokens_per_s",
            Scalar::TrainTokensSeen => "train/tokens_seen",
            Scalar::TrainLossScale => "train/loss_scale",
            Scalar::TrainSkippedSteps => "train/skipped_steps",
            Scalar::ValLoss => "val/loss",
            Scalar::ValLossUnchanged => "val/loss_unchanged",
            Scalar::BbLossCopy => "bb/loss_copy",
            Scalar::BbLossBigram => "bb/loss_bigram",
            Scalar::RepeatLossRepeated => "repeat/loss_repeated",
            Scalar::RepeatLossFresh => "repeat/loss_fresh",
            Scalar::FAttn => "attn/f_attn",
            Scalar::FAttnUniform => "attn/f_attn_uniform",
            Scalar::MAct => "act/m_act",
            Scalar::Kurtosis => "act/kurtosis",
            Scalar::SecondaryCount => "sink/secondary_count",
            Scalar::SecondaryHeads => "sink/secondary_heads",
        }
    }
}

/// A metric with one number per layer: `{name}/layer{ll}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum LayerMetric {
    /// Mean attention entropy.
    AttnEntropy,
    /// ‖h₁‖ / mean ‖h_t‖, and the two norms.
    NormRatio,
    NormFirst,
    NormRest,
    /// The mean of the 1st, 2nd and 3rd largest |h| per token.
    Top1,
    Top2,
    Top3,
    MedianAbs,
    MassiveCount,
    KeyNormFirst,
    KeyNormRest,
    ValueNormFirst,
    ValueNormRest,
    /// Attention mass on the slot (models with one).
    SlotMass,
    /// Attention mass on token 1.
    FirstTokenMass,
    /// The output gate's mean (gated models).
    GateMean,
    /// Kurtosis of the block output (the residual stream).
    Kurtosis,
    /// Kurtosis and max |x| of the attention output.
    AttnOutKurtosis,
    AttnOutMaxAbs,
    /// Secondary sinks at the headline ε: share (%) and count.
    SecondaryHeads,
    SecondaryCount,
    /// Representation (matrix) entropy, in nats and normalised.
    ReprEntropy,
    ReprEntropyNorm,
}

impl LayerMetric {
    pub const ALL: [LayerMetric; 23] = [
        LayerMetric::AttnEntropy,
        LayerMetric::NormRatio,
        LayerMetric::NormFirst,
        LayerMetric::NormRest,
        LayerMetric::Top1,
        LayerMetric::Top2,
        LayerMetric::Top3,
        LayerMetric::MedianAbs,
        LayerMetric::MassiveCount,
        LayerMetric::KeyNormFirst,
        LayerMetric::KeyNormRest,
        LayerMetric::ValueNormFirst,
        LayerMetric::ValueNormRest,
        LayerMetric::SlotMass,
        LayerMetric::FirstTokenMass,
        LayerMetric::GateMean,
        LayerMetric::Kurtosis,
        LayerMetric::AttnOutKurtosis,
        LayerMetric::AttnOutMaxAbs,
        LayerMetric::SecondaryHeads,
        LayerMetric::SecondaryCount,
        LayerMetric::ReprEntropy,
        LayerMetric::ReprEntropyNorm,
    ];

    /// The largest-|h| statistics by rank: `TOP[0]` is the largest.
    pub const TOP: [LayerMetric; 3] = [LayerMetric::Top1, LayerMetric::Top2, LayerMetric::Top3];

    /// The tag without its `/layer{ll}`.
    pub fn name(self) -> &'static str {
        match self {
            LayerMetric::AttnEntropy => "attn/entropy",
            LayerMetric::NormRatio => "act/norm_ratio",
            LayerMetric::NormFirst => "act/norm_first",
            LayerMetric::NormRest => "act/norm_rest",
            LayerMetric::Top1 => "act/top1",
            LayerMetric::Top2 => "act/top2",
            LayerMetric::Top3 => "act/top3",
            LayerMetric::MedianAbs => "act/median_abs",
            LayerMetric::MassiveCount => "act/massive_count",
            LayerMetric::KeyNormFirst => "kv/key_norm_first",
            LayerMetric::KeyNormRest => "kv/key_norm_rest",
            LayerMetric::ValueNormFirst => "kv/value_norm_first",
            LayerMetric::ValueNormRest => "kv/value_norm_rest",
            LayerMetric::SlotMass => "sink/slot_mass",
            LayerMetric::FirstTokenMass => "attn/first_token_mass",
            LayerMetric::GateMean => "attn/gate_mean",
            LayerMetric::Kurtosis => "act/kurtosis",
            LayerMetric::AttnOutKurtosis => "attn_out/kurtosis",
            LayerMetric::AttnOutMaxAbs => "attn_out/max_abs",
            LayerMetric::SecondaryHeads => "sink/secondary_heads",
            LayerMetric::SecondaryCount => "sink/secondary_count",
            LayerMetric::ReprEntropy => "repr/entropy",
            LayerMetric::ReprEntropyNorm => "repr/entropy_norm",
        }
    }
}

/// The query group of Bigram-Backcopy's first-token attention: dormant queries, or the
/// queries after trigger `i`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Group {
    Dormant,
    Trigger(usize),
}

/// A metric with one number per head: `{name}/layer{ll}_head{hh}`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HeadMetric {
    /// α₁: first-token importance (`sink/importance_first`).
    ImportanceFirst,
    /// ‖v₁‖ / mean ‖v_t‖ (`kv/value_drain`).
    ValueDrain,
    /// Bigram-Backcopy: attention to token 1 by query group (`bb/attn_first_{group}`).
    BbAttnFirst(Group),
    /// A head score `heads/{name}`, named as `heads::Score::name` (or `TriggerCopy::name`)
    /// spells it.
    Score(String),
}

impl fmt::Display for HeadMetric {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeadMetric::ImportanceFirst => f.write_str("sink/importance_first"),
            HeadMetric::ValueDrain => f.write_str("kv/value_drain"),
            HeadMetric::BbAttnFirst(Group::Dormant) => f.write_str("bb/attn_first_dormant"),
            HeadMetric::BbAttnFirst(Group::Trigger(i)) => write!(f, "bb/attn_first_trigger{i}"),
            HeadMetric::Score(name) => write!(f, "heads/{name}"),
        }
    }
}

/// The name of one recorded scalar (see the module docs for the layout).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Tag {
    Run(Scalar),
    SinkRate {
        eps: String,
        k: usize,
    },
    SlotRate {
        eps: String,
    },
    LayerRate {
        eps: String,
        layer: usize,
    },
    Layer(LayerMetric, usize),
    Head(HeadMetric, usize, usize),
    /// A learned scalar gain by its parameter name (`blocks.0.attn.alpha`), or one head's.
    Gain {
        param: String,
        head: Option<usize>,
    },
}

impl From<Scalar> for Tag {
    fn from(s: Scalar) -> Self {
        Tag::Run(s)
    }
}

impl Tag {
    /// Sink_k at ε (k from 1).
    pub fn sink_rate(eps: &str, k: usize) -> Tag {
        Tag::SinkRate {
            eps: eps.to_string(),
            k,
        }
    }

    /// Sink₁ at ε, the headline of a run.
    pub fn sink1(eps: &str) -> Tag {
        Tag::sink_rate(eps, 1)
    }

    /// Sink₁* on the slot at ε.
    pub fn slot_rate(eps: &str) -> Tag {
        Tag::SlotRate {
            eps: eps.to_string(),
        }
    }

    /// The family a tag belongs to, without its index: what a chart of "every layer" or
    /// "every head" of one metric selects (`act/norm_ratio`, `heads/induction`,
    /// `sink/rate_eps0.3`).
    pub fn family(&self) -> String {
        match self {
            Tag::Run(s) => s.name().to_string(),
            Tag::SinkRate { eps, .. } => format!("sink/rate_eps{eps}"),
            Tag::SlotRate { eps } => format!("sink/slot_rate_eps{eps}"),
            Tag::LayerRate { eps, .. } => format!("sink/layer_rate_eps{eps}"),
            Tag::Layer(m, _) => m.name().to_string(),
            Tag::Head(m, _, _) => m.to_string(),
            Tag::Gain { param, .. } => format!("gains/{param}"),
        }
    }

    /// A regular expression (TensorBoard's Custom Scalars syntax) for every tag of `family`
    /// ([`Tag::family`]) with an index, or for the index-less tag itself.
    pub fn family_regex(family: &str) -> String {
        format!("{}(/.*)?$", family.replace('.', r"\."))
    }
}

/// A regular expression for Sink_k at every ε (`sink/rate_eps{ε}/pos{kk}`, one k).
pub fn sink_rate_every_eps_regex(k: usize) -> String {
    format!(r"sink/rate_eps[0-9.]+/pos{k:02}$")
}

/// A regular expression for Bigram-Backcopy's first-token attention of every query group
/// (`bb/attn_first_{dormant,trigger<i>}/layer{ll}_head{hh}`).
pub fn bb_attn_first_regex() -> String {
    r"bb/attn_first_(dormant|trigger[0-9]+)/.*".to_string()
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Tag::Run(s) => f.write_str(s.name()),
            Tag::SinkRate { eps, k } => write!(f, "sink/rate_eps{eps}/pos{k:02}"),
            Tag::SlotRate { eps } => write!(f, "sink/slot_rate_eps{eps}"),
            Tag::LayerRate { eps, layer } => write!(f, "sink/layer_rate_eps{eps}/layer{layer:02}"),
            Tag::Layer(m, l) => write!(f, "{}/layer{l:02}", m.name()),
            Tag::Head(m, l, h) => write!(f, "{m}/layer{l:02}_head{h:02}"),
            Tag::Gain { param, head: None } => write!(f, "gains/{param}"),
            Tag::Gain {
                param,
                head: Some(h),
            } => write!(f, "gains/{param}/h{h}"),
        }
    }
}

/// An index written as digits only (`07`, `12`).
fn index(s: &str) -> Option<usize> {
    (!s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
        .then(|| s.parse().ok())
        .flatten()
}

/// ε as `eps_name` writes it: digits and at most one point.
fn eps(s: &str) -> Option<String> {
    let ok = !s.is_empty()
        && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        && s.bytes().filter(|&b| b == b'.').count() <= 1;
    ok.then(|| s.to_string())
}

fn head_metric(name: &str) -> Option<HeadMetric> {
    match name {
        "sink/importance_first" => return Some(HeadMetric::ImportanceFirst),
        "kv/value_drain" => return Some(HeadMetric::ValueDrain),
        "bb/attn_first_dormant" => return Some(HeadMetric::BbAttnFirst(Group::Dormant)),
        _ => {}
    }
    if let Some(i) = name.strip_prefix("bb/attn_first_trigger") {
        return index(i).map(|i| HeadMetric::BbAttnFirst(Group::Trigger(i)));
    }
    let score = name.strip_prefix("heads/")?;
    let ok = !score.is_empty()
        && score
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    ok.then(|| HeadMetric::Score(score.to_string()))
}

fn parse(s: &str) -> Option<Tag> {
    if let Some(rest) = s.strip_prefix("gains/") {
        let param_ok = |p: &str| {
            !p.is_empty()
                && p.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_')
        };
        let (param, head) = match rest.split_once("/h") {
            Some((p, h)) => (p, Some(index(h)?)),
            None => (rest, None),
        };
        return param_ok(param).then(|| Tag::Gain {
            param: param.to_string(),
            head,
        });
    }
    if let Some(rest) = s.strip_prefix("sink/rate_eps") {
        let (e, k) = rest.split_once("/pos")?;
        return Some(Tag::SinkRate {
            eps: eps(e)?,
            k: index(k)?,
        });
    }
    if let Some(e) = s.strip_prefix("sink/slot_rate_eps") {
        return Some(Tag::SlotRate { eps: eps(e)? });
    }
    if let Some(rest) = s.strip_prefix("sink/layer_rate_eps") {
        let (e, l) = rest.split_once("/layer")?;
        return Some(Tag::LayerRate {
            eps: eps(e)?,
            layer: index(l)?,
        });
    }
    if let Some(s) = Scalar::ALL.iter().find(|x| x.name() == s) {
        return Some(Tag::Run(*s));
    }
    let (name, key) = s.rsplit_once("/layer")?;
    if let Some((l, h)) = key.split_once("_head") {
        return Some(Tag::Head(head_metric(name)?, index(l)?, index(h)?));
    }
    let m = LayerMetric::ALL.iter().find(|m| m.name() == name)?;
    Some(Tag::Layer(*m, index(key)?))
}

impl FromStr for Tag {
    type Err = anyhow::Error;

    fn from_str(s: &str) -> Result<Self> {
        match parse(s) {
            Some(t) => Ok(t),
            None => bail!(
                "unknown metric tag `{s}` (a tag is one of {}; sink/rate_eps{{ε}}/pos{{kk}}; \
                 sink/slot_rate_eps{{ε}}; sink/layer_rate_eps{{ε}}/layer{{ll}}; \
                 {{metric}}/layer{{ll}} with metric one of {}; or \
                 {{metric}}/layer{{ll}}_head{{hh}} with metric sink/importance_first, \
                 kv/value_drain, bb/attn_first_{{dormant,trigger<i>}} or heads/<score>; \
                 gains/<parameter>[/h<h>])",
                Scalar::ALL.map(|s| s.name()).join(", "),
                LayerMetric::ALL.map(|m| m.name()).join(", "),
            ),
        }
    }
}

impl Serialize for Tag {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Tag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// One line of `metrics.jsonl`: the scalars recorded at `step`, `time` seconds after the
/// recorder opened (the segment's start, after a resume). A non-finite value is written as
/// JSON `null` and read back as NaN.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub step: u64,
    pub time: f64,
    #[serde(with = "nan_as_null")]
    pub scalars: BTreeMap<Tag, f64>,
}

impl Record {
    /// The value of `tag`, if the record holds it.
    pub fn get(&self, tag: &Tag) -> Option<f64> {
        self.scalars.get(tag).copied()
    }
}

mod nan_as_null {
    use super::Tag;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    /// Written sorted by the tag's string, as TensorBoard lists them.
    pub fn serialize<S: Serializer>(
        m: &BTreeMap<Tag, f64>,
        s: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        let by_name: BTreeMap<String, Option<f64>> = m
            .iter()
            .map(|(t, v)| (t.to_string(), v.is_finite().then_some(*v)))
            .collect();
        by_name.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> std::result::Result<BTreeMap<Tag, f64>, D::Error> {
        let m = BTreeMap::<Tag, Option<f64>>::deserialize(d)?;
        Ok(m.into_iter()
            .map(|(t, v)| (t, v.unwrap_or(f64::NAN)))
            .collect())
    }
}

/// The records of a `metrics.jsonl`, in file order. A line that is not a [`Record`] is an
/// error naming the file and the line, except an unfinished last line (no newline after it:
/// the write a killed run did not finish), which is left out.
pub fn read(path: &Path) -> Result<Vec<Record>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    Ok(parse_lines(&text, path)?
        .into_iter()
        .map(|(_, r)| r)
        .collect())
}

/// [`read`] of `text` (what `path` holds), each record with its line as written: a file that
/// keeps some records keeps their lines, not a re-printed copy (a float printed again after
/// serde_json's parse may differ in its last bit).
pub fn parse_lines<'t>(text: &'t str, path: &Path) -> Result<Vec<(&'t str, Record)>> {
    let unfinished = !text.is_empty() && !text.ends_with('\n');
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Record>(line) {
            Ok(r) => out.push((*line, r)),
            Err(_) if unfinished && i + 1 == lines.len() => {}
            Err(e) => bail!("{}:{}: not a metrics record: {e}", path.display(), i + 1),
        }
    }
    Ok(out)
}

/// [`read`], or no records when the file does not exist (a run that has not recorded yet).
pub fn read_if_present(path: &Path) -> Result<Vec<Record>> {
    if path.exists() {
        read(path)
    } else {
        Ok(Vec::new())
    }
}

#[cfg(test)]
mod tests;
