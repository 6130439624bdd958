//! Softmax cross-entropy over the vocabulary, forward and backward each in one pass over the
//! logits (rows in parallel), on host slices.
//!
//! ```text
//! lse_i  = log Σ_j exp(x_ij)                        # (N), kept for the backward
//! loss   = Σ_i w_i (lse_i − x_i,t_i)                 # w_i = mask_i / denom
//! ∂x_ij  = g w_i (exp(x_ij − lse_i) − [j = t_i])    # (N, V)
//! ```
//!
//! Rows with w_i = 0 (masked targets) are skipped: their loss term and gradient are 0.

use super::super::simd::{exp_sub_scale_inplace, max_of, sum_exp_sub};
use rayon::prelude::*;

/// Rows per parallel task.
const ROWS: usize = 4;

/// `(Σ_i w_i (lse_i − x_i,t_i), lse)` for logits `x` (N × V row-major), targets `t` (N) and
/// weights `w` (N). `lse_i` is computed for every row (masked ones too).
pub fn forward(x: &[f32], v: usize, t: &[u32], w: &[f32]) -> (f64, Vec<f32>) {
    let n = t.len();
    assert_eq!(x.len(), n * v, "logits are N × V");
    assert_eq!(w.len(), n, "one weight per row");
    let mut lse = vec![0f32; n];
    // per-task partial sums, added in task order: the loss does not depend on the threads
    let parts: Vec<f64> = lse
        .par_chunks_mut(ROWS)
        .enumerate()
        .map(|(c, out)| {
            let mut part = 0f64;
            for (r, o) in out.iter_mut().enumerate() {
                let i = c * ROWS + r;
                let row = &x[i * v..(i + 1) * v];
                let m = max_of(row);
                *o = m + sum_exp_sub(row, m).ln();
                if w[i] != 0.0 {
                    part += w[i] as f64 * (*o as f64 - row[t[i] as usize] as f64);
                }
            }
            part
        })
        .collect();
    (parts.iter().sum(), lse)
}

/// `∂loss/∂x` (N × V) for the upstream gradient `g` of the loss, written over the logits `x`
/// (the backward is their last reader: no allocation, no extra pass over N × V).
pub fn backward(x: &mut [f32], v: usize, t: &[u32], w: &[f32], lse: &[f32], g: f32) {
    assert_eq!(x.len(), t.len() * v, "logits are N × V");
    x.par_chunks_mut(ROWS * v)
        .enumerate()
        .for_each(|(c, rows)| {
            for (r, o) in rows.chunks_exact_mut(v).enumerate() {
                let i = c * ROWS + r;
                let s = g * w[i];
                if s == 0.0 {
                    o.fill(0.0);
                    continue;
                }
                exp_sub_scale_inplace(o, lse[i], s);
                o[t[i] as usize] -= s;
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// f64 reference from the definition.
    fn reference(x: &[f32], v: usize, t: &[u32], w: &[f32]) -> (f64, Vec<f64>) {
        let mut loss = 0.0;
        let mut dx = vec![0.0; x.len()];
        for (i, &ti) in t.iter().enumerate() {
            let row: Vec<f64> = x[i * v..(i + 1) * v].iter().map(|&a| a as f64).collect();
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + row.iter().map(|a| (a - m).exp()).sum::<f64>().ln();
            loss += w[i] as f64 * (lse - row[ti as usize]);
            for j in 0..v {
                let onehot = if j == ti as usize { 1.0 } else { 0.0 };
                dx[i * v + j] = w[i] as f64 * ((row[j] - lse).exp() - onehot);
            }
        }
        (loss, dx)
    }

    #[test]
    fn loss_and_gradient_match_an_f64_reference_and_masked_rows_are_zero() {
        let (n, v) = (9, 37);
        let x: Vec<f32> = (0..n * v)
            .map(|i| ((i * 7919 % 1013) as f32 / 1013.0 - 0.5) * 12.0)
            .collect();
        let t: Vec<u32> = (0..n as u32).map(|i| (i * 11) % v as u32).collect();
        let w: Vec<f32> = (0..n).map(|i| if i == 4 { 0.0 } else { 0.1 }).collect();
        let (loss, lse) = forward(&x, v, &t, &w);
        let (want, dwant) = reference(&x, v, &t, &w);
        assert!((loss - want).abs() <= 1e-6 * want.abs(), "{loss} {want}");
        assert_eq!(lse.len(), n);
        let mut dx = x.clone();
        backward(&mut dx, v, &t, &w, &lse, 2.0);
        for (j, (&a, &b)) in dx.iter().zip(&dwant).enumerate() {
            assert!(
                (a as f64 - 2.0 * b).abs() <= 1e-6,
                "dx[{j}] {a} vs {}",
                2.0 * b
            );
        }
        assert!(dx[4 * v..5 * v].iter().all(|&a| a == 0.0));
    }
}
