//! Narrow matrix products: `Y = X B` for a few rows of X (decoding: one token, or one per cache
//! row), X (m × k) row-major, m ≤ [`ROWS`]. Such a product reads each entry of B once and does
//! one multiply-add with it per row of X, so its time is the time to stream B from memory
//! (SmolLM2-135M: 538 MB of f32 weights per decoded token). What matters is that every core
//! streams contiguous memory:
//!
//! ```text
//! B rows contiguous (W stored in × out):   Y = Σ_c X[:, c] B[c, :]        # c: chunks of KC rows of B
//!     each chunk's partial (m × n) from its KC contiguous rows; partials summed in chunk order
//! B columns contiguous (Wᵀ stored, a tied head reads E (V × d)):   Y[r, j] = X[r, :] · B[:, j]
//!     each column of B is one contiguous row of the stored matrix; blocks of columns per task
//! ```
//!
//! The `gemm` crate splits a product over threads by rows of Y, so a one-row product stayed on
//! one core; split by columns of Y (the path before this file), each core read B's rows in
//! pieces of n / cores floats with gaps between them, and the two cores together streamed
//! 9–14 GB/s where this machine's memory gives 20–23 to a plain read of the same 538 MB
//! (`experiments/results/bench/narrow_products_2026-11-27.md`). Here each task reads whole
//! contiguous runs of B, and asks for the lines [`PF`] floats ahead of the run it reads
//! (software prefetch: 20–25 GB/s against 17–20 without, alternated in sinklab's decoding).
//!
//! The chunks and column blocks are fixed sizes, not a share per thread, and the partials are
//! summed in chunk order: the result is the same bits whatever the number of threads.

use rayon::prelude::*;

/// At most this many rows of X take the narrow path.
pub const ROWS: usize = 8;
/// Rows of B per partial sum (B rows contiguous).
const KC: usize = 32;
/// Columns of B per task (B columns contiguous).
const NC: usize = 256;

/// Software prefetch distance, in floats ahead of the run being read.
const PF: usize = 1024;

/// Ask for the cache lines of `len` floats from `p` (a hint: never faults, even past the end).
#[inline(always)]
fn prefetch(p: *const f32, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        let mut o = 0;
        while o < len {
            // SAFETY: a prefetch is a hint; it does not fault on any address.
            unsafe {
                std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                    p.wrapping_add(o) as *const i8,
                )
            };
            o += 16;
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (p, len);
}

/// A pointer that may cross threads: each task writes its own columns of Y.
#[derive(Clone, Copy)]
pub struct Out(*mut f32);
// SAFETY: the tasks write disjoint column blocks of Y (see `product`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

crate::kernels::simd::simd_dispatch! {
    /// `P (m × n) = X[:, i0..i0+kc] B[i0..i0+kc, :]` for B's rows at `b` (row stride `ldb`,
    /// unit column stride) and X's rows at `x` (row stride `ldx`): one multiply-add per entry
    /// of B per row of X, in row order of B.
    fn axpy_rows(p: &mut [f32], x: &[f32], ldx: usize, b: &[f32], ldb: usize, dims: (usize, usize, usize, usize)) {
        let (m, n, i0, kc) = dims;
        p.fill(0.0);
        for i in 0..kc {
            let row = &b[i * ldb..i * ldb + n];
            prefetch(row.as_ptr().wrapping_add(PF), n);
            for r in 0..m {
                let xi = x[r * ldx + i0 + i];
                for (pj, &bj) in p[r * n..(r + 1) * n].iter_mut().zip(row) {
                    *pj = xi.mul_add(bj, *pj);
                }
            }
        }
    }
}

crate::kernels::simd::simd_dispatch! {
    /// `Y[r, j] = X[r, :] · B[:, j]` for the columns j in `j0..j1`, B's column j a contiguous
    /// run of k floats at `b[j · ldb..]`; Y's row r at `y + r · n`. Each dot product in 16
    /// interleaved partial sums (`simd::dot16`).
    fn dots(y: Out, n: usize, x: &[f32], ldx: usize, b: &[f32], ldb: usize, dims: (usize, usize, usize, usize)) {
        let (m, k, j0, j1) = dims;
        for j in j0..j1 {
            let col = &b[j * ldb..j * ldb + k];
            prefetch(col.as_ptr().wrapping_add(PF), k);
            for r in 0..m {
                let d = crate::kernels::simd::dot16(col, &x[r * ldx..r * ldx + k]);
                // SAFETY: r < m and j < n: inside Y (m × n); this task alone writes column j.
                unsafe { *y.0.add(r * n + j) = d };
            }
        }
    }
}

/// `Y = X B` (m × n) for X (m × k) with rows at stride `ldx` (unit column stride) and B given by
/// (data, row stride, column stride) with one of the strides 1; `None` when B has neither unit
/// stride (the caller uses the general product). m ≤ [`ROWS`].
pub fn product(
    (m, n, k): (usize, usize, usize),
    (x, ldx): (&[f32], usize),
    (b, b_rs, b_cs): (&[f32], isize, isize),
) -> Option<Vec<f32>> {
    assert!(m <= ROWS, "narrow products take at most {ROWS} rows");
    if m == 0 || n == 0 || k == 0 {
        return Some(vec![0.0; m * n]);
    }
    if b_cs == 1 && b_rs > 0 {
        // B rows contiguous: partials of KC rows each, summed in chunk order.
        let ldb = b_rs as usize;
        let chunks = k.div_ceil(KC);
        let mut partials = vec![0f32; chunks * m * n];
        partials
            .par_chunks_mut(m * n)
            .enumerate()
            .for_each(|(c, p)| {
                let (i0, kc) = (c * KC, KC.min(k - c * KC));
                axpy_rows(p, x, ldx, &b[i0 * ldb..], ldb, (m, n, i0, kc));
            });
        let (first, rest) = partials.split_at(m * n); // k > 0: one chunk at least
        let mut y = first.to_vec();
        for p in rest.chunks_exact(m * n) {
            for (a, v) in y.iter_mut().zip(p) {
                *a += v;
            }
        }
        Some(y)
    } else if b_rs == 1 && b_cs > 0 {
        // B columns contiguous: blocks of NC columns, one dot product per (row, column).
        let ldb = b_cs as usize;
        let mut y = vec![0f32; m * n];
        let out = Out(y.as_mut_ptr());
        (0..n.div_ceil(NC)).into_par_iter().for_each(|t| {
            let (j0, j1) = (t * NC, ((t + 1) * NC).min(n));
            dots(out, n, x, ldx, b, ldb, (m, k, j0, j1));
        });
        Some(y)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both layouts against an f64 loop, with k and n not multiples of the chunk and block
    /// sizes, and the same bits on 1 and 3 threads.
    #[test]
    fn both_layouts_match_f64_and_do_not_depend_on_the_thread_count() {
        for (m, n, k) in [(1, 5, 3), (1, 300, 261), (3, 517, 70), (8, 40, 33)] {
            let x: Vec<f32> = (0..m * k).map(|v| (v as f32 * 0.37).sin()).collect();
            let w: Vec<f32> = (0..k * n).map(|v| (v as f32 * 0.11).cos()).collect(); // (k × n)
            let wt: Vec<f32> = (0..n * k).map(|v| w[(v % k) * n + v / k]).collect(); // (n × k)
            let want: Vec<f64> = (0..m * n)
                .map(|e| {
                    let (r, j) = (e / n, e % n);
                    (0..k)
                        .map(|i| x[r * k + i] as f64 * w[i * n + j] as f64)
                        .sum()
                })
                .collect();
            for (b, rs, cs) in [(&w, n as isize, 1), (&wt, 1, k as isize)] {
                let run = |threads: usize| {
                    rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap()
                        .install(|| product((m, n, k), (&x, k), (b, rs, cs)).unwrap())
                };
                let (one, three) = (run(1), run(3));
                assert_eq!(
                    one, three,
                    "({m}, {n}, {k}) rs {rs}: thread count changed bits"
                );
                for (g, t) in one.iter().zip(&want) {
                    assert!(
                        (*g as f64 - t).abs() <= 1e-5 * (1.0 + t.abs()),
                        "({m}, {n}, {k}) rs {rs}: {g} against {t}"
                    );
                }
            }
        }
        let none = product((1, 2, 2), (&[1.0, 2.0], 2), (&[0.0; 16], 4, 2));
        assert!(none.is_none(), "neither stride is 1: the general product");
    }
}
