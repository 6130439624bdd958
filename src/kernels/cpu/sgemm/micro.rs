//! The micro-kernels of [`super`]'s packed products: one MR × NR tile of C from a packed A panel
//! (kc × MR) and a packed B panel (kc × NR), in AVX2 (NR = 16) or AVX-512 (NR = 32) vectors,
//! edge tiles through a scratch tile. Each element of C is one fused multiply-add per step of k
//! in k order, from zero, then α·acc or fma(α, acc, C): the same bits in either width.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

#[cfg(target_arch = "x86_64")]
use super::{MR, NARROW, PF_A, WIDE, avx512};

/// One MR × NR tile of C from packed panels of A (kc × MR) and B (kc × NR);
/// an edge tile (mr < MR or nr < NR) is computed into a scratch tile and its valid part stored
/// with the same roundings.
pub(super) unsafe fn tile<const NR: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    (c, ldc): (*mut f32, usize),
    (mr, nr): (usize, usize),
    alpha: f32,
    load: bool,
) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `supported` holds (the caller's contract); the panels and C's tile are valid.
    unsafe {
        if mr == MR && nr == NR {
            kernel::<NR>(kc, a, b, (c, ldc), alpha, load);
        } else {
            let mut t = [0f32; MR * WIDE];
            kernel::<NR>(kc, a, b, (t.as_mut_ptr(), NR), 1.0, false);
            store_edge::<NR>(&t, (c, ldc), (mr, nr), alpha, load);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kc, a, b, c, ldc, mr, nr, alpha, load);
}

/// The valid part of a scratch tile (row stride NR) into C: α·t, or fma(α, t, C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn store_edge<const NR: usize>(
    t: &[f32; MR * WIDE],
    (c, ldc): (*mut f32, usize),
    (mr, nr): (usize, usize),
    alpha: f32,
    load: bool,
) {
    for i in 0..mr {
        for j in 0..nr {
            // SAFETY: (i, j) lies inside the caller's tile of C.
            unsafe {
                let cp = c.add(i * ldc + j);
                let v = t[i * NR + j];
                *cp = if load {
                    alpha.mul_add(v, *cp)
                } else {
                    alpha * v
                };
            }
        }
    }
}

/// The micro-kernel of one MR × NR tile: AVX2 for 16 columns; AVX-512 for 32, or two AVX2
/// halves of the 32-column panel where the CPU lacks AVX-512F (tests; the same bits).
#[cfg(target_arch = "x86_64")]
unsafe fn kernel<const NR: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    (c, ldc): (*mut f32, usize),
    alpha: f32,
    load: bool,
) {
    // SAFETY: the caller's panels and tile; AVX2 and FMA present, AVX-512F checked.
    unsafe {
        if NR == NARROW {
            kernel_avx2::<NARROW>(kc, a, b, (c, ldc), alpha, load);
        } else if avx512() {
            kernel_avx512(kc, a, b, (c, ldc), alpha, load);
        } else {
            kernel_avx2::<WIDE>(kc, a, b, (c, ldc), alpha, load);
            kernel_avx2::<WIDE>(kc, a, b.add(NARROW), (c.add(NARROW), ldc), alpha, load);
        }
    }
}

/// The 6 × 16 AVX2 micro-kernel: acc = Σ_p A[:, p] ⊗ b_p over kc steps (A[:, p]: MR consecutive
/// values of the packed panel; b_p: 16 values at b + p·BS, BS = 16 for a panel of 16 columns,
/// 32 for a half of a 32-column one), then C ← α·acc or fma(α, acc, C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel_avx2<const BS: usize>(
    kc: usize,
    a: *const f32,
    b: *const f32,
    (c, ldc): (*mut f32, usize),
    alpha: f32,
    load: bool,
) {
    // SAFETY (whole body): a holds kc × MR and b kc × BS floats; C's tile is MR × 16 at ldc.
    unsafe {
        // C's lines are wanted after the loop: ask for them now (a hint; never faults)
        for r in 0..MR {
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NARROW - 1) as *const i8);
        }
        let mut acc = [_mm256_setzero_ps(); 2 * MR];
        let (mut a, mut b) = (a, b);
        // one step of k: C's tile += A[:, p] ⊗ b_p (a macro, so it is compiled with AVX2)
        macro_rules! step {
            ($a:expr, $b:expr) => {
                let b0 = _mm256_loadu_ps($b);
                let b1 = _mm256_loadu_ps($b.add(8));
                for r in 0..MR {
                    let x = _mm256_broadcast_ss(&*$a.add(r));
                    acc[2 * r] = _mm256_fmadd_ps(x, b0, acc[2 * r]);
                    acc[2 * r + 1] = _mm256_fmadd_ps(x, b1, acc[2 * r + 1]);
                }
            };
        }
        // Two steps (12 floats of A) per round, with a hint for A's line PF_A floats ahead:
        // the A panel streams from L2 (the B panel stays in L1).
        for _ in 0..kc / 2 {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PF_A) as *const i8);
            step!(a, b);
            step!(a.add(MR), b.add(BS));
            a = a.add(2 * MR);
            b = b.add(2 * BS);
        }
        if kc % 2 == 1 {
            step!(a, b);
        }
        let al = _mm256_set1_ps(alpha);
        for r in 0..MR {
            let cr = c.add(r * ldc);
            for h in 0..2 {
                let v = if load {
                    _mm256_fmadd_ps(al, acc[2 * r + h], _mm256_loadu_ps(cr.add(8 * h)))
                } else {
                    _mm256_mul_ps(al, acc[2 * r + h])
                };
                _mm256_storeu_ps(cr.add(8 * h), v);
            }
        }
    }
}

/// The 6 × 32 AVX-512 micro-kernel: [`kernel_avx2`]'s schedule with 16-lane vectors
/// (b_p: 32 consecutive values of the packed panel); the same roundings.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn kernel_avx512(
    kc: usize,
    a: *const f32,
    b: *const f32,
    (c, ldc): (*mut f32, usize),
    alpha: f32,
    load: bool,
) {
    // SAFETY (whole body): a holds kc × MR and b kc × WIDE floats; C's tile is MR × WIDE at ldc.
    unsafe {
        // a tile row (128 bytes) touches at most 3 lines: its first, middle and last float
        for r in 0..MR {
            for x in [0, NARROW, WIDE - 1] {
                _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + x) as *const i8);
            }
        }
        let mut acc = [_mm512_setzero_ps(); 2 * MR];
        let (mut a, mut b) = (a, b);
        // one step of k (a macro, so it is compiled with AVX-512F)
        macro_rules! step {
            ($a:expr, $b:expr) => {
                let b0 = _mm512_loadu_ps($b);
                let b1 = _mm512_loadu_ps($b.add(16));
                for r in 0..MR {
                    let x = _mm512_set1_ps(*$a.add(r));
                    acc[2 * r] = _mm512_fmadd_ps(x, b0, acc[2 * r]);
                    acc[2 * r + 1] = _mm512_fmadd_ps(x, b1, acc[2 * r + 1]);
                }
            };
        }
        for _ in 0..kc / 2 {
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(PF_A) as *const i8);
            step!(a, b);
            step!(a.add(MR), b.add(WIDE));
            a = a.add(2 * MR);
            b = b.add(2 * WIDE);
        }
        if kc % 2 == 1 {
            step!(a, b);
        }
        let al = _mm512_set1_ps(alpha);
        for r in 0..MR {
            let cr = c.add(r * ldc);
            for h in 0..2 {
                let v = if load {
                    _mm512_fmadd_ps(al, acc[2 * r + h], _mm512_loadu_ps(cr.add(16 * h)))
                } else {
                    _mm512_mul_ps(al, acc[2 * r + h])
                };
                _mm512_storeu_ps(cr.add(16 * h), v);
            }
        }
    }
}
