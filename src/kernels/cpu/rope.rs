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

/// x (rows × d, rows = blocks × S with S the table's rows, position s = row mod S) rotated by
/// the tables cos, sin (S × r/2); `inverse` rotates by −θ (the backward).
pub fn apply(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    d: usize,
    r: usize,
    pairing: Pairing,
    inverse: bool,
) -> Vec<f32> {
    let half = r / 2;
    assert!(
        r <= d && r.is_multiple_of(2) && half > 0,
        "rope: r {r} of d {d}"
    );
    assert_eq!(cos.len(), sin.len(), "rope: cos and sin tables");
    let s = cos.len() / half;
    assert_eq!(
        x.len() % (s * d),
        0,
        "rope: rows are whole blocks of the table's positions"
    );
    let mut y = vec![0f32; x.len()];
    y.par_chunks_mut(s * d)
        .zip(x.par_chunks(s * d))
        .for_each(|(yb, xb)| {
            for ((yr, xr), p) in yb.chunks_exact_mut(d).zip(xb.chunks_exact(d)).zip(0..s) {
                let (c, sn) = (
                    &cos[p * half..(p + 1) * half],
                    &sin[p * half..(p + 1) * half],
                );
                for i in 0..half {
                    let (i1, i2) = match pairing {
                        Pairing::Halves => (i, i + half),
                        Pairing::Adjacent => (2 * i, 2 * i + 1),
                    };
                    let (x1, x2) = (xr[i1], xr[i2]);
                    let (ci, si) = (c[i], if inverse { -sn[i] } else { sn[i] });
                    yr[i1] = x1 * ci - x2 * si;
                    yr[i2] = x1 * si + x2 * ci;
                }
                yr[r..].copy_from_slice(&xr[r..]);
            }
        });
    y
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
            let y = apply(&x, &cos, &sin, d, r, pairing, false);
            let dx = apply(&g, &cos, &sin, d, r, pairing, true);
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
}
