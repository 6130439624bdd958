//! Outlier metrics of Bondarenko, Nagel and Blankevoort (NeurIPS 2023; their code
//! `outlier-free-transformers`, `run_clm.py` with `transformers_language/utils.py::kurtosis`):
//! for one layer's activations (B, T, d) — the residual stream after a block, or the attention
//! output after W_O — each sequence's T·d values are one sample:
//!
//! - kurtosis `μ₄ / (σ⁴ + 1e-6)`, μ₄ the mean fourth power of the deviations from the sample
//!   mean and σ the sample's Bessel-corrected standard deviation (`torch.std`), Pearson's (a
//!   Gaussian gives about 3);
//! - the ∞-norm `max |x|` over the sample;
//!
//! each averaged over the sequences (their `AverageMeter`). Their code flattens a sequence's
//! tokens and channels together (`x.view(B, -1)`): the kurtosis is of the whole layer output,
//! not a per-channel kurtosis averaged over channels. Their tables then report the largest
//! ∞-norm over layers and the kurtosis averaged over layers (sinklab: `act/m_act`, the largest
//! `act/top1`, and `act/kurtosis`).

use super::Array;

/// The ε of the kurtosis's denominator (their `kurtosis(x, eps=1e-6)`).
pub const KURTOSIS_EPS: f64 = 1e-6;

/// Pearson kurtosis of one sample: `μ₄ / (σ⁴ + ε)` with σ Bessel-corrected (n − 1), as
/// Bondarenko et al.'s code computes it; 0 for fewer than two values.
pub fn kurtosis(x: &[f32]) -> f64 {
    let n = x.len();
    if n < 2 {
        return 0.0;
    }
    let mean = x.iter().map(|&v| v as f64).sum::<f64>() / n as f64;
    let (mut m2, mut m4) = (0.0, 0.0);
    for &v in x {
        let d = v as f64 - mean;
        let d2 = d * d;
        m2 += d2;
        m4 += d2 * d2;
    }
    let var = m2 / (n - 1) as f64;
    (m4 / n as f64) / (var * var + KURTOSIS_EPS)
}

/// One layer's outlier statistics: each a mean over sequences.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Outliers {
    /// Kurtosis of each sequence's (T, d) values ([`kurtosis`]).
    pub kurtosis: f64,
    /// `max |x|` of each sequence.
    pub max_abs: f64,
}

/// [`Outliers`] of activations (B, T, d).
pub fn outliers(x: &Array) -> Outliers {
    let [b, t, d] = x.shape[..] else {
        panic!("activations must be (B, T, D), got {:?}", x.shape)
    };
    let mut out = Outliers::default();
    for seq in x.data.chunks_exact(t * d) {
        out.kurtosis += kurtosis(seq);
        out.max_abs += seq.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
    }
    out.kurtosis /= b.max(1) as f64;
    out.max_abs /= b.max(1) as f64;
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// By hand: [0, 0, 0, 4] has mean 1, deviations (−1, −1, −1, 3), μ₄ = (1 + 1 + 1 + 81)/4
    /// = 21, σ² = 12 / 3 = 4, kurtosis 21 / (16 + 1e-6).
    #[test]
    fn kurtosis_by_hand() {
        let k = kurtosis(&[0.0, 0.0, 0.0, 4.0]);
        assert!((k - 21.0 / (16.0 + 1e-6)).abs() < 1e-12, "{k}");
        // constant values: μ₄ = 0
        assert_eq!(kurtosis(&[2.0; 5]), 0.0);
        // one large entry among many small ones has a large kurtosis
        let mut x = vec![0.01f32; 999];
        x.push(100.0);
        assert!(kurtosis(&x) > 900.0);
    }

    #[test]
    fn outliers_average_over_sequences() {
        let a = Array::new(
            vec![2, 2, 2],
            vec![0.0, 0.0, 0.0, 4.0, 1.0, -1.0, 1.0, -3.0],
        );
        let o = outliers(&a);
        assert!((o.max_abs - 3.5).abs() < 1e-12);
        // second sequence: mean −0.5, deviations (1.5, −0.5, 1.5, −2.5): μ₄ = (5.0625 · 2 +
        // 0.0625 + 39.0625) / 4 = 12.3125, σ² = (2.25 · 2 + 0.25 + 6.25) / 3 = 11/3
        let k2 = 12.3125 / ((11.0f64 / 3.0).powi(2) + 1e-6);
        let want = (21.0 / (16.0 + 1e-6) + k2) / 2.0;
        assert!((o.kurtosis - want).abs() < 1e-9, "{} vs {want}", o.kurtosis);
    }
}
