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
//! Eigenvectors come from the symmetric eigen-decomposition (Householder + implicit QL,
//! [`sym_eigen`]) of the Gram matrix `M Mᵀ` (f64; d ≤ a few thousand).

use crate::model::HostRng;

/// A d × d row-major matrix.
pub type Mat = Vec<f64>;

/// The symmetric eigen-decomposition (Householder + implicit QL, f64), shared with the metrics'
/// matrix entropy: [`crate::metrics::eigen`].
pub use crate::metrics::eigen::sym_eigen;

/// `M Mᵀ` of a row-major d × n matrix (f64), through [`gram_f64`]: the rows are widened to
/// f64 once, then one matrix product (for W_U of SmolLM2, 576 × 49152, 16 GFLOP).
pub fn gram<X: Copy + Into<f64>>(m: &[X], d: usize, n: usize) -> Mat {
    assert!(
        m.len() >= d * n,
        "gram: {d} × {n} from {} elements",
        m.len()
    );
    let wide: Vec<f64> = m[..d * n].iter().map(|&x| x.into()).collect();
    gram_f64(&wide, d, n)
}

/// `A Aᵀ` (r × r) of a row-major r × n matrix A: one product through the `gemm` crate's f64
/// micro-kernels on every core, Aᵀ read in place (row stride 1, column stride n). The upper
/// triangle is copied onto the lower, so the result is exactly symmetric (the product's
/// two halves can differ in rounding, and the eigen-decomposition assumes symmetry).
fn gram_f64(a: &[f64], r: usize, n: usize) -> Mat {
    // Aᵀ (n × r): element (k, j) is a[j·n + k], row stride 1, column stride n
    let mut out = product_f64((r, r, n), (a, n as isize, 1), (a, 1, n as isize));
    for i in 0..r {
        for j in 0..i {
            out[i * r + j] = out[j * r + i];
        }
    }
    out
}

/// The n × n identity.
pub fn identity(n: usize) -> Mat {
    let mut m = vec![0.0; n * n];
    (0..n).for_each(|i| m[i * n + i] = 1.0);
    m
}

/// `a b` for row-major a (n × k) and b (k × m), through the `gemm` crate's f64 micro-kernels
/// (the AVX-512 / AVX2 ones where the CPU has them) on every core: the band energies of a
/// model's every write row are tens of GFLOP, minutes in a scalar loop.
pub fn matmul(a: &[f64], b: &[f64], n: usize, k: usize, m: usize) -> Mat {
    product_f64((n, m, k), (a, k as isize, 1), (b, m as isize, 1))
}

/// C (n × m, row-major) = A (n × k) B (k × m), each operand (storage, row stride, column
/// stride), through the `gemm` crate on every core.
fn product_f64(
    (n, m, k): (usize, usize, usize),
    (a, a_rs, a_cs): (&[f64], isize, isize),
    (b, b_rs, b_cs): (&[f64], isize, isize),
) -> Mat {
    let reach = |rows: usize, cols: usize, rs: isize, cs: isize| {
        (rows > 0 && cols > 0).then(|| (rows - 1) * rs as usize + (cols - 1) * cs as usize)
    };
    assert!(
        reach(n, k, a_rs, a_cs).is_none_or(|e| e < a.len())
            && reach(k, m, b_rs, b_cs).is_none_or(|e| e < b.len()),
        "matrix product: ({n} × {k}) · ({k} × {m}) reaches past the {} and {} elements given",
        a.len(),
        b.len()
    );
    let mut out = vec![0.0; n * m];
    if n == 0 || m == 0 || k == 0 {
        return out;
    }
    // SAFETY: every element A's and B's shapes and (positive) strides reach lies inside a and b
    // (checked above); out holds n·m (row stride m) and aliases neither; gemm computes
    // out = 0·out + 1·A B without reading out.
    unsafe {
        gemm::gemm(
            n,
            m,
            k,
            out.as_mut_ptr(),
            1,
            m as isize,
            false,
            a.as_ptr(),
            a_cs,
            a_rs,
            b.as_ptr(),
            b_cs,
            b_rs,
            0.0f64,
            1.0f64,
            false,
            false,
            false,
            gemm::Parallelism::Rayon(0),
        );
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
    pub fn from_matrix<X: Copy + Into<f64>>(m: &[X], d: usize, n: usize, n_bands: usize) -> Self {
        assert_eq!(m.len(), d * n);
        Self::from_gram(&gram(m, d, n), d, n_bands)
    }

    /// The bands of a matrix M given its Gram matrix `M Mᵀ` (d × d): the singular vectors
    /// and values of M from the eigendecomposition.
    pub fn from_gram(gram: &[f64], d: usize, n_bands: usize) -> Self {
        assert_eq!(gram.len(), d * d);
        let (vals, basis) = sym_eigen(gram, d);
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
        self.band_energies(&h[..self.d]).pop().expect("one row")
    }

    /// [`Self::band_energy`] of every row of `rows` (r × d, row-major) at once: the coordinates
    /// `rows · V` (r × d) are one matrix product.
    pub fn band_energies(&self, rows: &[f64]) -> Vec<Vec<f64>> {
        let d = self.d;
        let r = rows.len() / d;
        let coords = matmul(rows, &self.basis, r, d, d); // row i: Vᵀ h_i
        rows.chunks_exact(d)
            .zip(coords.chunks_exact(d))
            .map(|(h, c)| {
                let total = h.iter().map(|x| x * x).sum::<f64>().max(f64::MIN_POSITIVE);
                self.band_sums(c).into_iter().map(|e| e / total).collect()
            })
            .collect()
    }

    /// `Σ_{i ∈ band j} c_i²` of coordinates c, for every band j.
    fn band_sums(&self, c: &[f64]) -> Vec<f64> {
        self.edges
            .windows(2)
            .map(|w| c[w[0]..w[1]].iter().map(|x| x * x).sum::<f64>())
            .collect()
    }

    /// `(Vᵀh)[from..to]`: coordinates of h on basis vectors from..to (row-wise over the
    /// row-major basis, so the reads are contiguous).
    fn coordinates(&self, h: &[f64], from: usize, to: usize) -> Vec<f64> {
        let d = self.d;
        let mut out = vec![0.0; to - from];
        for (i, &hi) in h.iter().enumerate().take(d) {
            let row = &self.basis[i * d + from..i * d + to];
            out.iter_mut().zip(row).for_each(|(o, b)| *o += b * hi);
        }
        out
    }

    /// `‖Φ_dark h‖ / ‖(I − Φ_dark) h‖` (only the dark band's coordinates are computed).
    pub fn dark_ratio(&self, h: &[f64]) -> f64 {
        let total: f64 = h.iter().map(|x| x * x).sum::<f64>().max(f64::MIN_POSITIVE);
        let j = self.n_bands() - 1;
        let c = self.coordinates(h, self.edges[j], self.edges[j + 1]);
        dark_ratio_of_share(c.iter().map(|x| x * x).sum::<f64>() / total)
    }

    /// `‖W V_j‖²_F / ‖W‖²_F` for a write matrix W (r × d, rows in the residual space):
    /// `Σ_rows Σ_{i ∈ band j} (W V)_{row,i}² / Σ_rows ‖row‖²`.
    pub fn write_share(&self, w: &[f64], r: usize) -> Vec<f64> {
        let d = self.d;
        let w = &w[..r * d];
        let total: f64 = w.iter().map(|x| x * x).sum();
        let coords = matmul(w, &self.basis, r, d, d);
        let mut acc = vec![0.0; self.n_bands()];
        for c in coords.chunks_exact(d) {
            acc.iter_mut()
                .zip(self.band_sums(c))
                .for_each(|(a, e)| *a += e);
        }
        acc.iter()
            .map(|a| a / total.max(f64::MIN_POSITIVE))
            .collect()
    }
}

/// The dark ratio `‖Φ_dark h‖ / ‖(I − Φ_dark) h‖` from the dark band's energy share
/// `s = ‖Φ_dark h‖² / ‖h‖²`: `√(s / (1 − s))`.
pub fn dark_ratio_of_share(s: f64) -> f64 {
    (s / (1.0 - s).max(f64::MIN_POSITIVE)).sqrt()
}

/// Band boundaries `⌊j d / n⌋`, j = 0..=n.
pub fn edges(d: usize, n_bands: usize) -> Vec<usize> {
    assert!(
        (1..=d).contains(&n_bands),
        "1 ≤ bands ≤ d, got {n_bands} for d = {d}"
    );
    (0..=n_bands).map(|j| j * d / n_bands).collect()
}

/// `Σ_{c ∈ cols} v_c v_cᵀ = V_S V_Sᵀ` for the columns of a row-major d × d basis: the Gram
/// matrix of V_S (d × |S|), gathered row by row from the basis.
fn projector_of(basis: &[f64], d: usize, cols: &[usize]) -> Mat {
    let s = cols.len();
    let mut v = vec![0.0; d * s];
    for i in 0..d {
        let row = &basis[i * d..(i + 1) * d];
        v[i * s..(i + 1) * s]
            .iter_mut()
            .zip(cols)
            .for_each(|(x, &c)| *x = row[c]);
    }
    gram_f64(&v, d, s)
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
        // full rank, rank-deficient (40 zero eigenvalues), a diagonal with ties, 1 × 1, and an
        // indefinite symmetric matrix
        let full = |n: usize, k: usize, seed: u64| {
            let m = random_matrix(n, k, seed);
            (n, matmul(&m, &transpose(&m, n, k), n, k, n))
        };
        let mut ties = vec![0.0; 16];
        for (i, x) in [2.0, 1.0, 2.0, -1.0].iter().enumerate() {
            ties[i * 4 + i] = *x;
        }
        let indefinite = {
            let m = random_matrix(12, 12, 5);
            (12, matmul(&m, &identity(12), 12, 12, 12))
        };
        let indefinite = (
            indefinite.0,
            (0..144)
                .map(|x| (indefinite.1[x] + indefinite.1[(x % 12) * 12 + x / 12]) / 2.0)
                .collect(),
        );
        let cases: Vec<(usize, Mat)> = vec![
            full(9, 9, 1),
            full(60, 20, 2),
            (4, ties),
            (1, vec![3.0]),
            indefinite,
        ];
        for (n, s) in cases {
            let (vals, v) = sym_eigen(&s, n);
            assert!(vals.windows(2).all(|w| w[0] >= w[1]));
            let mut lam = vec![0.0; n * n];
            (0..n).for_each(|i| lam[i * n + i] = vals[i]);
            let back = matmul(&matmul(&v, &lam, n, n, n), &transpose(&v, n, n), n, n, n);
            let scale = s.iter().fold(1.0f64, |a, x| a.max(x.abs()));
            close(&back, &s, 1e-11 * scale);
            close(
                &matmul(&transpose(&v, n, n), &v, n, n, n),
                &identity(n),
                1e-12,
            );
        }
        // the Gram helper against the plain triple loop
        let (d, n) = (7, 13);
        let m = random_matrix(d, n, 9);
        close(
            &gram(&m, d, n),
            &matmul(&m, &transpose(&m, d, n), d, n, d),
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
