//! Small strided matrix products for the CPU kernels, single-threaded (the kernels parallelise
//! over (batch, head) pairs or rows themselves): [`super::sgemm`]'s packed AVX2 products where
//! it is enabled, else the `gemm` crate (the AVX-512 / AVX2 micro-kernels Burn's `Flex` matmul
//! uses).

/// `C ← [C +] α · A B` for C (m × n, row stride `ldc`, unit column stride), A (m × k) and
/// B (k × n) each given by a pointer and its (row stride, column stride) in elements.
/// `acc`: add to C instead of overwriting it.
///
/// # Safety
/// Every pointer must be valid for the elements its shape and strides reach, and C must not
/// alias A or B.
pub unsafe fn mm(
    (m, n, k): (usize, usize, usize),
    (c, ldc, acc): (*mut f32, usize, bool),
    (a, a_rs, a_cs): (*const f32, isize, isize),
    (b, b_rs, b_cs): (*const f32, isize, isize),
    alpha: f32,
) {
    if m == 0 || n == 0 {
        return;
    }
    if super::sgemm::enabled() {
        // SAFETY: the caller's contract; `enabled` implies AVX2 and FMA.
        unsafe {
            super::sgemm::product(
                (m, n, k),
                (c, ldc, acc),
                (a, a_rs, a_cs),
                (b, b_rs, b_cs),
                alpha,
                1,
            )
        };
        return;
    }
    // SAFETY: the caller's contract; gemm computes dst = 1·dst + α·lhs·rhs when reading dst.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            ldc as isize,
            acc,
            a,
            a_cs,
            a_rs,
            b,
            b_cs,
            b_rs,
            1.0f32,
            alpha,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn strided_products_and_accumulation_match_a_loop() {
        // A (2 × 3) row-major, B given transposed: B (3 × 2) read from Bᵀ (2 × 3) row-major.
        let a = [1f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let bt = [1f32, 0.0, -1.0, 2.0, 1.0, 0.5];
        let mut c = [10f32, 20.0, 30.0, 40.0];
        unsafe {
            super::mm(
                (2, 2, 3),
                (c.as_mut_ptr(), 2, true),
                (a.as_ptr(), 3, 1),
                (bt.as_ptr(), 1, 3),
                2.0,
            );
        }
        // A Bᵀᵀ = [[1·1 + 3·(−1), 1·2 + 2·1 + 3·0.5], [4 − 6, 8 + 5 + 3]] = [[−2, 5.5], [−2, 16]]
        assert_eq!(c, [10.0 - 4.0, 20.0 + 11.0, 30.0 - 4.0, 40.0 + 32.0]);
    }
}
