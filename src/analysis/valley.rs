//! `sinklab analyze`'s outlier and compression section (docs/reference.md §4): per layer of the
//! natural probe, Sink₁ beside the matrix entropy of the token representations (Queipo-de-Llano
//! et al. 2025: the sink and the entropy drop share their layers), Bondarenko et al.'s kurtosis
//! and ∞-norm of the residual stream and the attention output, and Wong et al.'s secondary
//! sinks. [`Valley::of`] is the typed report (no I/O), [`section`] draws `valley.png`.

use super::Output;
use crate::metrics::{HEADLINE_EPS, SinkReport};
use crate::plot::{self, LinePlot, Scale, Series};
use anyhow::Result;
use serde::Serialize;

/// The outlier and compression findings of one probe, layer by layer (block outputs).
#[derive(Debug, Clone, Serialize)]
pub struct Valley {
    /// [layer] Sink₁ at the headline ε (%).
    pub sink1: Vec<f64>,
    /// [layer] matrix entropy S / ln min(T, d) of the block output.
    pub entropy_norm: Vec<f64>,
    /// [layer] S in nats.
    pub entropy: Vec<f64>,
    /// [layer] kurtosis and ∞-norm of the block output (mean over sequences).
    pub kurtosis: Vec<f64>,
    pub max_abs: Vec<f64>,
    /// [layer] the same of the attention output after W_O.
    pub attn_out_kurtosis: Vec<f64>,
    pub attn_out_max_abs: Vec<f64>,
    /// [layer] share (%) of (sequence, head) with a secondary sink, and their mean count.
    pub secondary_heads: Vec<f64>,
    pub secondary_count: Vec<f64>,
    /// The positions (1-based) most often a secondary sink over every (layer, sequence, head),
    /// with that share (%), up to 8.
    pub secondary_positions: Vec<(usize, f64)>,
    /// The layer of the lowest entropy and the layer of the highest Sink₁ (first of ties).
    pub entropy_min_layer: usize,
    pub sink1_max_layer: usize,
    /// Spearman's rank correlation over layers between Sink₁ and the entropy (negative when
    /// the sink layers are the low-entropy ones); None with fewer than 3 layers or a constant.
    pub spearman: Option<f64>,
}

impl Valley {
    /// The section's numbers from a probe's report.
    pub fn of(r: &SinkReport) -> Self {
        let sink1 = r.sink1_by_layer().unwrap_or_default();
        let entropy_norm: Vec<f64> = r.repr_entropy.iter().map(|e| e.normalised).collect();
        let n = r.secondary.len().max(1) as f64;
        let t = r.secondary.first().map_or(0, |s| s.by_position.len());
        let mut positions: Vec<(usize, f64)> = (0..t)
            .map(|k| {
                let share = r.secondary.iter().map(|s| s.by_position[k]).sum::<f64>() / n;
                (k + 1, share)
            })
            .filter(|&(_, s)| s > 0.0)
            .collect();
        positions.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        positions.truncate(8);
        Valley {
            entropy_min_layer: argmin(&entropy_norm),
            sink1_max_layer: argmin(&sink1.iter().map(|x| -x).collect::<Vec<_>>()),
            spearman: spearman(&sink1, &entropy_norm),
            entropy: r.repr_entropy.iter().map(|e| e.nats).collect(),
            kurtosis: r.outliers.iter().map(|o| o.kurtosis).collect(),
            max_abs: r.outliers.iter().map(|o| o.max_abs).collect(),
            attn_out_kurtosis: r.attn_out.iter().map(|o| o.kurtosis).collect(),
            attn_out_max_abs: r.attn_out.iter().map(|o| o.max_abs).collect(),
            secondary_heads: r.secondary.iter().map(|s| s.heads).collect(),
            secondary_count: r.secondary.iter().map(|s| s.count).collect(),
            secondary_positions: positions,
            sink1,
            entropy_norm,
        }
    }
}

/// The index of the smallest value (the first of ties; 0 for none).
fn argmin(xs: &[f64]) -> usize {
    xs.iter()
        .enumerate()
        .fold(
            (0, f64::INFINITY),
            |(i, m), (j, &x)| if x < m { (j, x) } else { (i, m) },
        )
        .0
}

/// Average ranks (ties share the mean of their ranks).
fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && xs[order[j + 1]] == xs[order[i]] {
            j += 1;
        }
        for &o in &order[i..=j] {
            r[o] = (i + j) as f64 / 2.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's ρ: Pearson's correlation of the average ranks; None with fewer than 3 values or
/// a constant series.
pub fn spearman(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.len() != b.len() || a.len() < 3 {
        return None;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let m = (a.len() - 1) as f64 / 2.0;
    let (mut sab, mut saa, mut sbb) = (0.0, 0.0, 0.0);
    for (x, y) in ra.iter().zip(&rb) {
        sab += (x - m) * (y - m);
        saa += (x - m) * (x - m);
        sbb += (y - m) * (y - m);
    }
    (saa > 0.0 && sbb > 0.0).then(|| sab / (saa * sbb).sqrt())
}

/// [`Valley::of`] the natural probe, and `valley.png`: Sink₁ and the entropy (both in %) by layer.
pub fn section(r: &SinkReport, out: &mut Output) -> Result<Valley> {
    let v = Valley::of(r);
    let per_layer = |ys: &[f64], scale: f64| -> Vec<(f64, f64)> {
        ys.iter()
            .enumerate()
            .map(|(l, y)| (l as f64, y * scale))
            .collect()
    };
    let series = vec![
        Series {
            name: format!("Sink₁ (ε = {HEADLINE_EPS}, %)"),
            points: per_layer(&v.sink1, 1.0),
            err: None,
        },
        Series {
            name: "entropy S / ln min(T, d) (%)".into(),
            points: per_layer(&v.entropy_norm, 100.0),
            err: None,
        },
        Series {
            name: "heads with a secondary sink (%)".into(),
            points: per_layer(&v.secondary_heads, 1.0),
            err: None,
        },
    ];
    let png = plot::lines(&LinePlot {
        title: "sink and compression by layer (natural text)",
        x_label: "layer (block output)",
        y_label: "%",
        series: &series,
        x_scale: Scale::Integer,
        y_scale: Scale::Linear,
        hlines: &[],
        vlines: &[],
        markers: true,
    })?;
    out.png("valley.png", "analyze/valley", png)?;
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_by_hand() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        assert_eq!(
            spearman(&[1.0, 2.0, 3.0, 4.0], &[10.0, 20.0, 30.0, 40.0]),
            Some(1.0)
        );
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        // ties share ranks: a = (0, 0, 1) → (0.5, 0.5, 2), b = (1, 2, 3) → (0, 1, 2)
        let r = spearman(&[0.0, 0.0, 1.0], &[1.0, 2.0, 3.0]).unwrap();
        assert!((r - 0.866_025_403_784_438_6).abs() < 1e-12, "{r}");
        assert_eq!(argmin(&[3.0, 1.0, 1.0, 2.0]), 1);
    }
}
