//! Tiled softmax attention on host slices, forward and backward (FlashAttention-2's schedule,
//! Dao 2023, on the CPU): per (batch, head), query blocks of [`BR`] rows meet key blocks of
//! [`BC`] columns; the forward keeps a running row max and sum (online softmax) and never holds
//! more than a BR × BC block of scores; the backward recomputes each block's weights from the
//! saved log-sum-exp. The forward runs (batch, head, query block) tasks in parallel, the
//! backward (batch, head) pairs.
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

/// Where one (batch, head)'s rows of a (B, H, N, D) tensor lie in its storage: element
/// (b, h, i, x) at `off + b·sb + h·sh + i·rs + x` (unit stride along D). Heads-major storage
/// is [`View::heads_major`]; a linear layer's (B, N, H·D) output split into heads without a copy
/// (`reshape` then `swap_dims(1, 2)`) is [`View::seq_major`], which the kernel reads and writes
/// in place of the transposes around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct View {
    pub off: usize,
    pub sb: usize,
    pub sh: usize,
    pub rs: usize,
}

impl View {
    /// Contiguous (B, H, N, D).
    pub fn heads_major(h: usize, n: usize, d: usize) -> Self {
        Self {
            off: 0,
            sb: h * n * d,
            sh: n * d,
            rs: d,
        }
    }

    /// (B, H, N, D) stored as contiguous (B, N, H, D).
    pub fn seq_major(h: usize, n: usize, d: usize) -> Self {
        Self {
            off: 0,
            sb: n * h * d,
            sh: d,
            rs: h * d,
        }
    }

    /// The storage offset of pair `bh` = b·H + h's first row.
    fn at(&self, bh: usize, h: usize) -> usize {
        self.off + (bh / h) * self.sb + (bh % h) * self.sh
    }

    /// The storage elements a (B, H, N, D) tensor through this view reaches (0 for none).
    fn reach(&self, b: usize, h: usize, n: usize, d: usize) -> usize {
        if b * h * n * d == 0 {
            return 0;
        }
        self.off + (b - 1) * self.sb + (h - 1) * self.sh + (n - 1) * self.rs + d
    }
}

/// A (B, H, N, D) tensor's storage and its [`View`].
#[derive(Debug, Clone, Copy)]
pub struct Strided<'a> {
    pub data: &'a [f32],
    pub view: View,
}

impl<'a> Strided<'a> {
    /// Contiguous (B, H, N, D) values.
    pub fn heads_major(data: &'a [f32], h: usize, n: usize, d: usize) -> Self {
        Self {
            data,
            view: View::heads_major(h, n, d),
        }
    }

    /// Panics unless every element of (b, h, n, d) lies inside the storage.
    fn check(&self, (b, h, n, d): (usize, usize, usize, usize), what: &str) {
        assert!(
            self.view.reach(b, h, n, d) <= self.data.len(),
            "attention kernel: {what} ({b}, {h}, {n}, {d}) through {:?} overruns {} elements",
            self.view,
            self.data.len()
        );
    }

    /// Pair `bh`'s rows: (pointer to its first row, row stride).
    fn rows(&self, bh: usize, h: usize) -> (*const f32, usize) {
        (self.data[self.view.at(bh, h)..].as_ptr(), self.view.rs)
    }
}

/// A shared output buffer each task writes its own, disjoint, elements of.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: the tasks write disjoint elements (distinct (b, h) pairs of one view, or distinct
// row blocks of them) and the buffer outlives them (rayon joins before the owner is used again).
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer (a method, so closures capture the `Sync` wrapper, not the raw field).
    fn ptr(self) -> *mut f32 {
        self.0
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

/// The key blocks a query block's rows see, in order: `(j0, cols)` for every block of at most
/// [`BC`] columns from the first to the last column any row sees, skipping blocks no row sees.
fn key_blocks(rows: &[[[u32; 2]; 2]]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let (lo, hi) = extent(rows);
    (lo..hi)
        .step_by(BC)
        .map(move |j0| (j0, BC.min(hi - j0)))
        .filter(|&(j0, cols)| block_visible(rows, j0, cols))
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

/// `s` (rows × cols, row-major) ← S = scale · Q_blk K_blkᵀ for query rows `i0..i0 + rows` and
/// key rows `j0..j0 + cols`; q and k are (first row, row stride) with rows of width d.
///
/// # Safety
/// Those rows of q and k lie inside their storage; `s` holds rows × cols values.
#[allow(clippy::type_complexity)]
unsafe fn scores(
    s: &mut [f32],
    (q, k): ((*const f32, usize), (*const f32, usize)),
    (i0, j0): (usize, usize),
    (rows, cols, d): (usize, usize, usize),
    scale: f32,
) {
    assert!(s.len() >= rows * cols, "attention kernel: score block");
    // SAFETY: the caller's contract; Kᵀ is read in place (row stride 1, column stride k.1).
    unsafe {
        gemm::mm(
            (rows, cols, d),
            (s.as_mut_ptr(), cols, false),
            (q.0.add(i0 * q.1), q.1 as isize, 1),
            (k.0.add(j0 * k.1), 1, k.1 as isize),
            scale,
        );
    }
}

/// (out, lse (B, H, Q)) for q (B, H, Q, D), k, v (B, H, C, D) through their views and z (H);
/// out (B, H, Q, D) is stored as `out_view` says (heads- or sequence-major, B·H·Q·D elements).
pub fn forward(
    q: Strided,
    k: Strided,
    v: Strided,
    z: &[f32],
    dims: Dims,
    args: &AttnArgs,
    out_view: View,
) -> (Vec<f32>, Vec<f32>) {
    let Dims { b, h, q: nq, c, d } = dims;
    assert_eq!(args.runs.len(), nq, "one run pair per query row");
    q.check((b, h, nq, d), "q");
    k.check((b, h, c, d), "k");
    v.check((b, h, c, d), "v");
    let mut out = vec![0f32; b * h * nq * d];
    assert!(
        out_view.reach(b, h, nq, d) <= out.len(),
        "attention kernel: output view"
    );
    let o = OutPtr(out.as_mut_ptr());
    let mut lse = vec![0f32; b * h * nq];
    // One task per (pair, query block): a single sequence's few heads would leave cores idle
    // (9 heads on 2 cores: 5 against 4), while its blocks are many and independent.
    lse.par_chunks_mut(nq.max(1))
        .enumerate()
        .flat_map(|(bh, l)| {
            l.par_chunks_mut(BR)
                .enumerate()
                .map(move |(blk, lb)| (bh, blk * BR, lb))
        })
        .for_each_init(
            || (vec![0f32; BR * BC], vec![0f32; BR * d]),
            |(s, acc), (bh, i0, l)| {
                let hi = bh % h;
                let bias = args
                    .bias
                    .as_ref()
                    .map(|x| &x[hi * nq * c..(hi + 1) * nq * c]);
                // SAFETY: pair bh writes only its own rows of `out` (checked to fit above).
                let o = unsafe { o.ptr().add(out_view.at(bh, h)) };
                let (qs, ks, vs) = (q.rows(bh, h), k.rows(bh, h), v.rows(bh, h));
                let scratch = (s.as_mut_slice(), acc.as_mut_slice());
                let at = (i0, z[hi], bias);
                block_forward((qs, ks, vs), at, dims, args, (o, out_view.rs), l, scratch);
            },
        );
    (out, lse)
}

/// One query block (rows `i0..i0 + lse.len()`) of one (batch, head): q (Q, D), k, v (C, D),
/// each (first row, row stride) → the block's rows of o (Q, D), written at (first row, row
/// stride), and its lse; `s` (BR × BC) and `acc` (BR × D) are scratch.
#[allow(clippy::type_complexity)]
fn block_forward(
    (q, k, v): (
        (*const f32, usize),
        (*const f32, usize),
        (*const f32, usize),
    ),
    (i0, z, bias): (usize, f32, Option<&[f32]>),
    dims: Dims,
    args: &AttnArgs,
    (o, ors): (*mut f32, usize),
    lse: &mut [f32],
    (s, acc): (&mut [f32], &mut [f32]),
) {
    let Dims { c, d, .. } = dims;
    let mut m = [0f32; BR];
    let mut l = [0f32; BR];
    let rows = lse.len();
    let runs = &args.runs[i0..i0 + rows];
    let acc = &mut acc[..rows * d];
    acc.fill(0.0);
    m[..rows].fill(z);
    l[..rows].fill(if z > f32::NEG_INFINITY { 1.0 } else { 0.0 });
    for (j0, cols) in key_blocks(runs) {
        // SAFETY (all products here): the views were checked to reach only inside their
        // storage; s and acc are this task's own.
        unsafe { scores(s, (q, k), (i0, j0), (rows, cols, d), args.scale) };
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
                (v.0.add(j0 * v.1), v.1 as isize, 1),
                1.0,
            );
        }
    }
    for r in 0..rows {
        let orow = &mut acc[r * d..(r + 1) * d];
        if l[r] > 0.0 {
            let inv = 1.0 / l[r];
            orow.iter_mut().for_each(|x| *x *= inv);
            lse[r] = m[r] + l[r].ln();
        } else {
            lse[r] = f32::NEG_INFINITY; // o stays 0
        }
        // SAFETY: row i0 + r of this pair's output, inside the checked view.
        unsafe {
            std::ptr::copy_nonoverlapping(orow.as_ptr(), o.add((i0 + r) * ors), d);
        }
    }
}

/// What the forward saved (shapes and views as in [`forward`]).
pub struct Saved<'a> {
    pub q: Strided<'a>,
    pub k: Strided<'a>,
    pub v: Strided<'a>,
    pub z: &'a [f32],
    pub out: Strided<'a>,
    pub lse: &'a [f32],
}

/// Gradients of q, k, v (stored through the views passed to [`backward`]) and z.
pub struct Grads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub dz: Vec<f32>,
}

/// The backward for the upstream gradient `dout` (B, H, Q, D); ∂q is stored through `views.0`,
/// ∂k and ∂v through `views.1` and `views.2` (heads- or sequence-major).
pub fn backward(
    saved: Saved,
    dout: Strided,
    dims: Dims,
    args: &AttnArgs,
    views: (View, View, View),
) -> Grads {
    let Dims { b, h, q: nq, c, d } = dims;
    saved.q.check((b, h, nq, d), "q");
    saved.k.check((b, h, c, d), "k");
    saved.v.check((b, h, c, d), "v");
    saved.out.check((b, h, nq, d), "out");
    dout.check((b, h, nq, d), "dout");
    let mut dq = vec![0f32; b * h * nq * d];
    let mut dk = vec![0f32; b * h * c * d];
    let mut dv = vec![0f32; b * h * c * d];
    assert!(
        views.0.reach(b, h, nq, d) <= dq.len()
            && views.1.reach(b, h, c, d) <= dk.len()
            && views.2.reach(b, h, c, d) <= dv.len(),
        "attention kernel: gradient views"
    );
    let (pq, pk, pv) = (
        OutPtr(dq.as_mut_ptr()),
        OutPtr(dk.as_mut_ptr()),
        OutPtr(dv.as_mut_ptr()),
    );
    let dz_parts: Vec<f32> = (0..b * h)
        .into_par_iter()
        .map(|bh| {
            let hi = bh % h;
            let bias = args
                .bias
                .as_ref()
                .map(|x| &x[hi * nq * c..(hi + 1) * nq * c]);
            let head = Head {
                q: saved.q.rows(bh, h),
                k: saved.k.rows(bh, h),
                v: saved.v.rows(bh, h),
                o: saved.out.rows(bh, h),
                g: dout.rows(bh, h),
                lse: &saved.lse[bh * nq..(bh + 1) * nq],
                z: saved.z[hi],
                bias,
            };
            // SAFETY: pair bh writes only its own rows of dq, dk, dv (checked to fit above).
            let out = unsafe {
                (
                    (pq.ptr().add(views.0.at(bh, h)), views.0.rs),
                    (pk.ptr().add(views.1.at(bh, h)), views.1.rs),
                    (pv.ptr().add(views.2.at(bh, h)), views.2.rs),
                )
            };
            head.backward(dims, args, out)
        })
        .collect();
    let mut dz = vec![0f32; h];
    for (bh, part) in dz_parts.iter().enumerate() {
        dz[bh % h] += part;
    }
    Grads { dq, dk, dv, dz }
}

/// One (batch, head)'s saved values and upstream gradient, each (first row, row stride).
struct Head<'a> {
    q: (*const f32, usize),
    k: (*const f32, usize),
    v: (*const f32, usize),
    o: (*const f32, usize),
    g: (*const f32, usize),
    lse: &'a [f32],
    z: f32,
    bias: Option<&'a [f32]>,
}

/// Row `i` (width d) of (first row, row stride).
///
/// # Safety
/// The row must lie inside the storage the pointer came from.
unsafe fn row<'a>((p, rs): (*const f32, usize), i: usize, d: usize) -> &'a [f32] {
    unsafe { std::slice::from_raw_parts(p.add(i * rs), d) }
}

impl Head<'_> {
    /// Accumulate ∂q (Q, D), ∂k, ∂v (C, D), each at (first row, row stride); return this
    /// head's share of ∂z.
    #[allow(clippy::type_complexity)]
    fn backward(
        &self,
        dims: Dims,
        args: &AttnArgs,
        (dq, dk, dv): ((*mut f32, usize), (*mut f32, usize), (*mut f32, usize)),
    ) -> f32 {
        let Dims { q: nq, d, c, .. } = dims;
        let (q, k, v, g) = (self.q, self.k, self.v, self.g);
        // D_i = do_i · o_i
        // SAFETY (rows and products below): every row and block lies inside the views
        // `backward` checked; dq, dk, dv are this pair's own rows; p and ds are local.
        let big_d: Vec<f32> = (0..nq)
            .map(|i| unsafe { dot(row(g, i, d), row(self.o, i, d)) })
            .collect();
        let mut p = vec![0f32; BR * BC];
        let mut ds = vec![0f32; BR * BC];
        for i0 in (0..nq).step_by(BR) {
            let rows = BR.min(nq - i0);
            let runs = &args.runs[i0..i0 + rows];
            for (j0, cols) in key_blocks(runs) {
                unsafe {
                    // P ← S, then masked and exponentiated below
                    scores(&mut p, (q, k), (i0, j0), (rows, cols, d), args.scale);
                    // dP = dO_blk V_blkᵀ
                    gemm::mm(
                        (rows, cols, d),
                        (ds.as_mut_ptr(), cols, false),
                        (g.0.add(i0 * g.1), g.1 as isize, 1),
                        (v.0.add(j0 * v.1), 1, v.1 as isize),
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
                        (dv.0.add(j0 * dv.1), dv.1, true),
                        (p.as_ptr(), 1, cols as isize),
                        (g.0.add(i0 * g.1), g.1 as isize, 1),
                        1.0,
                    );
                    // dQ_blk += scale · dS K_blk   (rows × d)
                    gemm::mm(
                        (rows, d, cols),
                        (dq.0.add(i0 * dq.1), dq.1, true),
                        (ds.as_ptr(), cols as isize, 1),
                        (k.0.add(j0 * k.1), k.1 as isize, 1),
                        args.scale,
                    );
                    // dK_blk += scale · dSᵀ Q_blk   (cols × d)
                    gemm::mm(
                        (cols, d, rows),
                        (dk.0.add(j0 * dk.1), dk.1, true),
                        (ds.as_ptr(), 1, cols as isize),
                        (q.0.add(i0 * q.1), q.1 as isize, 1),
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
        (q, k, v, zs): (&[f32], &[f32], &[f32], &[f32]),
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
            let z = zs[hi] as f64;
            for i in 0..nq {
                let runs = args.runs[i];
                let seen = |j: usize| {
                    runs.iter()
                        .any(|r| (r[0] as usize..r[1] as usize).contains(&j))
                };
                let qi = &q[(bh * nq + i) * d..][..d];
                let mut sc = vec![f64::NEG_INFINITY; c];
                for (j, x) in sc.iter_mut().enumerate() {
                    if seen(j) {
                        let kj = &k[(bh * c + j) * d..][..d];
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
                        oi[t] += pj * v[(bh * c + j) * d + t] as f64;
                    }
                }
                let big_d: f64 = oi.iter().zip(gi).map(|(a, b)| a * *b as f64).sum();
                for (j, pj) in p.iter().enumerate() {
                    let dp: f64 = (0..d)
                        .map(|t| gi[t] as f64 * v[(bh * c + j) * d + t] as f64)
                        .sum();
                    let ds = pj * (dp - big_d);
                    for t in 0..d {
                        dv[(bh * c + j) * d + t] += pj * gi[t] as f64;
                        dq[(bh * nq + i) * d + t] +=
                            args.scale as f64 * ds * k[(bh * c + j) * d + t] as f64;
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

    /// Heads-major (B, H, N, D) values stored through `view`.
    fn store(x: &[f32], view: View, (b, h, n, d): (usize, usize, usize, usize)) -> Vec<f32> {
        let mut out = vec![f32::NAN; b * h * n * d];
        for bh in 0..b * h {
            for i in 0..n {
                let at = view.at(bh, h) + i * view.rs;
                out[at..at + d].copy_from_slice(&x[(bh * n + i) * d..][..d]);
            }
        }
        out
    }

    /// The heads-major (B, H, N, D) values of storage read through `view`.
    fn load(x: &[f32], view: View, (b, h, n, d): (usize, usize, usize, usize)) -> Vec<f32> {
        let mut out = Vec::with_capacity(b * h * n * d);
        for bh in 0..b * h {
            for i in 0..n {
                let at = view.at(bh, h) + i * view.rs;
                out.extend_from_slice(&x[at..at + d]);
            }
        }
        out
    }

    fn st(data: &[f32], view: View) -> Strided<'_> {
        Strided { data, view }
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
                        // the CPU half reads the table; the slopes are the CubeCL half's
                        alibi: None,
                        tiles: Default::default(),
                    };
                    let dims = Dims { b, h, q: nq, c, d };
                    let q: Vec<f32> = noise(b * h * nq * d, 1).iter().map(|x| 3.0 * x).collect();
                    let k = noise(b * h * c * d, 2);
                    let v = noise(b * h * c * d, 3);
                    let g = noise(b * h * nq * d, 4);
                    let what = format!("{name}, {zname}, bias {with_bias}");
                    let (ro, rl, rdq, rdk, rdv, rdz) = reference((&q, &k, &v, &z), &g, dims, &args);
                    // every tensor heads-major, then every tensor sequence-major
                    for seq in [false, true] {
                        let lay = |x: &[f32], n: usize| {
                            let view = if seq {
                                View::seq_major(h, n, d)
                            } else {
                                View::heads_major(h, n, d)
                            };
                            (store(x, view, (b, h, n, d)), view)
                        };
                        let ((q, qv), (k, kv), (v, vv), (g, gv)) =
                            (lay(&q, nq), lay(&k, c), lay(&v, c), lay(&g, nq));
                        let (o, lse) =
                            forward(st(&q, qv), st(&k, kv), st(&v, vv), &z, dims, &args, qv);
                        let what = format!("{what}, sequence-major {seq}");
                        close(
                            &load(&o, qv, (b, h, nq, d)),
                            &ro,
                            1e-5,
                            &format!("{what}: o"),
                        );
                        close(&lse, &rl, 1e-6, &format!("{what}: lse"));
                        let saved = Saved {
                            q: st(&q, qv),
                            k: st(&k, kv),
                            v: st(&v, vv),
                            z: &z,
                            out: st(&o, qv),
                            lse: &lse,
                        };
                        let gr = backward(saved, st(&g, gv), dims, &args, (qv, kv, vv));
                        let (dq, dk, dv) = (
                            load(&gr.dq, qv, (b, h, nq, d)),
                            load(&gr.dk, kv, (b, h, c, d)),
                            load(&gr.dv, vv, (b, h, c, d)),
                        );
                        close(&dq, &rdq, 1e-5, &format!("{what}: dq"));
                        close(&dk, &rdk, 1e-5, &format!("{what}: dk"));
                        close(&dv, &rdv, 1e-5, &format!("{what}: dv"));
                        close(&gr.dz, &rdz, 1e-5, &format!("{what}: dz"));
                    }
                }
            }
        }
    }
}
