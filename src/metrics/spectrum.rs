//! The matrix-based entropy of a layer's token representations (Queipo-de-Llano et al.,
//! "Attention Sinks and Compression Valleys in LLMs are Two Sides of the Same Coin", arXiv
//! 2510.06477): for the T × d hidden states X of one sequence, `S = −Σ_i λ_i ln λ_i` over the
//! eigenvalues λ of `K / tr K`, `K = X Xᵀ` (von Neumann entropy, 0 ln 0 = 0). A token with a
//! massive norm dominates K, so S drops towards 0 (a "compression valley") in the layers where
//! the first token's norm is massive; T tokens of equal norm in orthogonal directions give
//! ln T. sinklab does not centre X: the uncentred Gram matrix is the one whose compression the
//! paper bounds by the massive token's share of ‖X‖²_F (centring would remove the common
//! direction the massive activation creates).

use super::Array;
use super::eigen::sym_eigen;

/// `S = −Σ λ ln λ` over the eigenvalues of `K / tr K`, K = X Xᵀ, for X (t × d) row-major, in
/// nats; 0 for X = 0. The spectrum comes from the smaller of X Xᵀ (t × t) and Xᵀ X (d × d),
/// which share their non-zero eigenvalues; rounding's tiny negative eigenvalues count as 0.
pub fn matrix_entropy(x: &[f32], t: usize, d: usize) -> f64 {
    assert_eq!(x.len(), t * d, "X must be t × d");
    let (n, gram): (usize, Vec<f64>) = if t <= d {
        let mut k = vec![0.0; t * t];
        for i in 0..t {
            for j in 0..=i {
                let dot: f64 = x[i * d..(i + 1) * d]
                    .iter()
                    .zip(&x[j * d..(j + 1) * d])
                    .map(|(&a, &b)| a as f64 * b as f64)
                    .sum();
                k[i * t + j] = dot;
                k[j * t + i] = dot;
            }
        }
        (t, k)
    } else {
        let mut k = vec![0.0; d * d];
        for row in x.chunks_exact(d) {
            for i in 0..d {
                let a = row[i] as f64;
                for j in 0..=i {
                    k[i * d + j] += a * row[j] as f64;
                }
            }
        }
        for i in 0..d {
            for j in 0..i {
                k[j * d + i] = k[i * d + j];
            }
        }
        (d, k)
    };
    let trace: f64 = (0..n).map(|i| gram[i * n + i]).sum();
    if trace <= 0.0 {
        return 0.0;
    }
    let (vals, _) = sym_eigen(&gram, n);
    vals.iter()
        .map(|&v| (v / trace).max(0.0))
        .filter(|&l| l > 0.0)
        .map(|l| -l * l.ln())
        .sum()
}

/// One layer's representation entropy, averaged over sequences.
#[derive(Debug, Clone, Copy, PartialEq, Default, serde::Serialize)]
pub struct Entropy {
    /// S in nats ([`matrix_entropy`]).
    pub nats: f64,
    /// S / ln min(T, d): 1 when the T tokens spread evenly over as many orthogonal directions
    /// as the shape allows, 0 when one direction holds them all.
    pub normalised: f64,
}

/// [`Entropy`] of hidden states (B, T, d): the mean over sequences.
pub fn representation_entropy(hidden: &Array) -> Entropy {
    let [b, t, d] = hidden.shape[..] else {
        panic!("hidden states must be (B, T, D), got {:?}", hidden.shape)
    };
    let ceiling = (t.min(d) as f64).ln();
    let nats = hidden
        .data
        .chunks_exact(t * d)
        .map(|seq| matrix_entropy(seq, t, d))
        .sum::<f64>()
        / b.max(1) as f64;
    Entropy {
        nats,
        normalised: if ceiling > 0.0 { nats / ceiling } else { 0.0 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Orthogonal rows of equal norm: ln t; one row: 0; two rows of norms 3 and 4, orthogonal:
    /// λ = (9, 16)/25. The t × t and d × d routes agree.
    #[test]
    fn entropy_by_hand() {
        let eye: Vec<f32> = (0..16)
            .map(|i| if i % 5 == 0 { 2.0 } else { 0.0 })
            .collect();
        assert!((matrix_entropy(&eye, 4, 4) - 4f64.ln()).abs() < 1e-12);
        assert!(matrix_entropy(&[0.0, 5.0, 0.0], 1, 3).abs() < 1e-12);
        let two = [3.0, 0.0, 0.0, 0.0, 4.0, 0.0];
        let want = -(0.36f64 * 0.36f64.ln() + 0.64 * 0.64f64.ln());
        assert!((matrix_entropy(&two, 2, 3) - want).abs() < 1e-12);
        // the same rows as 3 × 2 (t > d): Xᵀ X
        let tall = [3.0, 0.0, 0.0, 4.0, 0.0, 0.0];
        assert!((matrix_entropy(&tall, 3, 2) - want).abs() < 1e-12);
        assert_eq!(matrix_entropy(&[0.0; 6], 2, 3), 0.0);
    }
}
