//! Packed f32 matrix products for x86-64 CPUs with AVX2 and FMA but no AVX-512 (AMD Zen 2–3,
//! Intel before Skylake-SP): the GotoBLAS / BLIS schedule (Goto & van de Geijn 2008; Van Zee &
//! van de Geijn 2015) with a 6 × 16 micro-kernel.
//!
//! ```text
//! C (m × n) ← [C +] α · A (m × k) · B (k × n)
//! for j0 in 0..n step NC:                   B block  (kb × NC) packed, sized to L2
//!   for p0 in 0..k step kb:                 kb = k split into equal blocks of at most KC
//!     for i0 in 0..m step MC:               A block  (MC × kb) packed
//!       for jr in 0..NC step NR:            B panel  (kb × NR, ≤ 16 KiB) stays in L1
//!         for ir in 0..MC step MR:
//!           C[ir.., jr..] (MR × NR) += Σ_p A[ir.., p] ⊗ B[p, jr..]   # 12 ymm accumulators
//! ```
//!
//! Packed A holds each MR-row panel k-major (MR consecutive values per p), packed B each NR-column
//! panel k-major (NR values per p); both are zero-padded to whole panels. A panel whose rows (A) or
//! columns (B) lie contiguously is packed by 8 × 8 register transposes; B with contiguous rows a
//! row at a time across every panel of the block (one pass along memory), A with contiguous columns
//! by a 4- and a 2-float move per step. An edge tile (fewer than MR rows or NR columns) is computed
//! whole into a scratch tile and only its valid part stored. The micro-kernel asks for C's tile
//! lines before its k loop (software prefetch), so the final loads of C do not wait on memory,
//! and every two steps of k for packed A's line [`PF_A`] floats ahead: A's panels stream from
//! L2 (one per tile) while B's panel stays in L1.
//! Reading A in place instead of packing it was tried and was slower
//! (`experiments/results/bench/packed_sgemm_2026-11-27.md`).
//!
//! Rounding: every element of C is Σ_p over one k block in p order with one fused multiply-add
//! per term, stored as α·acc (the first block without `acc`) or fma(α, acc, C) after; the k
//! blocks depend on k only, so the result is the same bits whatever the threads and however
//! the rows or columns of C are split between them.
//!
//! Why: on a 2-core AMD EPYC (Zen 3) VM the `gemm` crate ran the SmolLM2 shape's products at
//! 59–65 GFLOP/s on one core against `torch.mm`'s (MKL) 70–76, of a measured FMA peak of 100
//! (`experiments/results/bench/packed_sgemm_2026-11-27.md`). On CPUs with AVX-512 the `gemm`
//! crate's 512-bit kernels keep the products (they ran at `torch.mm`'s speed there); [`enabled`]
//! decides once per process.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;
use std::cell::RefCell;
use std::sync::OnceLock;

/// Rows of C per micro-tile (broadcast from packed A).
const MR: usize = 6;
/// Columns of C per micro-tile (two 8-lane vectors of packed B).
const NR: usize = 16;
/// Depth of one packed block.
const KC: usize = 256;
/// Rows of A per packed block (a multiple of MR): MC × KC × 4 B = 144 KiB.
const MC: usize = 144;
/// Columns of B per packed block (a multiple of NR): KC × NC × 4 B = 512 KiB.
const NC: usize = 512;
/// How far ahead (floats) the micro-kernel asks for packed A's lines: 8 steps of k.
const PF_A: usize = 8 * MR;

/// The environment variable that chooses the product kernels for benchmarks: `crate` (the
/// `gemm` crate everywhere) or `packed` (this file; refused without AVX2 and FMA). Unset: this
/// file on CPUs with AVX2 and FMA and without AVX-512F.
pub const ENV: &str = "SINKLAB_GEMM";

/// Whether products take this file's kernels (decided once per process; see [`ENV`]).
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        let supported = supported();
        match std::env::var(ENV).as_deref() {
            Err(_) => supported && !wide(),
            Ok("crate") => false,
            Ok("packed") if supported => true,
            Ok("packed") => panic!("{ENV}=packed: this CPU lacks AVX2 or FMA"),
            Ok(other) => panic!("{ENV}={other:?}: valid values are \"crate\" and \"packed\""),
        }
    })
}

/// Which kernels the CPU's matrix products take, in words (`sinklab bench` prints it).
pub fn products() -> &'static str {
    if enabled() {
        "sinklab's packed AVX2 kernels (kernels::cpu::sgemm; SINKLAB_GEMM=crate for the gemm crate)"
    } else {
        "the gemm crate"
    }
}

/// AVX2 and FMA present (the micro-kernel's instructions).
pub fn supported() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// AVX-512F present: the `gemm` crate's 512-bit kernels are the faster choice.
fn wide() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// A strided matrix operand: pointer, row stride, column stride (elements).
pub type Strided = (*const f32, isize, isize);

/// A pointer that may cross threads (each task writes its own rows or columns of C).
#[derive(Clone, Copy)]
struct Send_<T>(T);
// SAFETY: used only for pointers into disjoint parts of C and read-only A and B.
unsafe impl<T> Send for Send_<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Send_<T> {}

/// `C ← [C +] α · A B` on `threads` threads of the calling rayon pool (1: this thread only).
/// C is (m × n) with row stride `ldc` and unit column stride; without `acc` it is only written,
/// so it may be uninitialised memory.
///
/// # Safety
/// [`supported`] must hold; every pointer must be valid for the elements its shape and strides
/// reach; C must not overlap A or B.
pub unsafe fn product(
    (m, n, k): (usize, usize, usize),
    (c, ldc, acc): (*mut f32, usize, bool),
    a: Strided,
    b: Strided,
    alpha: f32,
    threads: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    // split the longer side of C into whole micro-tiles, one piece per thread
    let (long, unit) = if m >= n { (m, MR) } else { (n, NR) };
    let pieces = threads.min(long.div_ceil(unit)).max(1);
    if pieces == 1 {
        // SAFETY: the caller's contract.
        unsafe { single((m, n, k), (c, ldc, acc), a, b, alpha) };
        return;
    }
    let step = long.div_ceil(unit).div_ceil(pieces) * unit;
    let (c, a, b) = (Send_(c), Send_(a), Send_(b));
    rayon::scope(|s| {
        for lo in (0..long).step_by(step) {
            let len = step.min(long - lo);
            s.spawn(move |_| {
                let (c, a, b) = (c, a, b);
                // SAFETY: each task covers rows (or columns) lo..lo + len of C, disjoint from
                // every other task's; A's rows (or B's columns) are offset to match.
                unsafe {
                    if m >= n {
                        let a = (a.0.0.offset(lo as isize * a.0.1), a.0.1, a.0.2);
                        single((len, n, k), (c.0.add(lo * ldc), ldc, acc), a, b.0, alpha);
                    } else {
                        let b = (b.0.0.offset(lo as isize * b.0.2), b.0.1, b.0.2);
                        single((m, len, k), (c.0.add(lo), ldc, acc), a.0, b, alpha);
                    }
                }
            });
        }
    });
}

thread_local! {
    /// This thread's packing buffers (A block, B block), reused across products.
    static PACK: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// `v` from its first 64-byte-aligned element.
fn aligned(v: &mut [f32]) -> &mut [f32] {
    let skip = v.as_ptr().align_offset(64).min(v.len());
    &mut v[skip..]
}

/// One thread's product (see [`product`]).
unsafe fn single(
    (m, n, k): (usize, usize, usize),
    (c, ldc, acc): (*mut f32, usize, bool),
    a: Strided,
    b: Strided,
    alpha: f32,
) {
    if k == 0 {
        if !acc {
            for i in 0..m {
                // SAFETY: row i of C has n writable entries.
                unsafe { std::ptr::write_bytes(c.add(i * ldc), 0, n) };
            }
        }
        return;
    }
    PACK.with(|p| {
        let (ap, bp) = &mut *p.borrow_mut();
        // k in equal blocks of at most KC (576 = 3 × 192, not 256 + 256 + 64)
        let kb = k.div_ceil(k.div_ceil(KC));
        let need_a = MC.min(m.div_ceil(MR) * MR) * kb + 32;
        let need_b = NC.min(n.div_ceil(NR) * NR) * kb + 16;
        if ap.len() < need_a {
            ap.resize(need_a, 0.0);
        }
        if bp.len() < need_b {
            bp.resize(need_b, 0.0);
        }
        let (ap, bp) = (aligned(ap), aligned(bp));
        for j0 in (0..n).step_by(NC) {
            let nc = NC.min(n - j0);
            for p0 in (0..k).step_by(kb) {
                let kc = kb.min(k - p0);
                // SAFETY: inside the caller's B.
                unsafe { pack_b(bp, b, (p0, j0), (kc, nc)) };
                let load = acc || p0 > 0;
                for i0 in (0..m).step_by(MC) {
                    let mc = MC.min(m - i0);
                    for (panel, ir) in (i0..i0 + mc).step_by(MR).enumerate() {
                        // SAFETY: rows ir .. ir + MR (or to m), columns p0 .. p0 + kc of A;
                        // the panel and its 8 floats of slack lie inside `ap`.
                        unsafe {
                            pack_a(
                                &mut ap[panel * MR * kc..],
                                a,
                                (ir, p0),
                                (MR.min(m - ir), kc),
                            )
                        };
                    }
                    for jr in (0..nc).step_by(NR) {
                        let nr = NR.min(nc - jr);
                        for (panel, ir) in (i0..i0 + mc).step_by(MR).enumerate() {
                            // SAFETY: the tile (ir, j0 + jr) of mr × nr lies inside C; the
                            // packed panels hold kc steps each.
                            unsafe {
                                tile(
                                    kc,
                                    ap.as_ptr().add(panel * MR * kc),
                                    bp.as_ptr().add(jr * kc),
                                    (c.add(ir * ldc + j0 + jr), ldc),
                                    (MR.min(m - ir), nr),
                                    alpha,
                                    load,
                                );
                            }
                        }
                    }
                }
            }
        }
    });
}

/// Pack rows i0 .. i0 + mr (mr ≤ MR) and columns p0 .. p0 + kc of A into one k-major panel,
/// zero-padded to MR rows; `d` has 8 floats of slack past the panel.
unsafe fn pack_a(
    d: &mut [f32],
    (a, rs, cs): Strided,
    (i0, p0): (usize, usize),
    (mr, kc): (usize, usize),
) {
    // SAFETY (whole body): rows i0 .. i0 + mr, columns p0 .. p0 + kc of A (the caller's contract)
    unsafe {
        let at = a.offset(i0 as isize * rs + p0 as isize * cs);
        if mr == MR && cs == 1 {
            #[cfg(target_arch = "x86_64")]
            pack_rows(d, at, rs, kc);
        } else if mr == MR && rs == 1 {
            #[cfg(target_arch = "x86_64")]
            pack_strips(d, at, cs, kc);
        } else {
            d[..MR * kc].fill(0.0);
            for r in 0..mr {
                for p in 0..kc {
                    d[p * MR + r] = *at.offset(r as isize * rs + p as isize * cs);
                }
            }
        }
    }
}

/// MR rows of A, each contiguous (row r at a + r·rs), k-major into `d` by 8 × 8 transposes;
/// each step's 8-float store spills 2 floats that the next step overwrites (d has slack).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_rows(d: &mut [f32], a: *const f32, rs: isize, kc: usize) {
    let whole = kc / 8 * 8;
    unsafe {
        let z = _mm256_setzero_ps();
        for p in (0..whole).step_by(8) {
            let row = |r: usize| _mm256_loadu_ps(a.offset(r as isize * rs + p as isize));
            let t = transpose8([row(0), row(1), row(2), row(3), row(4), row(5), z, z]);
            for (q, v) in t.into_iter().enumerate() {
                _mm256_storeu_ps(d.as_mut_ptr().add((p + q) * MR), v);
            }
        }
        for p in whole..kc {
            for r in 0..MR {
                d[p * MR + r] = *a.offset(r as isize * rs + p as isize);
            }
        }
    }
}

/// MR rows of A lying contiguously in each column (A[r, p] at a + r + p·cs), k-major into `d`:
/// per step one 4-float and one 2-float load and store.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_strips(d: &mut [f32], a: *const f32, cs: isize, kc: usize) {
    // SAFETY (whole body): column p of the panel is MR floats from a + p·cs; d holds kc × MR.
    unsafe {
        let out = d.as_mut_ptr();
        for p in 0..kc {
            let src = a.offset(p as isize * cs);
            _mm_storeu_ps(out.add(p * MR), _mm_loadu_ps(src));
            let tail = _mm_loadl_epi64(src.add(4) as *const __m128i);
            _mm_storel_epi64(out.add(p * MR + 4) as *mut __m128i, tail);
        }
    }
}

/// Pack B[p0 .. p0 + kc, j0 .. j0 + nc] into NR-column panels, each k-major, zero-padded.
unsafe fn pack_b(
    dst: &mut [f32],
    (b, rs, cs): Strided,
    (p0, j0): (usize, usize),
    (kc, nc): (usize, usize),
) {
    let at = |p: usize, j: usize| (p0 + p) as isize * rs + (j0 + j) as isize * cs;
    if cs == 1 && nc >= NR {
        // rows of B contiguous: read each row once across every whole panel (a stream the
        // prefetcher follows), not NR floats per row panel by panel
        #[cfg(target_arch = "x86_64")]
        // SAFETY: rows p0 .. p0 + kc, columns j0 .. j0 + nc / NR · NR of B are contiguous per row.
        unsafe {
            pack_b_rows(dst, b.offset(at(0, 0)), rs, kc, nc / NR)
        };
    }
    for (panel, j) in (0..nc).step_by(NR).enumerate() {
        let cols = NR.min(nc - j);
        let d = &mut dst[panel * NR * kc..(panel + 1) * NR * kc];
        if cs == 1 && cols == NR {
            continue; // packed above
        }
        if rs == 1 && cols == NR {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: column j0 + j + x of B holds kc contiguous values from row p0.
            unsafe {
                pack_columns(d, b.offset(at(0, j)), cs, kc)
            };
        } else {
            d.fill(0.0);
            for x in 0..cols {
                for p in 0..kc {
                    // SAFETY: inside B (the caller's contract).
                    d[p * NR + x] = unsafe { *b.offset(at(p, j + x)) };
                }
            }
        }
    }
}

/// `panels` whole NR-column panels of B from rows each contiguous (row p at b + p·rs).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_b_rows(d: &mut [f32], b: *const f32, rs: isize, kc: usize, panels: usize) {
    // SAFETY (whole body): row p holds panels × NR floats from b + p·rs; d holds panels × kc × NR.
    unsafe {
        let out = d.as_mut_ptr();
        for p in 0..kc {
            let row = b.offset(p as isize * rs);
            for panel in 0..panels {
                let (src, dst) = (row.add(panel * NR), out.add((panel * kc + p) * NR));
                _mm256_storeu_ps(dst, _mm256_loadu_ps(src));
                _mm256_storeu_ps(dst.add(8), _mm256_loadu_ps(src.add(8)));
            }
        }
    }
}

/// One B panel from NR columns each contiguous (column x at `b + x·cs`, kc values): 8 × 8
/// blocks transposed in registers, the last kc mod 8 steps one by one.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_columns(d: &mut [f32], b: *const f32, cs: isize, kc: usize) {
    let whole = kc / 8 * 8;
    // SAFETY (whole body): column x reaches b + x·cs + kc − 1; d holds kc × NR values.
    unsafe {
        for p in (0..whole).step_by(8) {
            for h in 0..2 {
                let col =
                    |x: usize| _mm256_loadu_ps(b.offset((8 * h + x) as isize * cs + p as isize));
                let r = transpose8([
                    col(0),
                    col(1),
                    col(2),
                    col(3),
                    col(4),
                    col(5),
                    col(6),
                    col(7),
                ]);
                for (q, v) in r.into_iter().enumerate() {
                    _mm256_storeu_ps(d.as_mut_ptr().add((p + q) * NR + 8 * h), v);
                }
            }
        }
        for p in whole..kc {
            for x in 0..NR {
                d[p * NR + x] = *b.offset(x as isize * cs + p as isize);
            }
        }
    }
}

/// The transpose of an 8 × 8 block held as 8 row vectors.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn transpose8(r: [__m256; 8]) -> [__m256; 8] {
    // pairs of rows interleaved, then pairs of pairs, then the 128-bit halves exchanged
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let t6 = _mm256_unpacklo_ps(r[6], r[7]);
    let t7 = _mm256_unpackhi_ps(r[6], r[7]);
    let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
    let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
    let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
    let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
    [
        _mm256_permute2f128_ps::<0x20>(u0, u4),
        _mm256_permute2f128_ps::<0x20>(u1, u5),
        _mm256_permute2f128_ps::<0x20>(u2, u6),
        _mm256_permute2f128_ps::<0x20>(u3, u7),
        _mm256_permute2f128_ps::<0x31>(u0, u4),
        _mm256_permute2f128_ps::<0x31>(u1, u5),
        _mm256_permute2f128_ps::<0x31>(u2, u6),
        _mm256_permute2f128_ps::<0x31>(u3, u7),
    ]
}

/// One MR × NR tile of C from packed panels of A (kc × MR) and B (kc × NR);
/// an edge tile (mr < MR or nr < NR) is computed into a scratch tile and its valid part stored
/// with the same roundings.
unsafe fn tile(
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
            kernel(kc, a, b, (c, ldc), alpha, load);
        } else {
            let mut t = [0f32; MR * NR];
            kernel(kc, a, b, (t.as_mut_ptr(), NR), 1.0, false);
            store_edge(&t, (c, ldc), (mr, nr), alpha, load);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (kc, a, b, c, ldc, mr, nr, alpha, load);
}

/// The valid part of a scratch tile into C: α·t, or fma(α, t, C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn store_edge(
    t: &[f32; MR * NR],
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

/// The 6 × 16 micro-kernel: acc = Σ_p A[:, p] ⊗ b_p over kc steps (A[r, p] at a + r·rs + p·cs;
/// b_p: NR consecutive values of the packed panel), then C ← α·acc or fma(α, acc, C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    (c, ldc): (*mut f32, usize),
    alpha: f32,
    load: bool,
) {
    // SAFETY (whole body): a holds kc × MR and b kc × NR floats; C's tile is MR × NR at ldc.
    unsafe {
        // C's lines are wanted after the loop: ask for them now (a hint; never faults)
        for r in 0..MR {
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc) as *const i8);
            _mm_prefetch::<_MM_HINT_T0>(c.add(r * ldc + NR - 1) as *const i8);
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
            step!(a.add(MR), b.add(NR));
            a = a.add(2 * MR);
            b = b.add(2 * NR);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// C (m × n) = [C +] α A B in f64, A and B read at the given strides.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        (m, n, k): (usize, usize, usize),
        c0: &[f32],
        acc: bool,
        (a, ars, acs): (&[f32], usize, usize),
        (b, brs, bcs): (&[f32], usize, usize),
        alpha: f32,
    ) -> Vec<f64> {
        let mut out = vec![0f64; m * n];
        for i in 0..m {
            for j in 0..n {
                let s: f64 = (0..k)
                    .map(|p| a[i * ars + p * acs] as f64 * b[p * brs + j * bcs] as f64)
                    .sum();
                out[i * n + j] = alpha as f64 * s + if acc { c0[i * n + j] as f64 } else { 0.0 };
            }
        }
        out
    }

    #[test]
    fn products_match_f64_at_every_edge_stride_and_thread_count() {
        if !supported() {
            eprintln!("sgemm: this CPU lacks AVX2 or FMA; the packed products are not used");
            return;
        }
        let pools: Vec<_> = [1, 3]
            .iter()
            .map(|&t| {
                rayon::ThreadPoolBuilder::new()
                    .num_threads(t)
                    .build()
                    .unwrap()
            })
            .collect();
        // sizes around MR = 6, NR = 16, KC = 256 and MC = 144, NC > 2048 once
        for (m, n, k) in [
            (1, 1, 1),
            (5, 15, 0),
            (6, 16, 7),
            (7, 17, 257),
            (13, 33, 64),
            (150, 40, 300),
            (9, 2100, 5),
            (2, 300, 513),
        ] {
            let av: Vec<f32> = (0..m * k).map(|v| (v as f32 * 0.37).sin()).collect();
            let bv: Vec<f32> = (0..k * n).map(|v| (v as f32 * 0.11).cos()).collect();
            let c0: Vec<f32> = (0..m * n).map(|v| (v as f32 * 0.23).sin()).collect();
            // A row-major or stored transposed; B row-major or stored transposed
            for (ta, tb, acc, alpha) in [
                (false, false, false, 1.0f32),
                (true, false, true, 0.5),
                (false, true, true, -2.0),
                (true, true, false, 0.125),
            ] {
                let (ars, acs) = if ta { (1, m) } else { (k, 1) };
                let (brs, bcs) = if tb { (1, k) } else { (n, 1) };
                let want = reference((m, n, k), &c0, acc, (&av, ars, acs), (&bv, brs, bcs), alpha);
                let mut got = Vec::new();
                for pool in &pools {
                    let mut c = c0.clone();
                    let threads = pool.current_num_threads();
                    pool.install(|| unsafe {
                        product(
                            (m, n, k),
                            (c.as_mut_ptr(), n, acc),
                            (av.as_ptr(), ars as isize, acs as isize),
                            (bv.as_ptr(), brs as isize, bcs as isize),
                            alpha,
                            threads,
                        )
                    });
                    for (x, (&g, &w)) in c.iter().zip(&want).enumerate() {
                        // f32 sums of ≤ 513 products of magnitude ≤ 2: a few ulps of k
                        let tol = 1e-5 * (1.0 + k as f64).sqrt() * (1.0 + w.abs());
                        assert!(
                            (g as f64 - w).abs() <= tol,
                            "({m}, {n}, {k}) ta {ta} tb {tb} [{x}]: {g} vs {w}"
                        );
                    }
                    got.push(c);
                }
                // the same bits on 1 and 3 threads (rows or columns split into tiles)
                assert!(
                    got[0]
                        .iter()
                        .zip(&got[1])
                        .all(|(x, y)| x.to_bits() == y.to_bits()),
                    "({m}, {n}, {k}): thread count changed the bits"
                );
            }
        }
    }

    #[test]
    fn without_acc_uninitialised_output_is_overwritten() {
        if !supported() {
            return;
        }
        let (m, n, k) = (7, 19, 3);
        let a: Vec<f32> = (0..m * k).map(|v| v as f32).collect();
        let b: Vec<f32> = (0..k * n).map(|v| 1.0 - v as f32).collect();
        let mut c = vec![f32::NAN; m * n];
        unsafe {
            product(
                (m, n, k),
                (c.as_mut_ptr(), n, false),
                (a.as_ptr(), k as isize, 1),
                (b.as_ptr(), n as isize, 1),
                1.0,
                1,
            )
        };
        for i in 0..m {
            for j in 0..n {
                let want: f32 = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
                assert_eq!(c[i * n + j], want, "({i}, {j})");
            }
        }
        // k = 0 without acc: zeros
        let mut c = vec![f32::NAN; 4];
        unsafe {
            product(
                (2, 2, 0),
                (c.as_mut_ptr(), 2, false),
                (a.as_ptr(), 0, 1),
                (b.as_ptr(), 2, 1),
                1.0,
                1,
            )
        };
        assert_eq!(c, [0.0; 4]);
    }
}
