//! Dark signals (Cancedda, ACL 2024; docs/reference.md §7) as pure f64 maths on host matrices.
//!
//! A residual-side matrix M (d × n) — the unembedding W_U (d × V) as the paper decomposes it,
//! or `diag(g) W_U` with the final norm's gain g folded in (the map the normalised residual
//! stream actually meets; `sinklab dark --w-u folded`), or the embedding `Eᵀ` (d × V) — has
//! left singular vectors `u_1..u_d` in the residual space, by descending singular
//! value. They are split into `n_bands` contiguous bands of (nearly) equal size, band j holding
//! vectors `⌊(j−1)d/n⌋ .. ⌊jd/n⌋`; the last band is the "dark" band. With `V_S` the vectors of
//! a set S of bands, the projector is `Φ_S = V_S V_Sᵀ`.
//!
//! - band energy of h: `‖V_jᵀ h‖² / ‖h‖²` (sums to 1 over the bands);
//! - dark ratio of h: `‖Φ_dark h‖ / ‖(I − Φ_dark) h‖`;
//! - write share of a write matrix W (rows in the residual space, e.g. one head's rows of W_O
//!   or W_down): `‖W V_j‖²_F / ‖W‖²_F`;
//! - filters: `Φ_k` keeps bands 1..k; `Ω_k` keeps bands 1..k and the dark band ("sink
//!   preserving"); `Ψ_k = I − Φ_{e,(k+1):n} Φ_{u,(k+1):n}` removes the joint tail of the W_E
//!   and W_U band projectors from band k+1 on.
//!
//! Eigenvectors come from cyclic Jacobi rotations on the Gram matrix `M Mᵀ` (exact to f64
//! rounding; d ≤ a few thousand).

use crate::model::HostRng;

/// A d × d row-major matrix.
pub type Mat = Vec<f64>;

/// Eigen-decomposition of a symmetric n × n matrix by cyclic Jacobi: eigenvalues in descending
/// order and the eigenvectors as the columns of a row-major n × n matrix.
pub fn sym_eigen(a: &[f64], n: usize) -> (Vec<f64>, Mat) {
    assert_eq!(a.len(), n * n);
    let mut a = a.to_vec();
    let mut v = identity(n);
    let scale: f64 = a
        .iter()
        .map(|x| x * x)
        .sum::<f64>()
        .sqrt()
        .max(f64::MIN_POSITIVE);
    for _sweep in 0..100 {
        let off: f64 = (0..n)
            .flat_map(|i| (0..n).filter(move |&j| j != i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * n + j] * a[i * n + j])
            .sum::<f64>()
            .sqrt();
        if off <= 1e-15 * scale {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq.abs() <= 1e-300 {
                    continue;
                }
                let theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
                for k in 0..n {
                    let (vkp, vkq) = (v[k * n + p], v[k * n + q]);
                    v[k * n + p] = c * vkp - s * vkq;
                    v[k * n + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| a[j * n + j].total_cmp(&a[i * n + i]));
    let vals = order.iter().map(|&i| a[i * n + i]).collect();
    let mut vecs = vec![0.0; n * n];
    for (col, &i) in order.iter().enumerate() {
        for k in 0..n {
            vecs[k * n + col] = v[k * n + i];
        }
    }
    (vals, vecs)
}

/// The n × n identity.
pub fn identity(n: usize) -> Mat {
    let mut m = vec![0.0; n * n];
    (0..n).for_each(|i| m[i * n + i] = 1.0);
    m
}

/// `a b` for row-major a (n × k) and b (k × m).
pub fn matmul(a: &[f64], b: &[f64], n: usize, k: usize, m: usize) -> Mat {
    let mut out = vec![0.0; n * m];
    for i in 0..n {
        for l in 0..k {
            let x = a[i * k + l];
            if x != 0.0 {
                for j in 0..m {
                    out[i * m + j] += x * b[l * m + j];
                }
            }
        }
    }
    out
}

/// A residual-space orthonormal basis split into bands.
#[derive(Debug, Clone)]
pub struct Bands {
    pub d: usize,
    /// Columns are the basis vectors (row-major d × d), by descending singular value.
    pub basis: Mat,
    /// Singular values (descending; empty for a random basis).
    pub singular_values: Vec<f64>,
    /// Band j holds basis vectors `edges[j]..edges[j+1]`.
    pub edges: Vec<usize>,
}

impl Bands {
    /// Bands of the left singular vectors of the residual-side matrix `m` (d × n, row-major).
    pub fn from_matrix(m: &[f64], d: usize, n: usize, n_bands: usize) -> Self {
        assert_eq!(m.len(), d * n);
        let mut gram = vec![0.0; d * d];
        for i in 0..d {
            for j in i..d {
                let s: f64 = (0..n).map(|c| m[i * n + c] * m[j * n + c]).sum();
                gram[i * d + j] = s;
                gram[j * d + i] = s;
            }
        }
        let (vals, basis) = sym_eigen(&gram, d);
        Self {
            d,
            basis,
            singular_values: vals.iter().map(|&x| x.max(0.0).sqrt()).collect(),
            edges: edges(d, n_bands),
        }
    }

    /// A random orthonormal basis (Gram–Schmidt of a Gaussian matrix) with the same bands.
    pub fn random(d: usize, n_bands: usize, seed: u64) -> Self {
        let mut rng = HostRng::new(seed);
        let mut cols: Vec<Vec<f64>> = Vec::with_capacity(d);
        while cols.len() < d {
            let mut v: Vec<f64> = rng.normal(d, 1.0).into_iter().map(f64::from).collect();
            for _ in 0..2 {
                for c in &cols {
                    let dot: f64 = v.iter().zip(c).map(|(a, b)| a * b).sum();
                    v.iter_mut().zip(c).for_each(|(a, b)| *a -= dot * b);
                }
            }
            let norm = v.iter().map(|x| x * x).sum::<f64>().sqrt();
            if norm > 1e-8 {
                cols.push(v.into_iter().map(|x| x / norm).collect());
            }
        }
        let mut basis = vec![0.0; d * d];
        for (j, c) in cols.iter().enumerate() {
            for i in 0..d {
                basis[i * d + j] = c[i];
            }
        }
        Self {
            d,
            basis,
            singular_values: Vec::new(),
            edges: edges(d, n_bands),
        }
    }

    pub fn n_bands(&self) -> usize {
        self.edges.len() - 1
    }

    /// Basis vector indices of the given bands (0-based band numbers).
    fn columns(&self, bands: &[usize]) -> Vec<usize> {
        bands
            .iter()
            .flat_map(|&j| self.edges[j]..self.edges[j + 1])
            .collect()
    }

    /// `V_S V_Sᵀ` for the set S of bands (0-based).
    pub fn projector(&self, bands: &[usize]) -> Mat {
        projector_of(&self.basis, self.d, &self.columns(bands))
    }

    /// Φ_k: keep bands 1..k.
    pub fn phi(&self, k: usize) -> Mat {
        self.projector(&(0..k).collect::<Vec<_>>())
    }

    /// Ω_k: keep bands 1..k and the dark band.
    pub fn omega(&self, k: usize) -> Mat {
        let dark = self.n_bands() - 1;
        let mut b: Vec<usize> = (0..k.min(dark)).collect();
        b.push(dark);
        self.projector(&b)
    }

    /// `‖V_jᵀ h‖² / ‖h‖²` for every band j.
    pub fn band_energy(&self, h: &[f64]) -> Vec<f64> {
        let d = self.d;
        let total: f64 = h.iter().map(|x| x * x).sum::<f64>().max(f64::MIN_POSITIVE);
        (0..self.n_bands())
            .map(|j| {
                (self.edges[j]..self.edges[j + 1])
                    .map(|c| {
                        let dot: f64 = (0..d).map(|i| self.basis[i * d + c] * h[i]).sum();
                        dot * dot
                    })
                    .sum::<f64>()
                    / total
            })
            .collect()
    }

    /// `‖Φ_dark h‖ / ‖(I − Φ_dark) h‖`.
    pub fn dark_ratio(&self, h: &[f64]) -> f64 {
        let e = self.band_energy(h);
        let dark = *e.last().expect("at least one band");
        (dark / (1.0 - dark).max(f64::MIN_POSITIVE)).sqrt()
    }

    /// `‖W V_j‖²_F / ‖W‖²_F` for a write matrix W (r × d, rows in the residual space).
    pub fn write_share(&self, w: &[f64], r: usize) -> Vec<f64> {
        let d = self.d;
        let mut acc = vec![0.0; self.n_bands()];
        let mut total = 0.0;
        for row in w.chunks_exact(d).take(r) {
            total += row.iter().map(|x| x * x).sum::<f64>();
            for (a, e) in acc.iter_mut().zip(self.band_energy(row)) {
                *a += e * row.iter().map(|x| x * x).sum::<f64>();
            }
        }
        acc.iter()
            .map(|a| a / total.max(f64::MIN_POSITIVE))
            .collect()
    }
}

/// Band boundaries `⌊j d / n⌋`, j = 0..=n.
pub fn edges(d: usize, n_bands: usize) -> Vec<usize> {
    assert!(
        (1..=d).contains(&n_bands),
        "1 ≤ bands ≤ d, got {n_bands} for d = {d}"
    );
    (0..=n_bands).map(|j| j * d / n_bands).collect()
}

/// `Σ_{c ∈ cols} v_c v_cᵀ` for the columns of a row-major d × d basis.
fn projector_of(basis: &[f64], d: usize, cols: &[usize]) -> Mat {
    let mut p = vec![0.0; d * d];
    for &c in cols {
        for i in 0..d {
            let vi = basis[i * d + c];
            if vi != 0.0 {
                for j in 0..d {
                    p[i * d + j] += vi * basis[j * d + c];
                }
            }
        }
    }
    p
}

/// `Ψ_k = I − Φ_{e,(k+1):n} Φ_{u,(k+1):n}` (Cancedda 2024, docs/reference.md §7), k = 0..=n: removes
/// from h what survives projecting onto the tail bands k+1..n (0-based bands `k..n`) of the
/// unembedding `u` and then of the embedding `e`, i.e. what is dark for both from band k+1 on.
/// A map on column vectors, `h ↦ Ψ_k h`; not symmetric unless the two tails commute. `Ψ_n = I`
/// (nothing removed); `Ψ_0 = 0`.
pub fn psi(u: &Bands, e: &Bands, k: usize) -> Mat {
    let d = u.d;
    assert_eq!(e.d, d, "both bases live in the residual space");
    let n = u.n_bands();
    assert!(k <= n, "k = {k} > {n} bands");
    let tail: Vec<usize> = (k..n).collect();
    let both = matmul(&e.projector(&tail), &u.projector(&tail), d, d, d);
    let mut psi = identity(d);
    psi.iter_mut().zip(&both).for_each(|(x, y)| *x -= y);
    psi
}

/// Transpose of a row-major n × m matrix.
pub fn transpose(a: &[f64], n: usize, m: usize) -> Mat {
    let mut t = vec![0.0; n * m];
    for i in 0..n {
        for j in 0..m {
            t[j * n + i] = a[i * m + j];
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random_matrix(d: usize, n: usize, seed: u64) -> Mat {
        HostRng::new(seed)
            .normal(d * n, 1.0)
            .into_iter()
            .map(f64::from)
            .collect()
    }

    fn close(a: &[f64], b: &[f64], tol: f64) -> f64 {
        let worst = a
            .iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f64::max);
        assert!(worst <= tol, "max |diff| {worst} > {tol}");
        worst
    }

    #[test]
    fn eigen_reconstructs_the_matrix() {
        let n = 9;
        let m = random_matrix(n, n, 1);
        let s = matmul(&m, &transpose(&m, n, n), n, n, n);
        let (vals, v) = sym_eigen(&s, n);
        assert!(vals.windows(2).all(|w| w[0] >= w[1]));
        let mut lam = vec![0.0; n * n];
        (0..n).for_each(|i| lam[i * n + i] = vals[i]);
        let back = matmul(&matmul(&v, &lam, n, n, n), &transpose(&v, n, n), n, n, n);
        close(&back, &s, 1e-9);
        close(
            &matmul(&transpose(&v, n, n), &v, n, n, n),
            &identity(n),
            1e-12,
        );
    }

    #[test]
    fn projectors_are_symmetric_idempotent_and_complete() {
        let (d, n) = (24, 40);
        for bands in [
            Bands::from_matrix(&random_matrix(d, n, 2), d, n, 5),
            Bands::random(d, 5, 3),
        ] {
            for k in 0..=5 {
                let p = bands.phi(k);
                close(&p, &transpose(&p, d, d), 1e-12);
                close(&matmul(&p, &p, d, d, d), &p, 1e-10);
                let trace: f64 = (0..d).map(|i| p[i * d + i]).sum();
                assert!((trace - bands.edges[k] as f64).abs() < 1e-9, "rank {trace}");
            }
            close(&bands.phi(5), &identity(d), 1e-10);
            close(&bands.omega(4), &identity(d), 1e-10);
            // disjoint bands are orthogonal
            let cross = matmul(&bands.projector(&[0]), &bands.projector(&[4]), d, d, d);
            close(&cross, &vec![0.0; d * d], 1e-10);
            let h: Vec<f64> = (0..d).map(|i| (i as f64 * 0.7).sin() + 0.1).collect();
            let e = bands.band_energy(&h);
            assert!((e.iter().sum::<f64>() - 1.0).abs() < 1e-10);
        }
    }

    #[test]
    fn psi_of_identical_bands_removes_the_tail() {
        let (d, n) = (20, 30);
        let a = Bands::from_matrix(&random_matrix(d, n, 4), d, n, 4);
        for k in 0..=4 {
            // With e = u the tail projector is idempotent: Ψ_k = I − Φ_tail = Φ_k.
            close(&psi(&a, &a, k), &a.phi(k), 1e-9);
        }
        let b = Bands::random(d, 4, 9);
        close(&psi(&a, &b, 4), &identity(d), 0.0);
        close(&psi(&a, &b, 0), &vec![0.0; d * d], 1e-10);
    }

    #[test]
    fn dark_ratio_and_write_share_by_hand() {
        // basis = identity (a diagonal matrix with descending entries), 2 bands of 2
        let m = vec![
            4.0, 0.0, 0.0, 0.0, 0.0, 3.0, 0.0, 0.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 0.0, 1.0,
        ];
        let b = Bands::from_matrix(&m, 4, 4, 2);
        close(&b.singular_values, &[4.0, 3.0, 2.0, 1.0], 1e-12);
        let h = [3.0, 0.0, 0.0, 4.0]; // dark part (0, 4), bright part (3, 0)
        assert!((b.dark_ratio(&h) - 4.0 / 3.0).abs() < 1e-12);
        let w = [1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 1.0]; // rows: e1, e3 + e4
        close(&b.write_share(&w, 2), &[1.0 / 3.0, 2.0 / 3.0], 1e-12);
    }
}
