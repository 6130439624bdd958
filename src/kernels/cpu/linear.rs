//! The linear layer's matrix products, forward and backward, on host slices:
//!
//! ```text
//! y  = x W            # (N, in) · (in, out) → (N, out)
//! ∂x = ∂y Wᵀ          # (N, out) · (out, in)
//! ∂W = xᵀ ∂y          # (in, N) · (N, out)
//! ```
//!
//! Through the `gemm` crate like Burn's own matmul, but each result is written once into its
//! final buffer: Burn 0.22.1's CPU backend allocates every matmul output as a zeroed byte
//! vector and then copies it into a realigned one (`FlexTensor::empty` →
//! `Bytes::from_bytes_vec`), about a tenth of a training step of the natural-text model.
//! Large products use every thread of the calling pool (one per core at inference; one in
//! each data-parallel worker when training).

/// Products below this many multiply-adds run on one thread (Burn's threshold).
const PARALLEL: usize = 192 * 192 * 192;
/// A product with at most this many rows (decoding: one token, or one per cache row) is split
/// by columns over the pool's threads once it has [`NARROW_PARALLEL`] multiply-adds: gemm
/// parallelises over rows, so a matrix-vector product would stay on one core.
const NARROW: usize = 16;
const NARROW_PARALLEL: usize = 1 << 16;

/// A pointer that may cross threads: each thread writes its own columns.
#[derive(Clone, Copy)]
struct Out(*mut f32);
// SAFETY: the threads write disjoint column ranges of the buffer (see `product`).
unsafe impl Send for Out {}
unsafe impl Sync for Out {}

impl Out {
    /// Column `j` of the first row.
    fn at(self, j: usize) -> *mut f32 {
        // SAFETY: j < n, inside the buffer of m × n
        unsafe { self.0.add(j) }
    }
}

/// A matrix operand: data, row stride, column stride (elements).
pub(super) type Operand<'a> = (&'a [f32], isize, isize);

/// `C = A B` into a fresh buffer, A (m × k) and B (k × n) by (data, row stride, column stride).
pub(super) fn product((m, n, k): (usize, usize, usize), a: Operand, b: Operand) -> Vec<f32> {
    let mut c = Vec::<f32>::with_capacity(m * n);
    if k == 0 {
        c.resize(m * n, 0.0);
        return c;
    }
    let threads = rayon::current_num_threads();
    let out = Out(c.as_mut_ptr());
    // SAFETY: a and b cover the strided m × k and k × n matrices (the callers' shapes); each
    // call writes all m × its columns of c (read_dst = false), the calls' columns partition
    // 0..n, so every entry is written once before set_len.
    let part = |j0: usize, j1: usize, par: gemm::Parallelism| unsafe {
        gemm::gemm(
            m,
            j1 - j0,
            k,
            out.at(j0),
            1,
            n as isize,
            false,
            a.0.as_ptr(),
            a.2,
            a.1,
            b.0.as_ptr().offset(j0 as isize * b.2),
            b.2,
            b.1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
    };
    if m <= NARROW && threads > 1 && m * n * k >= NARROW_PARALLEL && n >= 16 * threads {
        use rayon::prelude::*;
        let step = n.div_ceil(threads).next_multiple_of(16);
        (0..n)
            .step_by(step)
            .collect::<Vec<_>>()
            .into_par_iter()
            .for_each(|j0| part(j0, (j0 + step).min(n), gemm::Parallelism::None));
    } else if m * n * k >= PARALLEL {
        part(0, n, gemm::Parallelism::Rayon(threads));
    } else {
        part(0, n, gemm::Parallelism::None);
    }
    // SAFETY: every entry was written above.
    unsafe { c.set_len(m * n) };
    c
}

/// How the weight is stored: W (in × out) row-major, or its transpose (out × in) row-major
/// (a tied head reads the embedding (V × d) as Wᵀ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    InOut,
    OutIn,
}

impl WeightLayout {
    /// W as a (d_in × d_out) operand.
    fn w(self, w: &[f32], d_in: usize, d_out: usize) -> Operand<'_> {
        match self {
            WeightLayout::InOut => (w, d_out as isize, 1),
            WeightLayout::OutIn => (w, 1, d_in as isize),
        }
    }
    /// Wᵀ as a (d_out × d_in) operand.
    fn wt(self, w: &[f32], d_in: usize, d_out: usize) -> Operand<'_> {
        let (data, rs, cs) = self.w(w, d_in, d_out);
        (data, cs, rs)
    }
}

/// y = x W for x (n × d_in) row-major.
pub fn forward(
    x: &[f32],
    w: &[f32],
    lay: WeightLayout,
    n: usize,
    d_in: usize,
    d_out: usize,
) -> Vec<f32> {
    assert_eq!(x.len(), n * d_in, "x is N × in");
    assert_eq!(w.len(), d_in * d_out, "W has in × out entries");
    product(
        (n, d_out, d_in),
        (x, d_in as isize, 1),
        lay.w(w, d_in, d_out),
    )
}

/// ∂x = ∂y Wᵀ (n × d_in).
pub fn grad_x(
    g: &[f32],
    w: &[f32],
    lay: WeightLayout,
    n: usize,
    d_in: usize,
    d_out: usize,
) -> Vec<f32> {
    product(
        (n, d_in, d_out),
        (g, d_out as isize, 1),
        lay.wt(w, d_in, d_out),
    )
}

/// ∂W in W's layout: xᵀ ∂y (d_in × d_out) or ∂yᵀ x (d_out × d_in).
pub fn grad_w(
    x: &[f32],
    g: &[f32],
    lay: WeightLayout,
    n: usize,
    d_in: usize,
    d_out: usize,
) -> Vec<f32> {
    let xt = (x, 1, d_in as isize); // (d_in × n)
    let gt = (g, 1, d_out as isize); // (d_out × n)
    match lay {
        WeightLayout::InOut => product((d_in, d_out, n), xt, (g, d_out as isize, 1)),
        WeightLayout::OutIn => product((d_out, d_in, n), gt, (x, d_in as isize, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_products_match_loops_in_both_layouts_and_split_by_columns() {
        // (5, 7, 3): one thread; (2, 300, 260) and (9, 300, 260): narrow products split by
        // columns
        for (n, i, o) in [(5, 7, 3), (2, 300, 260), (9, 300, 260)] {
            let x: Vec<f32> = (0..n * i).map(|v| (v as f32 * 0.37).sin()).collect();
            let w: Vec<f32> = (0..i * o).map(|v| (v as f32 * 0.11).cos()).collect();
            let wt: Vec<f32> = (0..o * i).map(|v| w[(v % i) * o + v / i]).collect(); // (out × in)
            let g: Vec<f32> = (0..n * o).map(|v| (v as f32 * 0.23).sin()).collect();
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(2)
                .build()
                .unwrap();
            for (lay, wl) in [(WeightLayout::InOut, &w), (WeightLayout::OutIn, &wt)] {
                let (y, dx, dw) = pool.install(|| {
                    (
                        forward(&x, wl, lay, n, i, o),
                        grad_x(&g, wl, lay, n, i, o),
                        grad_w(&x, &g, lay, n, i, o),
                    )
                });
                let close = |a: f32, b: f32| (a - b).abs() < 1e-4 * (1.0 + b.abs());
                for r in 0..n {
                    for c in 0..o {
                        let want: f32 = (0..i).map(|t| x[r * i + t] * w[t * o + c]).sum();
                        assert!(close(y[r * o + c], want), "{lay:?} y");
                    }
                    for c in 0..i {
                        let want: f32 = (0..o).map(|t| g[r * o + t] * w[c * o + t]).sum();
                        assert!(close(dx[r * i + c], want), "{lay:?} dx");
                    }
                }
                for a in 0..i {
                    for c in 0..o {
                        let want: f32 = (0..n).map(|t| x[t * i + a] * g[t * o + c]).sum();
                        let got = match lay {
                            WeightLayout::InOut => dw[a * o + c],
                            WeightLayout::OutIn => dw[c * i + a],
                        };
                        assert!(close(got, want), "{lay:?} dw");
                    }
                }
            }
        }
    }
}
