//! The eigen-decomposition of a symmetric matrix in f64 (Householder + implicit QL), pure maths
//! on host arrays: the matrix entropy of token representations ([`super::spectrum`]) and the
//! SVD bands of dark signals (`crate::dark`) both use it.

/// Eigen-decomposition of a symmetric n × n matrix: eigenvalues in descending order and the
/// eigenvectors as the columns of a row-major n × n matrix. Householder reduction to a
/// tridiagonal T = Qᵀ A Q, then the implicit QL algorithm with Wilkinson shifts on T,
/// accumulating the rotations into Q (the EISPACK tred2/tql2 pair, as in Golub & Van Loan
/// §8.3): O(n³) with a small constant, accurate to f64 rounding. (Cyclic Jacobi, used before,
/// took ~30 s for SmolLM2's d = 576.)
pub fn sym_eigen(a: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    assert_eq!(a.len(), n * n);
    if n == 0 {
        return (Vec::new(), Vec::new());
    }
    // Rows of `q` are the columns of Q during the QL sweep (contiguous rotations).
    let (mut diag, mut off, q) = householder_tridiagonal(a, n);
    let mut qt = vec![0.0; n * n]; // Qᵀ
    for i in 0..n {
        for j in 0..n {
            qt[j * n + i] = q[i * n + j];
        }
    }
    tridiagonal_ql(&mut diag, &mut off, &mut qt, n);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&i, &j| diag[j].total_cmp(&diag[i]));
    let vals = order.iter().map(|&i| diag[i]).collect();
    let mut vecs = vec![0.0; n * n];
    for (col, &i) in order.iter().enumerate() {
        for k in 0..n {
            vecs[k * n + col] = qt[i * n + k];
        }
    }
    (vals, vecs)
}

/// Householder tridiagonalisation of a symmetric matrix: (diagonal d, sub-diagonal e with
/// e[i] = T[i][i−1] and e[0] = 0, Q row-major) with A = Q T Qᵀ.
fn householder_tridiagonal(a: &[f64], n: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut v = a.to_vec(); // becomes Q
    let mut d: Vec<f64> = v[(n - 1) * n..].to_vec();
    let mut e = vec![0.0; n];
    for i in (1..n).rev() {
        // Reduce row i: the Householder vector u = x − α e_{i−1} of x = A[i][0..i].
        let scale: f64 = d[..i].iter().map(|x| x.abs()).sum();
        let mut h = 0.0;
        if scale == 0.0 {
            e[i] = d[i - 1];
            for j in 0..i {
                d[j] = v[(i - 1) * n + j];
                v[i * n + j] = 0.0;
                v[j * n + i] = 0.0;
            }
        } else {
            for x in d[..i].iter_mut() {
                *x /= scale;
                h += *x * *x;
            }
            let f = d[i - 1];
            let g = if f > 0.0 { -h.sqrt() } else { h.sqrt() };
            e[i] = scale * g;
            h -= f * g;
            d[i - 1] = f - g;
            e[..i].iter_mut().for_each(|x| *x = 0.0);
            // p = A u / h (in e), using the lower triangle of the active block.
            for j in 0..i {
                let f = d[j];
                v[j * n + i] = f;
                let mut g = e[j] + v[j * n + j] * f;
                for k in j + 1..i {
                    g += v[k * n + j] * d[k];
                    e[k] += v[k * n + j] * f;
                }
                e[j] = g;
            }
            let mut f = 0.0;
            for j in 0..i {
                e[j] /= h;
                f += e[j] * d[j];
            }
            // w = p − (uᵀp / 2h) u; A ← A − u wᵀ − w uᵀ
            let hh = f / (h + h);
            for j in 0..i {
                e[j] -= hh * d[j];
            }
            for j in 0..i {
                let (f, g) = (d[j], e[j]);
                for k in j..i {
                    v[k * n + j] -= f * e[k] + g * d[k];
                }
                d[j] = v[(i - 1) * n + j];
                v[i * n + j] = 0.0;
            }
        }
        d[i] = h;
    }
    // Accumulate the reflections into Q.
    for i in 0..n - 1 {
        v[(n - 1) * n + i] = v[i * n + i];
        v[i * n + i] = 1.0;
        let h = d[i + 1];
        if h != 0.0 {
            for k in 0..=i {
                d[k] = v[k * n + i + 1] / h;
            }
            for j in 0..=i {
                let g: f64 = (0..=i).map(|k| v[k * n + i + 1] * v[k * n + j]).sum();
                for k in 0..=i {
                    v[k * n + j] -= g * d[k];
                }
            }
        }
        for k in 0..=i {
            v[k * n + i + 1] = 0.0;
        }
    }
    for j in 0..n {
        d[j] = v[(n - 1) * n + j];
        v[(n - 1) * n + j] = 0.0;
    }
    v[(n - 1) * n + n - 1] = 1.0;
    e[0] = 0.0;
    (d, e, v)
}

/// Implicit QL with Wilkinson shifts on the tridiagonal (d, e) from
/// [`householder_tridiagonal`]; `qt` holds Qᵀ (row i = column i of Q) and receives the
/// rotations, so that on return d holds the eigenvalues and row i of `qt` the eigenvector of
/// d[i].
fn tridiagonal_ql(d: &mut [f64], e: &mut [f64], qt: &mut [f64], n: usize) {
    for i in 1..n {
        e[i - 1] = e[i];
    }
    e[n - 1] = 0.0;
    let mut shift_total = 0.0;
    let mut tst1: f64 = 0.0;
    let eps = f64::EPSILON;
    for l in 0..n {
        tst1 = tst1.max(d[l].abs() + e[l].abs());
        let mut m = l;
        while m < n - 1 && e[m].abs() > eps * tst1 {
            m += 1;
        }
        if m > l {
            for _iter in 0..300 {
                // Wilkinson shift from the leading 2 × 2 block.
                let g = d[l];
                let mut p = (d[l + 1] - g) / (2.0 * e[l]);
                let mut r = p.hypot(1.0);
                if p < 0.0 {
                    r = -r;
                }
                d[l] = e[l] / (p + r);
                d[l + 1] = e[l] * (p + r);
                let dl1 = d[l + 1];
                let h = g - d[l];
                for x in d[l + 2..n].iter_mut() {
                    *x -= h;
                }
                shift_total += h;
                // QL sweep from m up to l.
                p = d[m];
                let (mut c, mut c2, mut c3) = (1.0, 1.0, 1.0);
                let el1 = e[l + 1];
                let (mut s, mut s2) = (0.0, 0.0);
                for i in (l..m).rev() {
                    c3 = c2;
                    c2 = c;
                    s2 = s;
                    let g = c * e[i];
                    let h = c * p;
                    r = p.hypot(e[i]);
                    e[i + 1] = s * r;
                    s = e[i] / r;
                    c = p / r;
                    p = c * d[i] - s * g;
                    d[i + 1] = h + s * (c * g + s * d[i]);
                    let (lo, hi) = qt.split_at_mut((i + 1) * n);
                    let (qi, qi1) = (&mut lo[i * n..], &mut hi[..n]);
                    for (a, b) in qi.iter_mut().zip(qi1.iter_mut()) {
                        let h = *b;
                        *b = s * *a + c * h;
                        *a = c * *a - s * h;
                    }
                }
                p = -s * s2 * c3 * el1 * e[l] / dl1;
                e[l] = s * p;
                d[l] = c * p;
                if e[l].abs() <= eps * tst1 {
                    break;
                }
            }
        }
        d[l] += shift_total;
        e[l] = 0.0;
    }
}
