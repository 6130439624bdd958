//! Rotary position embedding (Su et al., RoFormer, 2021) in one pass over the rows, on host
//! slices. Of the first r dimensions of each (b, h, s) row, the pairs (x1, x2) — dimensions
//! (i, i + r/2) for the NeoX/HF "halves" pairing, (2i, 2i + 1) for "adjacent" — rotate by the
//! row's angles θ_s,i; the dimensions past r pass through:
//!
//! ```text
//! forward:   y1 = x1 cos θ − x2 sin θ       y2 = x1 sin θ + x2 cos θ
//! backward:  ∂x1 = ∂y1 cos θ + ∂y2 sin θ    ∂x2 = ∂y2 cos θ − ∂y1 sin θ    (rotation by −θ)
//! ```
//!
//! Each output is the same two f32 products and one sum as Burn's element-wise ops compute
//! (`crate::model::context::rope`), so the results are bit-identical to them, forward and
//! backward (the backward is the forward with −sin: `a·(−s) + b·c = b·c − a·s` exactly).

use rayon::prelude::*;

/// Which dimensions pair up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// (i, i + r/2).
    Halves,
    /// (2i, 2i + 1).
    Adjacent,
}

/// x (rows × d) rotated by the tables cos, sin (S × r/2), row n at position (n / `group`)
/// mod S: `group` = 1 for heads-major (B, H, S, d) rows, H for the same tensor stored
/// sequence-major (B, S, H, d), where the H rows of a position share its angles. `inverse`
/// rotates by −θ (the backward).
#[allow(clippy::too_many_arguments)]
pub fn apply(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    d: usize,
    r: usize,
    group: usize,
    pairing: Pairing,
    inverse: bool,
) -> Vec<f32> {
    let half = r / 2;
    assert!(
        r <= d && r.is_multiple_of(2) && half > 0 && group > 0,
        "rope: r {r} of d {d}, group {group}"
    );
    assert_eq!(cos.len(), sin.len(), "rope: cos and sin tables");
    let s = cos.len() / half;
    let block = s * group * d; // the rows of one sequence
    assert_eq!(
        x.len() % block,
        0,
        "rope: rows are whole blocks of the table's positions"
    );
    let mut y = vec![0f32; x.len()];
    y.par_chunks_mut(block)
        .zip(x.par_chunks(block))
        .for_each(|(yb, xb)| {
            let rows = yb.chunks_exact_mut(d).zip(xb.chunks_exact(d));
            for (n, (yr, xr)) in rows.enumerate() {
                let p = n / group;
                let (c, sn) = (
                    &cos[p * half..(p + 1) * half],
                    &sin[p * half..(p + 1) * half],
                );
                match pairing {
                    Pairing::Halves => {
                        let (x1, x2) = xr[..r].split_at(half);
                        let (y1, y2) = yr[..r].split_at_mut(half);
                        rotate(x1, x2, c, sn, y1, y2, inverse);
                    }
                    Pairing::Adjacent => {
                        for i in 0..half {
                            let (x1, x2) = (xr[2 * i], xr[2 * i + 1]);
                            let si = if inverse { -sn[i] } else { sn[i] };
                            yr[2 * i] = x1 * c[i] - x2 * si;
                            yr[2 * i + 1] = x1 * si + x2 * c[i];
                        }
                    }
                }
                yr[r..].copy_from_slice(&xr[r..]);
            }
        });
    y
}

/// (y1, y2) ← the pairs (x1_i, x2_i) rotated, in loops the compiler vectorises. Each output
/// is one product pair and one sum, exactly as Burn's element-wise ops round them: forward
/// `(x1 c − x2 s, x1 s + x2 c)`; inverse `(x1 c + x2 s, x2 c − x1 s)`, which is the forward
/// with −s (negation is exact and the sums commute).
#[inline(always)]
fn rotate(
    x1: &[f32],
    x2: &[f32],
    c: &[f32],
    s: &[f32],
    y1: &mut [f32],
    y2: &mut [f32],
    inverse: bool,
) {
    let n = x1.len();
    let (x2, c, s, y1, y2) = (&x2[..n], &c[..n], &s[..n], &mut y1[..n], &mut y2[..n]);
    if inverse {
        for i in 0..n {
            y1[i] = x1[i] * c[i] + x2[i] * s[i];
            y2[i] = x2[i] * c[i] - x1[i] * s[i];
        }
    } else {
        for i in 0..n {
            y1[i] = x1[i] * c[i] - x2[i] * s[i];
            y2[i] = x1[i] * s[i] + x2[i] * c[i];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values against an f64 rotation, and the backward against finite differences of
    /// ⟨∂y, y(x)⟩ (linear in x, so they are exact up to rounding).
    #[test]
    fn values_and_gradients_match_f64() {
        let (blocks, s, d) = (3, 5, 12);
        let x: Vec<f32> = (0..blocks * s * d)
            .map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.5) * 4.0)
            .collect();
        let g: Vec<f32> = (0..blocks * s * d)
            .map(|i| ((i * 53 % 97) as f32 / 97.0 - 0.5) * 2.0)
            .collect();
        for (pairing, r) in [
            (Pairing::Halves, 12),
            (Pairing::Halves, 8),
            (Pairing::Adjacent, 12),
            (Pairing::Adjacent, 6),
        ] {
            let half = r / 2;
            let theta = |p: usize, i: usize| p as f64 * 10000f64.powf(-(2.0 * i as f64) / r as f64);
            let cos: Vec<f32> = (0..s * half)
                .map(|k| theta(k / half, k % half).cos() as f32)
                .collect();
            let sin: Vec<f32> = (0..s * half)
                .map(|k| theta(k / half, k % half).sin() as f32)
                .collect();
            let y = apply(&x, &cos, &sin, d, r, 1, pairing, false);
            let dx = apply(&g, &cos, &sin, d, r, 1, pairing, true);
            for row in 0..blocks * s {
                let p = row % s;
                let idx = |i: usize| match pairing {
                    Pairing::Halves => (i, i + half),
                    Pairing::Adjacent => (2 * i, 2 * i + 1),
                };
                for i in 0..half {
                    let (i1, i2) = idx(i);
                    let (c, sn) = (cos[p * half + i] as f64, sin[p * half + i] as f64);
                    let (x1, x2) = (x[row * d + i1] as f64, x[row * d + i2] as f64);
                    let (g1, g2) = (g[row * d + i1] as f64, g[row * d + i2] as f64);
                    let want = [
                        (i1, x1 * c - x2 * sn, g1 * c + g2 * sn),
                        (i2, x1 * sn + x2 * c, g2 * c - g1 * sn),
                    ];
                    for (j, wy, wdx) in want {
                        let (gy, gdx) = (y[row * d + j] as f64, dx[row * d + j] as f64);
                        assert!(
                            (gy - wy).abs() <= 1e-6,
                            "{pairing:?} r {r} y[{row},{j}] {gy} {wy}"
                        );
                        assert!((gdx - wdx).abs() <= 1e-6, "{pairing:?} r {r} dx[{row},{j}]");
                    }
                }
                for j in r..d {
                    assert_eq!(y[row * d + j], x[row * d + j], "pass-through");
                    assert_eq!(dx[row * d + j], g[row * d + j], "pass-through gradient");
                }
            }
        }
    }

    /// Sequence-major storage with `group` = H gives the heads-major result, permuted, bit for
    /// bit, both ways and both pairings.
    #[test]
    fn sequence_major_rows_equal_heads_major_rows() {
        let (b, h, s, d, r) = (2, 3, 5, 8, 6);
        let half = r / 2;
        let x: Vec<f32> = (0..b * h * s * d)
            .map(|i| ((i * 29 % 89) as f32 / 89.0 - 0.5) * 3.0)
            .collect();
        let cos: Vec<f32> = (0..s * half).map(|k| (0.3 * k as f32).cos()).collect();
        let sin: Vec<f32> = (0..s * half).map(|k| (0.3 * k as f32).sin()).collect();
        // (b, h, p, :) heads-major ↔ (b, p, h, :) sequence-major
        let seq_row = |bi: usize, hi: usize, p: usize| ((bi * s + p) * h + hi) * d;
        let head_row = |bi: usize, hi: usize, p: usize| ((bi * h + hi) * s + p) * d;
        let mut xs = vec![0f32; x.len()];
        for (bi, hi, p) in
            (0..b).flat_map(|bi| (0..h).flat_map(move |hi| (0..s).map(move |p| (bi, hi, p))))
        {
            xs[seq_row(bi, hi, p)..][..d].copy_from_slice(&x[head_row(bi, hi, p)..][..d]);
        }
        for pairing in [Pairing::Halves, Pairing::Adjacent] {
            for inverse in [false, true] {
                let yh = apply(&x, &cos, &sin, d, r, 1, pairing, inverse);
                let ys = apply(&xs, &cos, &sin, d, r, h, pairing, inverse);
                for bi in 0..b {
                    for hi in 0..h {
                        for p in 0..s {
                            assert_eq!(
                                ys[seq_row(bi, hi, p)..][..d],
                                yh[head_row(bi, hi, p)..][..d],
                                "{pairing:?} inverse {inverse} ({bi}, {hi}, {p})"
                            );
                        }
                    }
                }
            }
        }
    }
}
