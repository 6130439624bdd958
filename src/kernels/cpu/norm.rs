//! RMSNorm and LayerNorm over the last dimension, forward and backward each in one pass per
//! row, on host slices (rows in parallel; the gain and bias gradients summed over rows in a
//! fixed order):
//!
//! ```text
//! RMSNorm:   r = 1/√(mean x² + ε)          y = x r g
//!            u = ∂y ⊙ g                    ∂x = r u − x r³ mean(u ⊙ x)      ∂g = Σ_rows ∂y ⊙ x r
//! LayerNorm: x̂ = (x − mean x) r,  r = 1/√(var x + ε)      y = x̂ g + b
//!            ∂x = r (u − mean u − x̂ mean(u ⊙ x̂))          ∂g = Σ ∂y ⊙ x̂     ∂b = Σ ∂y
//! ```

use super::super::simd::dot_f64;
use rayon::prelude::*;

/// Which normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Rms,
    Layer,
}

/// Rows per parallel task.
const ROWS: usize = 32;

/// Mean of a row in f64 (rows are short; this keeps the statistics exact to f32).
fn mean(x: impl Iterator<Item = f32>, n: usize) -> f32 {
    (x.map(|v| v as f64).sum::<f64>() / n as f64) as f32
}

/// (y (n × d), r (n)) for x (n × d), gain g (d) and bias b (d, LayerNorm).
pub fn forward(
    kind: Kind,
    x: &[f32],
    g: &[f32],
    b: Option<&[f32]>,
    d: usize,
    eps: f32,
) -> (Vec<f32>, Vec<f32>) {
    let n = x.len() / d;
    let mut y = vec![0f32; n * d];
    let mut r = vec![0f32; n];
    y.par_chunks_mut(ROWS * d)
        .zip(r.par_chunks_mut(ROWS))
        .zip(x.par_chunks(ROWS * d))
        .for_each(|((y, r), x)| {
            for ((y, r), x) in y
                .chunks_exact_mut(d)
                .zip(r.iter_mut())
                .zip(x.chunks_exact(d))
            {
                match kind {
                    Kind::Rms => {
                        let ms = (dot_f64(x, x) / d as f64) as f32;
                        *r = 1.0 / (ms + eps).sqrt();
                        for ((y, &x), &g) in y.iter_mut().zip(x).zip(g) {
                            *y = x * *r * g;
                        }
                    }
                    Kind::Layer => {
                        let mu = mean(x.iter().copied(), d);
                        let var = mean(x.iter().map(|v| (v - mu) * (v - mu)), d);
                        *r = 1.0 / (var + eps).sqrt();
                        let b = b.expect("LayerNorm has a bias");
                        for (((y, &x), &g), &b) in y.iter_mut().zip(x).zip(g).zip(b) {
                            *y = (x - mu) * *r * g + b;
                        }
                    }
                }
            }
        });
    (y, r)
}

/// (∂g, ∂b) for the upstream gradient `dy_dx`, over which ∂x is written (the backward is its
/// last reader); ∂b only for LayerNorm.
pub fn backward(
    kind: Kind,
    x: &[f32],
    g: &[f32],
    r: &[f32],
    dy_dx: &mut [f32],
    d: usize,
) -> (Vec<f32>, Option<Vec<f32>>) {
    assert_eq!(x.len(), dy_dx.len(), "x and its gradient have one shape");
    // per task: (∂g, ∂b) partial sums, reduced below in task order
    let parts: Vec<(Vec<f32>, Vec<f32>)> = dy_dx
        .par_chunks_mut(ROWS * d)
        .zip(x.par_chunks(ROWS * d))
        .zip(r.par_chunks(ROWS))
        .map(|((dy, x), r)| {
            let (mut dg, mut db) = (vec![0f32; d], vec![0f32; d]);
            let mut u = vec![0f32; d]; // u = ∂y ⊙ g of the row
            for ((dy, x), &r) in dy.chunks_exact_mut(d).zip(x.chunks_exact(d)).zip(r) {
                let (g, dg, db, u) = (&g[..d], &mut dg[..d], &mut db[..d], &mut u[..d]);
                for i in 0..d {
                    u[i] = dy[i] * g[i];
                }
                match kind {
                    Kind::Rms => {
                        let mux = (dot_f64(u, x) / d as f64) as f32;
                        for i in 0..d {
                            dg[i] += dy[i] * x[i] * r;
                            dy[i] = r * u[i] - x[i] * r * r * r * mux; // ∂x over ∂y
                        }
                    }
                    Kind::Layer => {
                        let mu = mean(x.iter().copied(), d);
                        let xh = |i: usize| (x[i] - mu) * r;
                        let mu_u = mean(u.iter().copied(), d);
                        let mu_ux = mean((0..d).map(|i| u[i] * xh(i)), d);
                        for i in 0..d {
                            dg[i] += dy[i] * xh(i);
                            db[i] += dy[i];
                            dy[i] = r * (u[i] - mu_u - xh(i) * mu_ux); // ∂x over ∂y
                        }
                    }
                }
            }
            (dg, db)
        })
        .collect();
    let (mut dg, mut db) = (vec![0f32; d], vec![0f32; d]);
    for (pg, pb) in parts {
        dg.iter_mut().zip(pg).for_each(|(a, b)| *a += b);
        db.iter_mut().zip(pb).for_each(|(a, b)| *a += b);
    }
    (dg, (kind == Kind::Layer).then_some(db))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// loss = Σ c ⊙ y for fixed c, in f64, for finite differences.
    fn loss(kind: Kind, x: &[f64], g: &[f64], b: &[f64], c: &[f64], d: usize, eps: f64) -> f64 {
        x.chunks(d)
            .zip(c.chunks(d))
            .map(|(x, c)| {
                let mu = if kind == Kind::Layer {
                    x.iter().sum::<f64>() / d as f64
                } else {
                    0.0
                };
                let ms = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / d as f64;
                let r = 1.0 / (ms + eps).sqrt();
                (0..d)
                    .map(|i| {
                        c[i] * ((x[i] - mu) * r * g[i]
                            + if kind == Kind::Layer { b[i] } else { 0.0 })
                    })
                    .sum::<f64>()
            })
            .sum()
    }

    #[test]
    #[allow(clippy::needless_range_loop)]
    fn values_and_gradients_match_finite_differences_of_an_f64_reference() {
        let (n, d, eps) = (70, 24, 1e-5);
        let x: Vec<f32> = (0..n * d)
            .map(|i| ((i * 37 % 101) as f32 / 101.0 - 0.3) * 3.0)
            .collect();
        let g: Vec<f32> = (0..d).map(|i| 0.5 + i as f32 / d as f32).collect();
        let b: Vec<f32> = (0..d).map(|i| 0.1 * i as f32).collect();
        let c: Vec<f32> = (0..n * d)
            .map(|i| ((i * 13 % 89) as f32 / 89.0 - 0.5) * 2.0)
            .collect();
        let f64s = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<_>>();
        let (xd, gd, bd, cd) = (f64s(&x), f64s(&g), f64s(&b), f64s(&c));
        for kind in [Kind::Rms, Kind::Layer] {
            let (y, r) = forward(kind, &x, &g, Some(&b), d, eps as f32);
            let want = loss(kind, &xd, &gd, &bd, &cd, d, eps);
            let got: f64 = y.iter().zip(&c).map(|(a, b)| *a as f64 * *b as f64).sum();
            assert!(
                (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
                "{kind:?}: {got} {want}"
            );
            let mut dx = c.clone();
            let (dg, db) = backward(kind, &x, &g, &r, &mut dx, d);
            let h = 1e-6;
            let fd = |v: &[f64], i: usize, which: u8| {
                let (mut p, mut m) = (v.to_vec(), v.to_vec());
                p[i] += h;
                m[i] -= h;
                let l = |v: &[f64]| match which {
                    0 => loss(kind, v, &gd, &bd, &cd, d, eps),
                    1 => loss(kind, &xd, v, &bd, &cd, d, eps),
                    _ => loss(kind, &xd, &gd, v, &cd, d, eps),
                };
                (l(&p) - l(&m)) / (2.0 * h)
            };
            for i in (0..n * d).step_by(13) {
                let w = fd(&xd, i, 0);
                assert!(
                    (dx[i] as f64 - w).abs() <= 1e-3 * (1.0 + w.abs()),
                    "{kind:?} dx[{i}] {} {w}",
                    dx[i]
                );
            }
            for i in 0..d {
                let w = fd(&gd, i, 1);
                assert!(
                    (dg[i] as f64 - w).abs() <= 1e-3 * (1.0 + w.abs()),
                    "{kind:?} dg[{i}] {} {w}",
                    dg[i]
                );
                if kind == Kind::Layer {
                    let w = fd(&bd, i, 2);
                    assert!((db.as_ref().unwrap()[i] as f64 - w).abs() <= 1e-3 * (1.0 + w.abs()));
                }
            }
            assert_eq!(db.is_some(), kind == Kind::Layer);
        }
    }
}
