//! Signal propagation in deep skipless transformers (docs/reference.md §3.3): the U-SPA / E-SPA
//! target kernels, the attention matrices that realise them, and the token-kernel statistics
//! that `sinklab init-check` reports. Pure f64 maths: nothing here reads a config or a model.
//!
//! ```text
//! Σ_0 = I;  Σ_l = (1 − ρ_l) I + ρ_l 11ᵀ            (U-SPA, 1 − ρ_l = (1 − ρ_L)^{l/L})
//!           (Σ_l)_ij = exp(−γ_l |i − j|)           (E-SPA, 1 − e^{−2γ_l} = (1 − e^{−2γ_L})^{l/L})
//! L_l = chol(Σ_l) (lower);  A_l = L_l L_{l−1}⁻¹     (lower triangular: causal)
//! D_l = diag(A_l 1);  Γ_l = log(D_l⁻¹ A_l) on j ≤ i  (needs every causal entry of A_l > 0)
//! softmax(Γ_l) = D_l⁻¹ A_l, so at W_Q = 0:  D_l softmax(Γ_l + q kᵀ/√d_h) = A_l
//! ```
//!
//! With orthogonal (or identity) W_V W_O, an attention-only stack then maps a token kernel
//! `Σ_{l−1}` to `A_l Σ_{l−1} A_lᵀ = Σ_l` exactly, and the kernel never collapses to rank one.
//! For a sequence of T' < T tokens the leading T'×T' blocks are used: A_l is lower triangular,
//! so they realise the leading block of Σ_l. Everything is built in f64 and stored (f32) as
//! non-trained constants of each attention layer.

use std::fmt;

/// A target token kernel (the `model.attention.spa` choice, without its `none`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// U-SPA: `Σ_l = (1 − ρ_l) I + ρ_l 11ᵀ`, `rho` = ρ_L.
    Uniform { rho: f64 },
    /// E-SPA: `(Σ_l)_ij = exp(−γ_l |i − j|)`, `gamma` = γ_L.
    Exponential { gamma: f64 },
}

/// ρ_l (U-SPA) or γ_l (E-SPA; +∞ at l = 0) of layer `l` of `n_layers` (l = 0 is the input).
pub fn schedule(spa: &Target, l: usize, n_layers: usize) -> f64 {
    let frac = l as f64 / n_layers as f64;
    match *spa {
        Target::Uniform { rho } => 1.0 - (1.0 - rho).powf(frac),
        Target::Exponential { gamma } => {
            if l == 0 {
                f64::INFINITY
            } else {
                // 1 − e^{−2γ_l} = (1 − e^{−2γ_L})^{l/L}
                let c = (-(-2.0 * gamma).exp_m1()).powf(frac);
                -0.5 * (-c).ln_1p()
            }
        }
    }
}

/// The target kernel Σ_l, t×t row-major.
pub fn target(spa: &Target, l: usize, n_layers: usize, t: usize) -> Vec<f64> {
    let mut s = vec![0.0; t * t];
    for i in 0..t {
        for j in 0..t {
            s[i * t + j] = if i == j {
                1.0
            } else if l == 0 {
                0.0
            } else {
                match spa {
                    Target::Uniform { .. } => schedule(spa, l, n_layers),
                    Target::Exponential { .. } => {
                        (-schedule(spa, l, n_layers) * (i as f64 - j as f64).abs()).exp()
                    }
                }
            };
        }
    }
    s
}

/// Lower Cholesky factor of a symmetric positive-definite n×n matrix (None if not PD).
pub fn cholesky(a: &[f64], n: usize) -> Option<Vec<f64>> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let mut sum = a[i * n + j];
            for k in 0..j {
                sum -= l[i * n + k] * l[j * n + k];
            }
            if i == j {
                if sum <= 0.0 || !sum.is_finite() {
                    return None;
                }
                l[i * n + i] = sum.sqrt();
            } else {
                l[i * n + j] = sum / l[j * n + j];
            }
        }
    }
    Some(l)
}

/// `X = B C⁻¹` for lower-triangular B and C (n×n), by substitution row by row:
/// `Σ_{k ≥ j} x_ik c_kj = b_ij`, solved for j = i, i−1, …, 0.
fn right_divide_lower(b: &[f64], c: &[f64], n: usize) -> Vec<f64> {
    let mut x = vec![0.0; n * n];
    for i in 0..n {
        for j in (0..=i).rev() {
            let mut sum = b[i * n + j];
            for k in j + 1..=i {
                sum -= x[i * n + k] * c[k * n + j];
            }
            x[i * n + j] = sum / c[j * n + j];
        }
    }
    x
}

/// One layer's realisation of its SPA attention matrix.
#[derive(Debug, Clone)]
pub struct SpaLayer {
    /// A_l = L_l L_{l−1}⁻¹ (t×t, lower triangular).
    pub a: Vec<f64>,
    /// Γ_l = log(A_ij / D_i) on j ≤ i, 0 above the diagonal (masked anyway), t×t.
    pub bias: Vec<f64>,
    /// D_l = row sums of A_l, t.
    pub scale: Vec<f64>,
    /// The smallest causal entry of A_l (> 0 for every layer that `spa_layers` returns).
    pub min_entry: f64,
}

/// A causal entry of some A_l that is not positive, so softmax cannot realise it.
#[derive(Debug, Clone, PartialEq)]
pub struct SpaError {
    pub spa: Target,
    pub layer: usize,
    pub n_layers: usize,
    pub t: usize,
    pub i: usize,
    pub j: usize,
    pub value: f64,
}

impl fmt::Display for SpaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, key, x) = match self.spa {
            Target::Uniform { rho } => ("U-SPA", "rho", rho),
            Target::Exponential { gamma } => ("E-SPA", "gamma", gamma),
        };
        write!(
            f,
            "{name} with {key} = {x} over {} layers and ctx = {}: layer {} (1-based) needs \
             A_l[{}, {}] = {:.3e}, which is not a positive normal float, so no softmax bias Γ_l = log(A/D) \
             realises it; choose a larger {key} (a slower decay), fewer layers or a shorter ctx",
            self.n_layers, self.t, self.layer, self.i, self.j, self.value
        )
    }
}

impl std::error::Error for SpaError {}

/// Build A_l, Γ_l and D_l for layers 1..=n_layers (index 0 of the result is layer 1) at
/// sequence length t. Fails on the first non-positive causal entry (or underflow to 0).
pub fn spa_layers(spa: &Target, n_layers: usize, t: usize) -> Result<Vec<SpaLayer>, SpaError> {
    let chol = |l: usize| -> Vec<f64> {
        cholesky(&target(spa, l, n_layers, t), t).expect("SPA targets are positive definite")
    };
    let mut prev = chol(0);
    let mut out = Vec::with_capacity(n_layers);
    for l in 1..=n_layers {
        let cur = chol(l);
        let a = right_divide_lower(&cur, &prev, t);
        let mut bias = vec![0.0; t * t];
        let mut scale = vec![0.0; t];
        let mut min_entry = f64::INFINITY;
        for i in 0..t {
            for j in 0..=i {
                let v = a[i * t + j];
                // Positive in exact arithmetic is not enough: the entry must survive as a
                // positive normal f64 so that its log is finite.
                if v.is_nan() || v < f64::MIN_POSITIVE {
                    return Err(SpaError {
                        spa: *spa,
                        layer: l,
                        n_layers,
                        t,
                        i,
                        j,
                        value: v,
                    });
                }
                min_entry = min_entry.min(v);
                scale[i] += v;
            }
            for j in 0..=i {
                bias[i * t + j] = (a[i * t + j] / scale[i]).ln();
            }
        }
        out.push(SpaLayer {
            a,
            bias,
            scale,
            min_entry,
        });
        prev = cur;
    }
    Ok(out)
}

/// Token-kernel statistics of one layer's representations, averaged over a batch.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelStats {
    /// Mean over sequences and pairs i ≠ j of `cos(x_i, x_j)` (1 = rank collapse).
    pub mean_cos: f64,
    /// Mean over sequences and tokens of `‖x_i‖² / d` (the kernel's diagonal scale).
    pub diag: f64,
    /// The batch-mean cosine matrix, t×t.
    pub cos: Vec<f64>,
}

/// Statistics of representations `x` laid out (B, T, d) row-major.
pub fn kernel_stats(x: &[f32], b: usize, t: usize, d: usize) -> KernelStats {
    let mut cos = vec![0.0; t * t];
    let mut diag = 0.0;
    for s in 0..b {
        let seq = &x[s * t * d..(s + 1) * t * d];
        let norms: Vec<f64> = (0..t)
            .map(|i| {
                seq[i * d..(i + 1) * d]
                    .iter()
                    .map(|&v| (v as f64).powi(2))
                    .sum::<f64>()
            })
            .collect();
        diag += norms.iter().sum::<f64>() / d as f64;
        for i in 0..t {
            for j in 0..t {
                let dot: f64 = seq[i * d..(i + 1) * d]
                    .iter()
                    .zip(&seq[j * d..(j + 1) * d])
                    .map(|(&p, &q)| p as f64 * q as f64)
                    .sum();
                let denom = (norms[i] * norms[j]).sqrt();
                cos[i * t + j] += if denom > 0.0 { dot / denom } else { 0.0 };
            }
        }
    }
    cos.iter_mut().for_each(|c| *c /= b as f64);
    let off: f64 = (0..t)
        .flat_map(|i| (0..t).filter(move |&j| j != i).map(move |j| (i, j)))
        .map(|(i, j)| cos[i * t + j])
        .sum();
    KernelStats {
        mean_cos: if t > 1 {
            off / (t * (t - 1)) as f64
        } else {
            0.0
        },
        diag: diag / (b * t) as f64,
        cos,
    }
}

/// `‖M − Σ‖_F / ‖Σ‖_F` for t×t matrices.
pub fn relative_distance(m: &[f64], sigma: &[f64]) -> f64 {
    let num: f64 = m.iter().zip(sigma).map(|(a, b)| (a - b).powi(2)).sum();
    let den: f64 = sigma.iter().map(|b| b * b).sum();
    (num / den).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matmul_t(a: &[f64], b: &[f64], n: usize) -> Vec<f64> {
        // a · bᵀ
        let mut c = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                c[i * n + j] = (0..n).map(|k| a[i * n + k] * b[j * n + k]).sum();
            }
        }
        c
    }

    #[test]
    fn schedules_end_at_the_final_value_and_start_at_identity() {
        let e = Target::Exponential { gamma: 0.05 };
        assert!(schedule(&e, 0, 12).is_infinite());
        assert!((schedule(&e, 12, 12) - 0.05).abs() < 1e-12);
        // γ decreases with depth.
        assert!(schedule(&e, 3, 12) > schedule(&e, 4, 12));
        let u = Target::Uniform { rho: 0.8 };
        assert!(schedule(&u, 0, 12).abs() < 1e-15);
        assert!((schedule(&u, 12, 12) - 0.8).abs() < 1e-12);
        // 1 − ρ_6 = (0.2)^{1/2}
        assert!((schedule(&u, 6, 12) - (1.0 - 0.2f64.sqrt())).abs() < 1e-12);
    }

    #[test]
    fn cholesky_factors_and_a_maps_kernels() {
        for spa in [
            Target::Exponential { gamma: 0.05 },
            Target::Uniform { rho: 0.8 },
        ] {
            let (t, n) = (16, 6);
            let layers = spa_layers(&spa, n, t).expect("positive");
            for l in 1..=n {
                let s_prev = target(&spa, l - 1, n, t);
                let s = target(&spa, l, n, t);
                let a = &layers[l - 1].a;
                // A Σ_{l−1} Aᵀ = Σ_l
                let as_ = {
                    let mut c = vec![0.0; t * t];
                    for i in 0..t {
                        for j in 0..t {
                            c[i * t + j] = (0..t).map(|k| a[i * t + k] * s_prev[k * t + j]).sum();
                        }
                    }
                    c
                };
                let got = matmul_t(&as_, a, t);
                assert!(relative_distance(&got, &s) < 1e-12, "layer {l}");
                // causal
                for i in 0..t {
                    for j in i + 1..t {
                        assert_eq!(a[i * t + j], 0.0);
                    }
                }
                // D softmax(Γ) = A
                let lay = &layers[l - 1];
                for i in 0..t {
                    let z: f64 = (0..=i).map(|j| lay.bias[i * t + j].exp()).sum();
                    for j in 0..=i {
                        let v = lay.scale[i] * lay.bias[i * t + j].exp() / z;
                        assert!((v - a[i * t + j]).abs() < 1e-12 * a[i * t + j].max(1e-3));
                    }
                }
            }
        }
    }

    #[test]
    fn e_spa_matches_the_closed_form_of_the_ar1_cholesky() {
        // For Σ_ij = r^{|i−j|}: A_ij = r^{i−j−1} s (r − r')/s' (1 ≤ j < i), diagonal s/s'
        // (j ≥ 1), column 0 r^{i−1}(r − s r'/s'), with s = sqrt(1 − r²) of the current layer and
        // r', s' of the previous one.
        let spa = Target::Exponential { gamma: 0.1 };
        let (t, n) = (24, 4);
        let layers = spa_layers(&spa, n, t).unwrap();
        for l in 2..=n {
            let r = (-schedule(&spa, l, n)).exp();
            let rp = (-schedule(&spa, l - 1, n)).exp();
            let (s, sp) = ((1.0 - r * r).sqrt(), (1.0 - rp * rp).sqrt());
            let a = &layers[l - 1].a;
            for i in 1..t {
                let c0 = r.powi(i as i32 - 1) * (r - s * rp / sp);
                assert!((a[i * t] - c0).abs() < 1e-12, "({i},0)");
                assert!((a[i * t + i] - s / sp).abs() < 1e-12);
                for j in 1..i {
                    let v = r.powi((i - j - 1) as i32) * s * (r - rp) / sp;
                    assert!((a[i * t + j] - v).abs() < 1e-12 * v.max(1e-6), "({i},{j})");
                }
            }
        }
    }

    #[test]
    fn steep_decay_is_refused_with_the_entry() {
        // γ_L = 20 at ctx 64 needs entries ~ e^{−20·62}: they underflow to 0.
        let e = spa_layers(&Target::Exponential { gamma: 20.0 }, 4, 64).unwrap_err();
        assert!(e.value < f64::MIN_POSITIVE);
        let msg = e.to_string();
        assert!(msg.contains("E-SPA with gamma = 20"), "{msg}");
    }

    #[test]
    fn kernel_stats_of_identical_and_orthogonal_tokens() {
        let d = 4;
        let same: Vec<f32> = (0..3).flat_map(|_| [1.0, 2.0, 0.0, -1.0]).collect();
        let st = kernel_stats(&same, 1, 3, d);
        assert!((st.mean_cos - 1.0).abs() < 1e-12);
        assert!((st.diag - 6.0 / 4.0).abs() < 1e-12);
        let mut orth = vec![0f32; 3 * d];
        for i in 0..3 {
            orth[i * d + i] = 2.0;
        }
        let st = kernel_stats(&orth, 1, 3, d);
        assert!(st.mean_cos.abs() < 1e-12);
        assert!((st.diag - 1.0).abs() < 1e-12);
    }
}
