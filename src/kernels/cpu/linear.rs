//! The linear layer's matrix products, forward and backward, on host slices:
//!
//! ```text
//! y  = x W            # (N, in) · (in, out) → (N, out)
//! ∂x = ∂y Wᵀ          # (N, out) · (out, in)
//! ∂W = xᵀ ∂y          # (in, N) · (N, out)
//! ```
//!
//! Through [`super::sgemm`] where it is enabled (AVX2 without AVX-512), else the `gemm` crate
//! like Burn's own matmul; either way each result is written once into its
//! final buffer: Burn 0.22.1's CPU backend allocates every matmul output as a zeroed byte
//! vector and then copies it into a realigned one (`FlexTensor::empty` →
//! `Bytes::from_bytes_vec`), about a tenth of a training step of the natural-text model.
//! Large products use every thread of the calling pool (one per core at inference; one in
//! each data-parallel worker when training); products of a few rows (decoding) go to
//! [`super::narrow`], which streams the weight on every thread.

/// Products below this many multiply-adds run on one thread (Burn's threshold).
const PARALLEL: usize = 192 * 192 * 192;

/// A matrix operand: data, row stride, column stride (elements).
pub(super) type Operand<'a> = (&'a [f32], isize, isize);

/// `C = A B` into a fresh buffer, A (m × k) and B (k × n) by (data, row stride, column stride).
pub(super) fn product((m, n, k): (usize, usize, usize), a: Operand, b: Operand) -> Vec<f32> {
    if k == 0 {
        return vec![0.0; m * n];
    }
    // a few rows (decoding): stream B once on every core (`narrow`)
    if m <= super::narrow::ROWS
        && a.2 == 1
        && a.1 >= 0
        && let Some(y) = super::narrow::product((m, n, k), (a.0, a.1 as usize), b)
    {
        return y;
    }
    let mut c = Vec::<f32>::with_capacity(m * n);
    let threads = if m * n * k >= PARALLEL {
        rayon::current_num_threads()
    } else {
        1
    };
    if super::sgemm::enabled() {
        let (a, b) = ((a.0.as_ptr(), a.1, a.2), (b.0.as_ptr(), b.1, b.2));
        // SAFETY: as below; `enabled` implies AVX2 and FMA; without `acc` sgemm only writes C.
        unsafe {
            super::sgemm::product((m, n, k), (c.as_mut_ptr(), n, false), a, b, 1.0, threads);
            c.set_len(m * n);
        }
        return c;
    }
    let par = if threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: a and b cover the strided m × k and k × n matrices (the callers' shapes); gemm
    // writes all m × n entries of c (read_dst = false) before set_len.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            false,
            a.0.as_ptr(),
            a.2,
            a.1,
            b.0.as_ptr(),
            b.2,
            b.1,
            0.0f32,
            1.0f32,
            false,
            false,
            false,
            par,
        );
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
    fn the_three_products_match_loops_in_both_layouts_wide_and_narrow() {
        // (5, 7, 3): one thread; (2, 300, 260): a narrow product (`narrow`) in the forward
        // and ∂x, gemm in ∂W; (9, 300, 260): gemm throughout (more rows than `narrow` takes)
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
