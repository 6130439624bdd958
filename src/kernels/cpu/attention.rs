//! Tiled softmax attention on host slices, forward and backward (FlashAttention-2's schedule,
//! Dao 2023, on the CPU): per (batch, head), query blocks of [`BR`] rows meet key blocks of
//! [`BC`] columns; the forward keeps a running row max and sum (online softmax) and never holds
//! more than a BR × BC block of scores; the backward recomputes each block's weights from the
//! saved log-sum-exp. (batch, head) pairs run in parallel.
//!
//! ```text
//! s_ij = scale · q_i·k_j + bias_h,i,j      visible j only (the runs of row i); −inf otherwise
//! extra column: s_i∅ = z_h, value 0        the sink logit; ln n for softmax_n; −inf: none
//! lse_i = log(e^z_h + Σ_j e^s_ij)          # (B, H, Q), saved
//! o_i = Σ_j e^(s_ij − lse_i) v_j           # (B, H, Q, D)
//! backward, with P_ij = e^(s_ij − lse_i) and D_i = do_i·o_i:
//! ∂v_j = Σ_i P_ij do_i     ∂s_ij = P_ij (do_i·v_j − D_i)
//! ∂q_i = scale Σ_j ∂s_ij k_j     ∂k_j = scale Σ_i ∂s_ij q_i     ∂z_h = −Σ_b,i e^(z_h − lse_i) D_i
//! ```
//!
//! A row that sees nothing (no visible key, no extra logit) gives o = 0 and lse = −inf.

use super::super::attention_op::AttnArgs;
use super::super::simd::{dot, exp_sub_sum, max_of};
use super::gemm;
use rayon::prelude::*;

/// Query rows per block.
pub const BR: usize = 64;
/// Key columns per block.
pub const BC: usize = 128;

/// Sizes: batch, heads, query rows, key columns, head width.
#[derive(Debug, Clone, Copy)]
pub struct Dims {
    pub b: usize,
    pub h: usize,
    pub q: usize,
    pub c: usize,
    pub d: usize,
}

impl Dims {
    /// From the shapes of q (B, H, Q, D) and k (B, H, C, D).
    pub fn of(q: &[usize], k: &[usize]) -> Self {
        match (q, k) {
            ([b, h, nq, d], [kb, kh, c, kd]) if b == kb && h == kh && d == kd => Self {
                b: *b,
                h: *h,
                q: *nq,
                c: *c,
                d: *d,
            },
            _ => panic!("attention kernel: q {q:?} and k {k:?} do not match"),
        }
    }
}

/// The visible columns of `run` inside the block `[j0, j0 + n)`, block-local.
fn clip(run: [u32; 2], j0: usize, n: usize) -> (usize, usize) {
    let lo = (run[0] as usize).max(j0);
    let hi = (run[1] as usize).min(j0 + n);
    if lo < hi { (lo - j0, hi - j0) } else { (0, 0) }
}

/// Set the invisible entries of a block row (`n` columns from `j0`) to −inf and add the bias
/// row (`bias` from column j0) to the visible ones. Returns whether any entry is visible.
fn mask_row(row: &mut [f32], runs: &[[u32; 2]; 2], j0: usize, bias: Option<&[f32]>) -> bool {
    let n = row.len();
    let (a0, b0) = clip(runs[0], j0, n);
    let (a1, b1) = clip(runs[1], j0, n);
    let ((a0, b0), (a1, b1)) = if a1 < a0 && b1 > a1 {
        ((a1, b1), (a0, b0))
    } else {
        ((a0, b0), (a1, b1))
    };
    let mut cut = 0;
    for (a, b) in [(a0, b0), (a1, b1)] {
        if a < b {
            row[cut..a].fill(f32::NEG_INFINITY);
            if let Some(bias) = bias {
                row[a..b]
                    .iter_mut()
                    .zip(&bias[a..b])
                    .for_each(|(s, x)| *s += x);
            }
            cut = b;
        }
    }
    row[cut..].fill(f32::NEG_INFINITY);
    b0 > a0 || b1 > a1
}

/// Whether any row of `rows` sees a column of `[j0, j0 + n)`.
fn block_visible(rows: &[[[u32; 2]; 2]], j0: usize, n: usize) -> bool {
    rows.iter()
        .any(|r| clip(r[0], j0, n).1 > 0 || clip(r[1], j0, n).1 > 0)
}

/// The key columns any row of `rows` sees: `[lo, hi)`.
fn extent(rows: &[[[u32; 2]; 2]]) -> (usize, usize) {
    let mut lo = usize::MAX;
    let mut hi = 0;
    for run in rows.iter().flatten() {
        if run[1] > run[0] {
            lo = lo.min(run[0] as usize);
            hi = hi.max(run[1] as usize);
        }
    }
    if lo >= hi { (0, 0) } else { (lo, hi) }
}

/// (out (B, H, Q, D), lse (B, H, Q)) for contiguous q (B, H, Q, D), k, v (B, H, C, D), z (H).
pub fn forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    z: &[f32],
    dims: Dims,
    args: &AttnArgs,
) -> (Vec<f32>, Vec<f32>) {
    let Dims { b, h, q: nq, c, d } = dims;
    assert_eq!(args.runs.len(), nq, "one run pair per query row");
    let mut out = vec![0f32; b * h * nq * d];
    let mut lse = vec![0f32; b * h * nq];
    out.par_chunks_mut(nq * d)
        .zip(lse.par_chunks_mut(nq))
        .enumerate()
        .for_each(|(bh, (o, l))| {
            let hi = bh % h;
            let (qs, ks, vs) = (
                &q[bh * nq * d..(bh + 1) * nq * d],
                &k[bh * c * d..(bh + 1) * c * d],
                &v[bh * c * d..(bh + 1) * c * d],
            );
            let bias = args
                .bias
                .as_ref()
                .map(|x| &x[hi * nq * c..(hi + 1) * nq * c]);
            head_forward(qs, ks, vs, z[hi], bias, dims, args, o, l);
        });
    (out, lse)
}

/// One (batch, head): q (Q, D), k, v (C, D) → o (Q, D), lse (Q).
#[allow(clippy::too_many_arguments)]
fn head_forward(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    z: f32,
    bias: Option<&[f32]>,
    dims: Dims,
    args: &AttnArgs,
    o: &mut [f32],
    lse: &mut [f32],
) {
    let Dims { q: nq, c, d, .. } = dims;
    let mut s = vec![0f32; BR * BC];
    let mut m = [0f32; BR];
    let mut l = [0f32; BR];
    for i0 in (0..nq).step_by(BR) {
        let rows = BR.min(nq - i0);
        let runs = &args.runs[i0..i0 + rows];
        let acc = &mut o[i0 * d..(i0 + rows) * d]; // accumulates Σ e^(s − m) v, then o
        acc.fill(0.0);
        m[..rows].fill(z);
        l[..rows].fill(if z > f32::NEG_INFINITY { 1.0 } else { 0.0 });
        let (lo, hi) = extent(runs);
        for j0 in (lo..hi).step_by(BC) {
            let cols = BC.min(hi - j0);
            if !block_visible(runs, j0, cols) {
                continue;
            }
            // S = scale · Q_blk K_blkᵀ  (rows × cols)
            unsafe {
                gemm::mm(
                    (rows, cols, d),
                    (s.as_mut_ptr(), cols, false),
                    (q[i0 * d..].as_ptr(), d as isize, 1),
                    (k[j0 * d..].as_ptr(), 1, d as isize),
                    args.scale,
                );
            }
            for r in 0..rows {
                let row = &mut s[r * cols..(r + 1) * cols];
                let brow = bias.map(|x| &x[(i0 + r) * c + j0..]);
                if !mask_row(row, &runs[r], j0, brow) {
                    row.fill(0.0);
                    continue;
                }
                let mnew = m[r].max(max_of(row));
                let corr = if m[r] == f32::NEG_INFINITY {
                    0.0
                } else {
                    (m[r] - mnew).exp()
                };
                let sum = exp_sub_sum(row, mnew); // row ← P
                l[r] = l[r] * corr + sum;
                if corr != 1.0 {
                    acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= corr);
                }
                m[r] = mnew;
            }
            // acc += P V_blk  (rows × d)
            unsafe {
                gemm::mm(
                    (rows, d, cols),
                    (acc.as_mut_ptr(), d, true),
                    (s.as_ptr(), cols as isize, 1),
                    (v[j0 * d..].as_ptr(), d as isize, 1),
                    1.0,
                );
            }
        }
        for r in 0..rows {
            if l[r] > 0.0 {
                let inv = 1.0 / l[r];
                acc[r * d..(r + 1) * d].iter_mut().for_each(|x| *x *= inv);
                lse[i0 + r] = m[r] + l[r].ln();
            } else {
                lse[i0 + r] = f32::NEG_INFINITY; // o stays 0
            }
        }
    }
}

/// What the forward saved, contiguous (shapes as in [`forward`]).
pub struct Saved<'a> {
    pub q: &'a [f32],
    pub k: &'a [f32],
    pub v: &'a [f32],
    pub z: &'a [f32],
    pub out: &'a [f32],
    pub lse: &'a [f32],
}

/// Gradients of q, k, v and z.
pub struct Grads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub dz: Vec<f32>,
}

/// The backward for the upstream gradient `dout` (B, H, Q, D).
pub fn backward<'a>(saved: Saved<'a>, dout: &[f32], dims: Dims, args: &AttnArgs) -> Grads {
    let Dims { b, h, q: nq, c, d } = dims;
    let mut dq = vec![0f32; b * h * nq * d];
    let mut dk = vec![0f32; b * h * c * d];
    let mut dv = vec![0f32; b * h * c * d];
    let dz_parts: Vec<f32> = dq
        .par_chunks_mut(nq * d)
        .zip(dk.par_chunks_mut(c * d))
        .zip(dv.par_chunks_mut(c * d))
        .enumerate()
        .map(|(bh, ((dq, dk), dv))| {
            let hi = bh % h;
            let qd = |x: &[f32]| x[bh * nq * d..(bh + 1) * nq * d].to_vec();
            let cd = |x: &'a [f32]| &x[bh * c * d..(bh + 1) * c * d];
            let (q, o, g) = (qd(saved.q), qd(saved.out), qd(dout));
            let bias = args
                .bias
                .as_ref()
                .map(|x| &x[hi * nq * c..(hi + 1) * nq * c]);
            let head = Head {
                q: &q,
                k: cd(saved.k),
                v: cd(saved.v),
                o: &o,
                g: &g,
                lse: &saved.lse[bh * nq..(bh + 1) * nq],
                z: saved.z[hi],
                bias,
            };
            head.backward(dims, args, dq, dk, dv)
        })
        .collect();
    let mut dz = vec![0f32; h];
    for (bh, part) in dz_parts.iter().enumerate() {
        dz[bh % h] += part;
    }
    Grads { dq, dk, dv, dz }
}

/// One (batch, head)'s saved values and upstream gradient.
struct Head<'a> {
    q: &'a [f32],
    k: &'a [f32],
    v: &'a [f32],
    o: &'a [f32],
    g: &'a [f32],
    lse: &'a [f32],
    z: f32,
    bias: Option<&'a [f32]>,
}

impl Head<'_> {
    /// Accumulate ∂q (Q, D), ∂k, ∂v (C, D); return this head's share of ∂z.
    fn backward(
        &self,
        dims: Dims,
        args: &AttnArgs,
        dq: &mut [f32],
        dk: &mut [f32],
        dv: &mut [f32],
    ) -> f32 {
        let Dims { q: nq, c, d, .. } = dims;
        // D_i = do_i · o_i
        let big_d: Vec<f32> = (0..nq)
            .map(|i| dot(&self.g[i * d..(i + 1) * d], &self.o[i * d..(i + 1) * d]))
            .collect();
        let mut p = vec![0f32; BR * BC];
        let mut ds = vec![0f32; BR * BC];
        for i0 in (0..nq).step_by(BR) {
            let rows = BR.min(nq - i0);
            let runs = &args.runs[i0..i0 + rows];
            let (lo, hi) = extent(runs);
            for j0 in (lo..hi).step_by(BC) {
                let cols = BC.min(hi - j0);
                if !block_visible(runs, j0, cols) {
                    continue;
                }
                unsafe {
                    // P ← scale · Q_blk K_blkᵀ, then masked and exponentiated below
                    gemm::mm(
                        (rows, cols, d),
                        (p.as_mut_ptr(), cols, false),
                        (self.q[i0 * d..].as_ptr(), d as isize, 1),
                        (self.k[j0 * d..].as_ptr(), 1, d as isize),
                        args.scale,
                    );
                    // dP = dO_blk V_blkᵀ
                    gemm::mm(
                        (rows, cols, d),
                        (ds.as_mut_ptr(), cols, false),
                        (self.g[i0 * d..].as_ptr(), d as isize, 1),
                        (self.v[j0 * d..].as_ptr(), 1, d as isize),
                        1.0,
                    );
                }
                for r in 0..rows {
                    let (prow, dsrow) = (
                        &mut p[r * cols..(r + 1) * cols],
                        &mut ds[r * cols..(r + 1) * cols],
                    );
                    let brow = self.bias.map(|x| &x[(i0 + r) * c + j0..]);
                    let lse = self.lse[i0 + r];
                    if !mask_row(prow, &runs[r], j0, brow) || lse == f32::NEG_INFINITY {
                        prow.fill(0.0);
                        dsrow.fill(0.0);
                        continue;
                    }
                    exp_sub_sum(prow, lse); // P = e^(s − lse), in place
                    let di = big_d[i0 + r];
                    // dS = P ∘ (dP − D_i)
                    dsrow
                        .iter_mut()
                        .zip(prow.iter())
                        .for_each(|(x, &pv)| *x = pv * (*x - di));
                }
                unsafe {
                    // dV_blk += P_blkᵀ dO_blk   (cols × d)
                    gemm::mm(
                        (cols, d, rows),
                        (dv[j0 * d..].as_mut_ptr(), d, true),
                        (p.as_ptr(), 1, cols as isize),
                        (self.g[i0 * d..].as_ptr(), d as isize, 1),
                        1.0,
                    );
                    // dQ_blk += scale · dS K_blk   (rows × d)
                    gemm::mm(
                        (rows, d, cols),
                        (dq[i0 * d..].as_mut_ptr(), d, true),
                        (ds.as_ptr(), cols as isize, 1),
                        (self.k[j0 * d..].as_ptr(), d as isize, 1),
                        args.scale,
                    );
                    // dK_blk += scale · dSᵀ Q_blk   (cols × d)
                    gemm::mm(
                        (cols, d, rows),
                        (dk[j0 * d..].as_mut_ptr(), d, true),
                        (ds.as_ptr(), 1, cols as isize),
                        (self.q[i0 * d..].as_ptr(), d as isize, 1),
                        args.scale,
                    );
                }
            }
        }
        if self.z == f32::NEG_INFINITY {
            return 0.0;
        }
        // ∂z = Σ_i ∂s_i∅ = Σ_i P_i∅ (0 − D_i)
        (0..nq)
            .filter(|&i| self.lse[i] > f32::NEG_INFINITY)
            .map(|i| -(self.z - self.lse[i]).exp() * big_d[i])
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A seeded sequence in [−1, 1).
    fn noise(n: usize, seed: u64) -> Vec<f32> {
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// Forward and backward of the definition in f64, with the whole (Q, C) weight matrix:
    /// (o, lse, dq, dk, dv, dz).
    #[allow(clippy::type_complexity, clippy::needless_range_loop)]
    fn reference(
        s: &Saved,
        g: &[f32],
        dims: Dims,
        args: &AttnArgs,
    ) -> (Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>, Vec<f64>) {
        let Dims { b, h, q: nq, c, d } = dims;
        let (mut o, mut lse) = (vec![0.0; b * h * nq * d], vec![0.0; b * h * nq]);
        let (mut dq, mut dk, mut dv, mut dz) = (
            vec![0.0; b * h * nq * d],
            vec![0.0; b * h * c * d],
            vec![0.0; b * h * c * d],
            vec![0.0; h],
        );
        for bh in 0..b * h {
            let hi = bh % h;
            let z = s.z[hi] as f64;
            for i in 0..nq {
                let runs = args.runs[i];
                let seen = |j: usize| {
                    runs.iter()
                        .any(|r| (r[0] as usize..r[1] as usize).contains(&j))
                };
                let qi = &s.q[(bh * nq + i) * d..][..d];
                let mut sc = vec![f64::NEG_INFINITY; c];
                for (j, x) in sc.iter_mut().enumerate() {
                    if seen(j) {
                        let kj = &s.k[(bh * c + j) * d..][..d];
                        let dotp: f64 = qi.iter().zip(kj).map(|(a, b)| *a as f64 * *b as f64).sum();
                        let bias = args
                            .bias
                            .as_ref()
                            .map_or(0.0, |x| x[(hi * nq + i) * c + j] as f64);
                        *x = args.scale as f64 * dotp + bias;
                    }
                }
                let m = sc.iter().cloned().fold(z, f64::max);
                let total: f64 = sc.iter().map(|x| (x - m).exp()).sum::<f64>() + (z - m).exp();
                let l = m + total.ln();
                lse[bh * nq + i] = l;
                let p: Vec<f64> = sc.iter().map(|x| (x - l).exp()).collect();
                let gi = &g[(bh * nq + i) * d..][..d];
                let mut oi = vec![0.0; d];
                for (j, pj) in p.iter().enumerate() {
                    for t in 0..d {
                        oi[t] += pj * s.v[(bh * c + j) * d + t] as f64;
                    }
                }
                let big_d: f64 = oi.iter().zip(gi).map(|(a, b)| a * *b as f64).sum();
                for (j, pj) in p.iter().enumerate() {
                    let dp: f64 = (0..d)
                        .map(|t| gi[t] as f64 * s.v[(bh * c + j) * d + t] as f64)
                        .sum();
                    let ds = pj * (dp - big_d);
                    for t in 0..d {
                        dv[(bh * c + j) * d + t] += pj * gi[t] as f64;
                        dq[(bh * nq + i) * d + t] +=
                            args.scale as f64 * ds * s.k[(bh * c + j) * d + t] as f64;
                        dk[(bh * c + j) * d + t] += args.scale as f64 * ds * qi[t] as f64;
                    }
                }
                if z > f64::NEG_INFINITY {
                    dz[hi] -= (z - l).exp() * big_d;
                }
                o[(bh * nq + i) * d..][..d].copy_from_slice(&oi);
            }
        }
        (o, lse, dq, dk, dv, dz)
    }

    fn close(got: &[f32], want: &[f64], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        let scale = want.iter().fold(0f64, |m, x| m.max(x.abs()));
        for (i, (&a, &b)) in got.iter().zip(want).enumerate() {
            assert!(
                (a as f64 - b).abs() <= tol * scale + 1e-6,
                "{what}[{i}]: {a} vs {b} (scale {scale})"
            );
        }
    }

    /// Several query and key blocks (Q = 150 > BR, C = 300 > BC), with a causal mask after 3
    /// slot columns, a sliding window with kept front keys, a prefix, ALiBi-like biases and
    /// the extra logit on, off and learned.
    #[test]
    fn tiles_equal_the_whole_matrix_forward_and_backward() {
        let (b, h, nq, d, slots) = (2, 3, 150, 24, 3);
        let c = slots + nq;
        type Rule = Box<dyn Fn(usize) -> [[u32; 2]; 2]>;
        let rules: Vec<(&str, Rule)> = vec![
            (
                "causal",
                Box::new(move |i| [[0, (slots + i + 1) as u32], [0, 0]]),
            ),
            (
                "sinks + window",
                Box::new(move |i| {
                    let lo = (slots + i + 1).saturating_sub(40).max(slots + 4);
                    [
                        [0, (slots + 4).min(slots + i + 1) as u32],
                        [lo as u32, (slots + i + 1).max(lo) as u32],
                    ]
                }),
            ),
            (
                "prefix",
                Box::new(move |i| [[0, (slots + (i + 1).max(70)) as u32], [0, 0]]),
            ),
        ];
        for (name, rule) in rules {
            for (zname, z) in [
                ("no extra logit", vec![f32::NEG_INFINITY; h]),
                ("extra logit", vec![0.5, -1.0, 2.0]),
            ] {
                for with_bias in [false, true] {
                    let args = AttnArgs {
                        scale: 1.0 / (d as f32).sqrt(),
                        runs: Arc::new((0..nq).map(&rule).collect()),
                        bias: with_bias.then(|| {
                            Arc::new(
                                (0..h * nq * c)
                                    .map(|x| -0.03 * ((x % c) as f32 - (x / c % nq) as f32).abs())
                                    .collect(),
                            )
                        }),
                    };
                    let dims = Dims { b, h, q: nq, c, d };
                    let q: Vec<f32> = noise(b * h * nq * d, 1).iter().map(|x| 3.0 * x).collect();
                    let k = noise(b * h * c * d, 2);
                    let v = noise(b * h * c * d, 3);
                    let g = noise(b * h * nq * d, 4);
                    let (o, lse) = forward(&q, &k, &v, &z, dims, &args);
                    let saved = Saved {
                        q: &q,
                        k: &k,
                        v: &v,
                        z: &z,
                        out: &o,
                        lse: &lse,
                    };
                    let what = format!("{name}, {zname}, bias {with_bias}");
                    let (ro, rl, rdq, rdk, rdv, rdz) = reference(&saved, &g, dims, &args);
                    close(&o, &ro, 1e-5, &format!("{what}: o"));
                    close(&lse, &rl, 1e-6, &format!("{what}: lse"));
                    let gr = backward(saved, &g, dims, &args);
                    close(&gr.dq, &rdq, 1e-5, &format!("{what}: dq"));
                    close(&gr.dk, &rdk, 1e-5, &format!("{what}: dk"));
                    close(&gr.dv, &rdv, 1e-5, &format!("{what}: dv"));
                    close(&gr.dz, &rdz, 1e-5, &format!("{what}: dz"));
                }
            }
        }
    }
}
