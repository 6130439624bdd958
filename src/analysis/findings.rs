//! The typed result of `sinklab analyze` ([`AnalysisReport`], written as `analysis.json`):
//! every struct the file holds, filled by [`super::inspect`] and printed by the command.

use super::geometry::QkHead;
use crate::metrics::SinkReport;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What `sinklab analyze` found (`analysis.json`).
#[derive(Debug, Clone, Serialize)]
pub struct AnalysisReport {
    pub run_dir: PathBuf,
    pub checkpoint: PathBuf,
    pub step: u64,
    pub probe: ProbeInfo,
    /// `Sink` for row-stochastic attention, `Sink*` for a proxy (non-softmax normalisers).
    pub metric: String,
    /// Probe kind (`natural`, `as_trained`, `random`, `repeated`) → its sink metrics.
    pub kinds: BTreeMap<String, KindSummary>,
    /// [layer][head] first-token importance α₁ on natural text.
    pub importance_first: Vec<Vec<f64>>,
    pub activations: Vec<LayerActivations>,
    /// [layer][head] q·k geometry of the first-token logit.
    pub qk: Vec<Vec<QkHead>>,
    pub bars: BarsReport,
    pub attention_maps: Vec<MapFile>,
    /// Sink₁ beside the representation entropy, outliers and secondary sinks, per layer of the
    /// natural probe.
    pub valley: super::valley::Valley,
    pub files: Vec<String>,
}

/// The probe set of an analysis.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeInfo {
    pub sequences: usize,
    /// The text file the natural probes came from (None: the validation split).
    pub text: Option<PathBuf>,
    /// Tokens of that text.
    pub text_tokens: Option<usize>,
    pub len: usize,
    pub bos: bool,
    pub eps: Vec<f64>,
    pub k_max: usize,
    pub seed: u64,
    /// F-Attn of uniform causal attention at this length (H_T / T): the floor F-Attn is read
    /// against.
    pub f_attn_uniform: f64,
}

/// The sink metrics of one probe kind.
#[derive(Debug, Clone, Serialize)]
pub struct KindSummary {
    pub metric: String,
    /// ε → Sink_k^ε (%) for k = 1..=k_max.
    pub sink_rate: BTreeMap<String, Vec<f64>>,
    /// ε → [layer][head] Sink₁^ε (%): the share of sequences where the head's α₁ > ε.
    pub sink1_by_head: BTreeMap<String, Vec<Vec<f64>>>,
    /// ε → [layer] Sink₁^ε (%), the mean over the layer's heads.
    pub sink1_by_layer: BTreeMap<String, Vec<f64>>,
    /// [layer][head] first-token importance α₁ (mean over sequences).
    pub importance_first: Vec<Vec<f64>>,
    /// [layer] first-token norm ratio ‖h₁‖ / mean ‖h_rest‖ of the layer's output.
    pub norm_ratio: Vec<f64>,
    /// ε → Sink₁* on the slot (%), models with slots or sink tokens.
    pub slot_rate: BTreeMap<String, f64>,
    pub slot_mass: Vec<Option<f64>>,
    pub first_token_mass: Vec<f64>,
    pub f_attn: f64,
    pub m_act: f64,
    pub entropy: Vec<f64>,
    /// The block output's kurtosis averaged over layers (Bondarenko et al.).
    pub kurtosis: f64,
    /// Secondary sinks per (layer, sequence, head) and the share (%) with one, at ε = 0.3.
    pub secondary_count: f64,
    pub secondary_heads: f64,
    /// [layer] matrix entropy S / ln min(T, d) of the block output.
    pub repr_entropy: Vec<f64>,
}

impl KindSummary {
    pub fn new(report: &SinkReport, metric: &str) -> Self {
        Self {
            metric: metric.to_string(),
            sink_rate: report.sink_rate.clone(),
            sink1_by_head: report.sink1_by_head.clone(),
            sink1_by_layer: report
                .sink1_by_head
                .iter()
                .map(|(e, layers)| {
                    let means = layers
                        .iter()
                        .map(|h| h.iter().sum::<f64>() / h.len().max(1) as f64)
                        .collect();
                    (e.clone(), means)
                })
                .collect(),
            importance_first: report.importance_first.clone(),
            norm_ratio: report.hidden.iter().map(|h| h.norm_ratio).collect(),
            slot_rate: report.slot_rate.clone(),
            slot_mass: report.slot_mass.clone(),
            first_token_mass: report.first_mass.clone(),
            f_attn: report.f_attn(),
            m_act: report.m_act(),
            entropy: report.entropy.clone(),
            kurtosis: report.kurtosis(),
            secondary_count: report.secondary_sinks().0,
            secondary_heads: report.secondary_sinks().1,
            repr_entropy: report.repr_entropy.iter().map(|e| e.normalised).collect(),
        }
    }
}

/// Activations of one layer's output on natural text.
#[derive(Debug, Clone, Serialize)]
pub struct LayerActivations {
    pub layer: usize,
    pub norm_first: f64,
    pub norm_rest: f64,
    pub norm_ratio: f64,
    pub top3: [f64; 3],
    pub median_abs: f64,
    pub massive_count: f64,
    pub massive_channels: Vec<ChannelCount>,
    pub top_channels: Vec<TopChannel>,
    pub key_norm_first: f64,
    pub key_norm_rest: f64,
    pub value_norm_first: f64,
    pub value_norm_rest: f64,
    pub norm_by_position: Vec<f64>,
}

/// How often a channel holds a massive activation.
#[derive(Debug, Clone, Serialize)]
pub struct ChannelCount {
    pub channel: usize,
    pub count: usize,
}

/// A channel with one of the largest |h|, and how often that maximum sits on token 1.
#[derive(Debug, Clone, Serialize)]
pub struct TopChannel {
    pub channel: usize,
    pub max_abs: f64,
    pub share_at_token1: f64,
}

/// Attention bars (high mean, low variance received attention) on natural text.
#[derive(Debug, Clone, Serialize)]
pub struct BarsReport {
    pub thresholds: BarThresholds,
    /// [layer][head] bars per sequence.
    pub per_sequence_by_layer_head: Vec<Vec<f64>>,
    pub total: usize,
    /// The most frequent bar tokens (up to 20).
    pub tokens: Vec<BarToken>,
    /// Mean dark ratio (W_U bands) of the bar tokens' residual stream.
    pub dark_ratio_bars: Option<f64>,
    pub dark_ratio_first_by_layer: Vec<f64>,
    pub dark_ratio_rest_by_layer: Vec<f64>,
    pub bands: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BarThresholds {
    pub mean_gt: f64,
    pub std_lt: f64,
    pub min_queries: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BarToken {
    pub token: u32,
    pub text: String,
    pub count: usize,
    pub dark_ratio: f64,
}

/// An attention map written as a PNG.
#[derive(Debug, Clone, Serialize)]
pub struct MapFile {
    pub layer: usize,
    pub head: usize,
    pub file: String,
}
