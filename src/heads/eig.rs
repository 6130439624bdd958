//! Eigenvalues of a real square matrix (not symmetric in general), in f64 on the host: the
//! matrix is reduced to upper Hessenberg form by Householder reflections, whose eigenvalues
//! the Francis double-shift QR iteration then finds (the `hqr` algorithm of EISPACK, as
//! written in Numerical Recipes §11.5–11.6), deflating one real eigenvalue or a 2 × 2 block of
//! a complex pair at a time. For d_h × d_h matrices (d_h ≤ a few hundred) this costs
//! O(d_h³). The symmetric eigensolver of `crate::dark` (Householder + QL) does not apply: the
//! OV circuit is not symmetric and its eigenvalues are complex.

use anyhow::{Result, bail};

/// An eigenvalue `re + i·im`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Eigenvalue {
    pub re: f64,
    pub im: f64,
}

impl Eigenvalue {
    pub fn abs(self) -> f64 {
        self.re.hypot(self.im)
    }
}

/// Reduce row-major `a` (n × n) to upper Hessenberg form in place by Householder reflections
/// `P = I − 2 v vᵀ / vᵀv` applied on both sides (a similarity: same eigenvalues).
fn hessenberg(a: &mut [f64], n: usize) {
    for k in 0..n.saturating_sub(2) {
        // v = x + sign(x_0) ‖x‖ e_1 for x = a[k+1.., k]
        let norm = (k + 1..n).map(|i| a[i * n + k].powi(2)).sum::<f64>().sqrt();
        if norm == 0.0 {
            continue;
        }
        let mut v: Vec<f64> = (k + 1..n).map(|i| a[i * n + k]).collect();
        v[0] += if v[0] >= 0.0 { norm } else { -norm };
        let vv: f64 = v.iter().map(|x| x * x).sum();
        if vv == 0.0 {
            continue;
        }
        // A ← P A: rows k+1.. of every column
        for j in 0..n {
            let dot: f64 = v
                .iter()
                .enumerate()
                .map(|(i, vi)| vi * a[(k + 1 + i) * n + j])
                .sum();
            let f = 2.0 * dot / vv;
            for (i, vi) in v.iter().enumerate() {
                a[(k + 1 + i) * n + j] -= f * vi;
            }
        }
        // A ← A P: columns k+1.. of every row
        for i in 0..n {
            let row = &mut a[i * n..(i + 1) * n];
            let dot: f64 = v
                .iter()
                .enumerate()
                .map(|(j, vj)| vj * row[k + 1 + j])
                .sum();
            let f = 2.0 * dot / vv;
            for (j, vj) in v.iter().enumerate() {
                row[k + 1 + j] -= f * vj;
            }
        }
        for i in k + 2..n {
            a[i * n + k] = 0.0;
        }
    }
}

fn sign(a: f64, b: f64) -> f64 {
    if b >= 0.0 { a.abs() } else { -a.abs() }
}

/// The eigenvalues of row-major `m` (n × n), in the order the iteration deflates them (complex
/// pairs adjacent, positive imaginary part second). Fails if an eigenvalue does not converge
/// in 60 iterations (never seen on finite input) or the matrix holds a non-finite value.
pub fn eigenvalues(m: &[f64], n: usize) -> Result<Vec<Eigenvalue>> {
    if m.len() != n * n {
        bail!("eigenvalues: {} values for a {n} × {n} matrix", m.len());
    }
    if m.iter().any(|x| !x.is_finite()) {
        bail!("eigenvalues: the matrix holds a non-finite value");
    }
    let mut h = m.to_vec();
    hessenberg(&mut h, n);
    // 1-based indexing below, as in the published algorithm: a(i, j) = h[(i−1) n + j − 1].
    let idx = |i: i64, j: i64| ((i - 1) as usize) * n + (j - 1) as usize;
    let mut a = h;
    let nn0 = n as i64;
    let mut wr = vec![0.0; n + 1];
    let mut wi = vec![0.0; n + 1];
    let mut anorm = 0.0;
    for i in 1..=nn0 {
        for j in (i - 1).max(1)..=nn0 {
            anorm += a[idx(i, j)].abs();
        }
    }
    let mut nn = nn0;
    let mut t = 0.0;
    let (mut x, mut y, mut z, mut w, mut p, mut q, mut r, mut s);
    while nn >= 1 {
        let mut its = 0;
        loop {
            // Look for a single small subdiagonal element.
            let mut l = nn;
            while l >= 2 {
                s = a[idx(l - 1, l - 1)].abs() + a[idx(l, l)].abs();
                if s == 0.0 {
                    s = anorm;
                }
                if a[idx(l, l - 1)].abs() + s == s {
                    a[idx(l, l - 1)] = 0.0;
                    break;
                }
                l -= 1;
            }
            x = a[idx(nn, nn)];
            if l == nn {
                // one root found
                wr[nn as usize] = x + t;
                wi[nn as usize] = 0.0;
                nn -= 1;
            } else {
                y = a[idx(nn - 1, nn - 1)];
                w = a[idx(nn, nn - 1)] * a[idx(nn - 1, nn)];
                if l == nn - 1 {
                    // two roots found
                    p = 0.5 * (y - x);
                    q = p * p + w;
                    z = q.abs().sqrt();
                    x += t;
                    let (i1, i2) = ((nn - 1) as usize, nn as usize);
                    if q >= 0.0 {
                        z = p + sign(z, p);
                        wr[i1] = x + z;
                        wr[i2] = x + z;
                        if z != 0.0 {
                            wr[i2] = x - w / z;
                        }
                        wi[i1] = 0.0;
                        wi[i2] = 0.0;
                    } else {
                        wr[i1] = x + p;
                        wr[i2] = x + p;
                        wi[i1] = -z;
                        wi[i2] = z;
                    }
                    nn -= 2;
                } else {
                    if its == 60 {
                        bail!("eigenvalues: no convergence after 60 QR iterations");
                    }
                    if its == 10 || its == 20 || its == 40 {
                        // exceptional shift
                        t += x;
                        for i in 1..=nn {
                            a[idx(i, i)] -= x;
                        }
                        s = a[idx(nn, nn - 1)].abs() + a[idx(nn - 1, nn - 2)].abs();
                        x = 0.75 * s;
                        y = x;
                        w = -0.4375 * s * s;
                    }
                    its += 1;
                    // Form the shift and look for two consecutive small subdiagonal elements.
                    let mut m = nn - 2;
                    loop {
                        z = a[idx(m, m)];
                        r = x - z;
                        s = y - z;
                        p = (r * s - w) / a[idx(m + 1, m)] + a[idx(m, m + 1)];
                        q = a[idx(m + 1, m + 1)] - z - r - s;
                        r = a[idx(m + 2, m + 1)];
                        s = p.abs() + q.abs() + r.abs();
                        p /= s;
                        q /= s;
                        r /= s;
                        if m == l {
                            break;
                        }
                        let u = a[idx(m, m - 1)].abs() * (q.abs() + r.abs());
                        let v = p.abs()
                            * (a[idx(m - 1, m - 1)].abs() + z.abs() + a[idx(m + 1, m + 1)].abs());
                        if u + v == v {
                            break;
                        }
                        m -= 1;
                    }
                    for i in m + 2..=nn {
                        a[idx(i, i - 2)] = 0.0;
                        if i != m + 2 {
                            a[idx(i, i - 3)] = 0.0;
                        }
                    }
                    // Double QR step on rows l..nn and columns m..nn.
                    let mut k = m;
                    while k < nn {
                        if k != m {
                            p = a[idx(k, k - 1)];
                            q = a[idx(k + 1, k - 1)];
                            r = 0.0;
                            if k != nn - 1 {
                                r = a[idx(k + 2, k - 1)];
                            }
                            x = p.abs() + q.abs() + r.abs();
                            if x != 0.0 {
                                p /= x;
                                q /= x;
                                r /= x;
                            }
                        }
                        s = sign((p * p + q * q + r * r).sqrt(), p);
                        if s != 0.0 {
                            if k == m {
                                if l != m {
                                    a[idx(k, k - 1)] = -a[idx(k, k - 1)];
                                }
                            } else {
                                a[idx(k, k - 1)] = -s * x;
                            }
                            p += s;
                            x = p / s;
                            y = q / s;
                            z = r / s;
                            q /= p;
                            r /= p;
                            for j in k..=nn {
                                p = a[idx(k, j)] + q * a[idx(k + 1, j)];
                                if k != nn - 1 {
                                    p += r * a[idx(k + 2, j)];
                                    a[idx(k + 2, j)] -= p * z;
                                }
                                a[idx(k + 1, j)] -= p * y;
                                a[idx(k, j)] -= p * x;
                            }
                            let mmin = if nn < k + 3 { nn } else { k + 3 };
                            for i in l..=mmin {
                                p = x * a[idx(i, k)] + y * a[idx(i, k + 1)];
                                if k != nn - 1 {
                                    p += z * a[idx(i, k + 2)];
                                    a[idx(i, k + 2)] -= p * r;
                                }
                                a[idx(i, k + 1)] -= p * q;
                                a[idx(i, k)] -= p;
                            }
                        }
                        k += 1;
                    }
                }
            }
            if l >= nn - 1 {
                break;
            }
        }
    }
    Ok((1..=n)
        .map(|i| Eigenvalue {
            re: wr[i],
            im: wi[i],
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sorted(mut v: Vec<Eigenvalue>) -> Vec<(f64, f64)> {
        v.sort_by(|a, b| a.re.total_cmp(&b.re).then(a.im.total_cmp(&b.im)));
        v.into_iter().map(|e| (e.re, e.im)).collect()
    }

    #[test]
    fn eigenvalues_by_hand() {
        // diagonal, a rotation (±i), a triangular matrix, 1 × 1, the zero matrix
        let e = sorted(eigenvalues(&[2.0, 0.0, 0.0, -3.0], 2).unwrap());
        assert_eq!(e, vec![(-3.0, 0.0), (2.0, 0.0)]);
        let e = sorted(eigenvalues(&[0.0, -1.0, 1.0, 0.0], 2).unwrap());
        assert!(
            (e[0].0).abs() < 1e-15 && (e[0].1 + 1.0).abs() < 1e-15,
            "{e:?}"
        );
        assert!((e[1].1 - 1.0).abs() < 1e-15, "{e:?}");
        let tri = [1.0, 5.0, -2.0, 0.0, 3.0, 7.0, 0.0, 0.0, -4.0];
        let e = sorted(eigenvalues(&tri, 3).unwrap());
        for (got, want) in e.iter().zip([-4.0, 1.0, 3.0]) {
            assert!((got.0 - want).abs() < 1e-12 && got.1 == 0.0, "{e:?}");
        }
        assert_eq!(
            eigenvalues(&[7.5], 1).unwrap()[0],
            Eigenvalue { re: 7.5, im: 0.0 }
        );
        let z = eigenvalues(&[0.0; 16], 4).unwrap();
        assert!(z.iter().all(|e| e.re == 0.0 && e.im == 0.0));
        // a companion matrix of (x − 1)(x − 2)(x − 3)(x − 4) = x⁴ − 10x³ + 35x² − 50x + 24
        let c = [
            10.0, -35.0, 50.0, -24.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0,
        ];
        let e = sorted(eigenvalues(&c, 4).unwrap());
        for (got, want) in e.iter().zip([1.0, 2.0, 3.0, 4.0]) {
            assert!((got.0 - want).abs() < 1e-9 && got.1.abs() < 1e-9, "{e:?}");
        }
        assert!(eigenvalues(&[f64::NAN], 1).is_err());
        assert!(eigenvalues(&[1.0, 2.0], 2).is_err());
    }
}
