//! The gated feed-forward product `h = act(a) ⊙ b` (SwiGLU: act = SiLU; ReGLU: act = ReLU),
//! forward and backward each in one pass over the rows, on host slices:
//!
//! ```text
//! SiLU:  h = a σ(a) b            ∂a = ∂h b σ(a) (1 + a (1 − σ(a)))     ∂b = ∂h a σ(a)
//! ReLU:  h = max(a, 0) b         ∂a = ∂h b [a > 0]                      ∂b = ∂h max(a, 0)
//! ```
//!
//! σ(a) = 1 / (1 + e^−a) with the vectorised exp (Burn's SiLU calls libm's scalar `expf`
//! twice per element, forward and backward).

use super::super::simd::exp1;
use rayon::prelude::*;

/// Which activation gates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Silu,
    Relu,
}

/// Elements per parallel task.
const CHUNK: usize = 16 * 1024;

crate::kernels::simd::simd_dispatch! {
    fn silu_mul(a: &[f32], b: &[f32], h: &mut [f32]) {
        for ((h, &a), &b) in h.iter_mut().zip(a).zip(b) {
            *h = a / (1.0 + exp1(-a)) * b;
        }
    }
}

crate::kernels::simd::simd_dispatch! {
    /// ∂a over g (each g_i is read before it is overwritten), ∂b into db.
    fn silu_mul_backward(a: &[f32], b: &[f32], g_da: &mut [f32], db: &mut [f32]) {
        for i in 0..a.len().min(b.len()).min(g_da.len()).min(db.len()) {
            let s = 1.0 / (1.0 + exp1(-a[i]));
            let gs = g_da[i] * s;
            g_da[i] = gs * b[i] * (1.0 + a[i] * (1.0 - s));
            db[i] = gs * a[i];
        }
    }
}

/// h = act(a) ⊙ b.
pub fn forward(act: Act, a: &[f32], b: &[f32]) -> Vec<f32> {
    assert_eq!(a.len(), b.len(), "gate and up have one shape");
    let mut h = vec![0f32; a.len()];
    h.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
        .for_each(|(h, (a, b))| match act {
            Act::Silu => silu_mul(a, b, h),
            Act::Relu => {
                for ((h, &a), &b) in h.iter_mut().zip(a).zip(b) {
                    *h = a.max(0.0) * b;
                }
            }
        });
    h
}

/// (∂a, ∂b) for the upstream gradient `g_da`: ∂a is written over it (the backward is its last
/// reader), ∂b is returned.
pub fn backward(act: Act, a: &[f32], b: &[f32], g_da: &mut [f32]) -> Vec<f32> {
    let n = a.len();
    assert!(
        b.len() == n && g_da.len() == n,
        "gate, up and gradient have one shape"
    );
    let mut db = vec![0f32; n];
    g_da.par_chunks_mut(CHUNK)
        .zip(db.par_chunks_mut(CHUNK))
        .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
        .for_each(|((da, db), (a, b))| match act {
            Act::Silu => silu_mul_backward(a, b, da, db),
            Act::Relu => {
                for i in 0..a.len() {
                    let g = da[i];
                    da[i] = if a[i] > 0.0 { g * b[i] } else { 0.0 };
                    db[i] = g * a[i].max(0.0);
                }
            }
        });
    db
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_gradients_match_f64_and_finite_differences() {
        let n = 40_000; // several parallel chunks
        let a: Vec<f32> = (0..n)
            .map(|i| ((i * 37 % 1001) as f32 / 1001.0 - 0.5) * 24.0)
            .collect();
        let b: Vec<f32> = (0..n)
            .map(|i| ((i * 91 % 997) as f32 / 997.0 - 0.5) * 4.0)
            .collect();
        let g: Vec<f32> = (0..n)
            .map(|i| ((i * 13 % 89) as f32 / 89.0 - 0.5) * 2.0)
            .collect();
        for act in [Act::Silu, Act::Relu] {
            let f = |a: f64, b: f64| match act {
                Act::Silu => a / (1.0 + (-a).exp()) * b,
                Act::Relu => a.max(0.0) * b,
            };
            let h = forward(act, &a, &b);
            let mut da = g.clone();
            let db = backward(act, &a, &b, &mut da);
            for i in (0..n).step_by(7) {
                let (ai, bi) = (a[i] as f64, b[i] as f64);
                let want = f(ai, bi);
                assert!(
                    (h[i] as f64 - want).abs() <= 1e-6 * (1.0 + want.abs()),
                    "{act:?} h[{i}]"
                );
                let e = 1e-4;
                if act == Act::Relu && ai.abs() < 2.0 * e {
                    continue; // the kink
                }
                let fa = (f(ai + e, bi) - f(ai - e, bi)) / (2.0 * e) * g[i] as f64;
                let fb = (f(ai, bi + e) - f(ai, bi - e)) / (2.0 * e) * g[i] as f64;
                assert!(
                    (da[i] as f64 - fa).abs() <= 1e-4 * (1.0 + fa.abs()),
                    "{act:?} da[{i}] {} {fa}",
                    da[i]
                );
                assert!(
                    (db[i] as f64 - fb).abs() <= 1e-4 * (1.0 + fb.abs()),
                    "{act:?} db[{i}]"
                );
            }
        }
    }
}
