//! The head and the cross-entropy of an evaluation in one pass over the vocabulary, a block of
//! [`VB`] ids at a time, without the (N, V) logits (forward only):
//!
//! ```text
//! for each block J of the vocabulary:   z_J = h W_J               # (N, |J|)
//!     m_i ← max(m_i, max_J z_i),  s_i ← s_i e^(m_i,old − m_i) + Σ_J e^(z_iJ − m_i)
//!     picked_i = z_i,t_i  when t_i ∈ J
//! loss = Σ_i w_i (m_i + ln s_i − picked_i)
//! ```
//!
//! Each block of the weight is read (and packed by gemm) once for all N rows: forming the logits
//! a block of positions at a time instead re-reads the whole (d × V) head for every block of
//! positions, which on a 49,152-id vocabulary cost more than the blocks of the model below it.

use super::super::simd::{max_of, sum_exp_sub};
use super::linear::{WeightLayout, product};
use rayon::prelude::*;

/// Vocabulary ids per block.
pub const VB: usize = 4096;

/// `Σ_i w_i (−log softmax(h_i W)[t_i])` for h (n × d) row-major and W (d × V) as `lay` says.
#[allow(clippy::too_many_arguments)]
pub fn loss(
    h: &[f32],
    w: &[f32],
    lay: WeightLayout,
    n: usize,
    d: usize,
    v: usize,
    t: &[u32],
    wts: &[f32],
) -> f64 {
    assert_eq!(h.len(), n * d, "h is N × d");
    assert_eq!(w.len(), d * v, "W has d × V entries");
    assert!(
        t.len() == n && wts.len() == n,
        "one target and weight per row"
    );
    let mut state = vec![(f32::NEG_INFINITY, 0f32, 0f32); n]; // (m, s, picked)
    for j0 in (0..v).step_by(VB) {
        let bw = VB.min(v - j0);
        let block = match lay {
            WeightLayout::InOut => (&w[j0..], v as isize, 1),
            WeightLayout::OutIn => (&w[j0 * d..], 1, d as isize),
        };
        let z = product((n, bw, d), (h, d as isize, 1), block); // (n × bw)
        state
            .par_iter_mut()
            .zip(z.par_chunks(bw))
            .enumerate()
            .for_each(|(i, ((m, s, picked), row))| {
                let mx = max_of(row);
                if mx > *m {
                    *s = *s * (*m - mx).exp() + sum_exp_sub(row, mx);
                    *m = mx;
                } else {
                    *s += sum_exp_sub(row, *m);
                }
                let ti = t[i] as usize;
                if (j0..j0 + bw).contains(&ti) {
                    *picked = row[ti - j0];
                }
            });
    }
    state
        .iter()
        .zip(wts)
        .filter(|(_, w)| **w != 0.0)
        .map(|(&(m, s, picked), &w)| w as f64 * ((m + s.ln()) as f64 - picked as f64))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_blocked_loss_equals_the_whole_logits_in_f64_in_both_layouts() {
        let (n, d, v) = (37, 24, 2 * VB + 123); // three blocks, the last partial
        let h: Vec<f32> = (0..n * d)
            .map(|i| ((i * 31 % 97) as f32 / 97.0 - 0.5) * 4.0)
            .collect();
        let w: Vec<f32> = (0..d * v)
            .map(|i| ((i * 17 % 89) as f32 / 89.0 - 0.5) * 2.0)
            .collect();
        let wt: Vec<f32> = (0..v * d).map(|i| w[(i % d) * v + i / d]).collect(); // (V × d)
        let t: Vec<u32> = (0..n as u32).map(|i| (i * 977) % v as u32).collect();
        let wts: Vec<f32> = (0..n)
            .map(|i| if i % 5 == 0 { 0.0 } else { 0.03 })
            .collect();
        let mut want = 0.0;
        for i in 0..n {
            let z: Vec<f64> = (0..v)
                .map(|j| {
                    (0..d)
                        .map(|k| h[i * d + k] as f64 * w[k * v + j] as f64)
                        .sum()
                })
                .collect();
            let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let lse = m + z.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            want += wts[i] as f64 * (lse - z[t[i] as usize]);
        }
        for (lay, wl) in [(WeightLayout::InOut, &w), (WeightLayout::OutIn, &wt)] {
            let got = loss(&h, wl, lay, n, d, v, &t, &wts);
            assert!(
                (got - want).abs() <= 1e-5 * want.abs(),
                "{lay:?}: {got} vs {want}"
            );
        }
    }
}
