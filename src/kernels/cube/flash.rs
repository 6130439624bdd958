//! The tiled attention kernels in CubeCL (launched by [`super::attention`], the `Cube` half of
//! [`crate::kernels::attention_op`]; the maths of [`crate::kernels::cpu::attention`]),
//! FlashAttention-2's schedule:
//!
//! ```text
//! s_ij = scale · q_i·k_j + bias_h,i,j      visible j only (the runs of row i)
//! extra column: s_i∅ = z_h, value 0        the sink logit; ln n for softmax_n; none: z_h ≤ −1e30
//! lse_i = log(e^z_h + Σ_j e^s_ij)          # (B, H, Q), saved
//! o_i = Σ_j e^(s_ij − lse_i) v_j           # (B, H, Q, D)
//! backward, with P_ij = e^(s_ij − lse_i) and D_i = do_i·o_i:
//! ∂v_j = Σ_i P_ij do_i     ∂s_ij = P_ij (do_i·v_j − D_i)
//! ∂q_i = scale Σ_j ∂s_ij k_j     ∂k_j = scale Σ_i ∂s_ij q_i     ∂z_h = −Σ_b,i e^(z_h − lse_i) D_i
//! ```
//!
//! **Schedule.** A cube of `planes` × 32 units owns a block of R = 16·planes rows of one (b, h)
//! and walks tiles of the other side through shared memory, never forming the (Q, C) weights:
//! - forward: R query rows, key/value tiles of `bc` keys; online softmax (running max m and sum
//!   l per row, the output accumulator rescaled by e^(m_old − m_new)); saves lse;
//! - ∂q (and each row's share of ∂z): R query rows, the same key tiles, P recomputed from lse;
//! - ∂k, ∂v: R key rows, query tiles of `bc` rows (the transposed products Kqᵀ and V doᵀ, so
//!   every product is "rows of the block × a tile").
//!
//! Which tiles a block visits comes from the host (`tile ranges`): for a query block, at most two
//! runs of key tiles that hold a visible column of one of its rows (the union of the rows' runs,
//! so a causal block stops at the diagonal and a sliding window skips what lies behind it); for
//! a key block, the run of query tiles that see one of its keys. Tiles outside are never read.
//! The extra column (sink logit, softmax_n's n) is the online softmax's starting point (m = z,
//! l = 1), never a tile.
//!
//! **Every step is "products into shared memory, then units on rows".** Products (`q kᵀ`,
//! `do vᵀ`, `P v`, `∂S k`, …) are written in f32 to shared memory by [`product`]: on tensor
//! cores (CubeCL's `cmma`, 16 × 16 × 16 fragments, f16/bf16 operands, f32 accumulators) where
//! the device has them for the stored dtype, else by the units from the shared tiles (f32
//! arithmetic). Then each row is owned by two units (two lanes of one plane), each holding half
//! of the row's columns and half of its output accumulator in registers: masking, scale, bias,
//! the online softmax, P and ∂S are the same code on both paths, so lavapipe (no tensor cores)
//! tests all of it but the fragment products. The two halves of a row exchange their maximum
//! through shared memory (no plane operations: wgpu has none on CPU adapters).
//!
//! Storage: q, k, v, o and their gradients in f32, f16 or bf16 (mixed precision: the model's
//! low precision); the tiles in shared memory in that dtype (zero-padded to the head width
//! `dp`), P and ∂S stored back in it for the products that read them (as FlashAttention-2
//! does), every score, exponential, sum and the saved lse in f32.
//!
//! "No extra logit" is z = −inf on the host; WGSL has no infinities, so z is clamped to
//! [`NONE`] first (e^(NONE − m) is 0 in f32, and a row that sees nothing gives o = 0 with
//! ∂z = 0 because D_i = 0 there). Masked scores are set to [`NONE`] and their weights to 0.

use super::tiles::{Geometry, alibi, product, run_at, seen, stage};
use cubecl::prelude::*;

/// Forward: one cube per (block of query rows, b·h).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_forward<E: Float, I: Numeric>(
    q: &Tensor<E>,         // (B, H, Q, D)
    k: &Tensor<E>,         // (B, H, C, D)
    v: &Tensor<E>,         // (B, H, C, D)
    z: &Tensor<f32>,       // (H), clamped
    runs: &Tensor<I>,      // (Q, 4)
    tiles: &Tensor<I>,     // (query blocks, 4): two runs of key tiles
    slopes: &Tensor<f32>,  // (H) or (1)
    out: &mut Tensor<E>,   // (B, H, Q, D)
    lse: &mut Tensor<f32>, // (B, H, Q)
    scale: f32,
    heads: usize,
    nq: usize,
    nc: usize,
    nqb: usize,
    kv_slots: usize,
    q_start: usize,
    #[comptime] g: Geometry,
    #[define(E, I)] _dtypes: [ElemType; 2],
) {
    let rows = comptime!(g.planes * 16);
    let bc = comptime!(g.bc);
    let dp = comptime!(g.dp);
    let hw = comptime!(g.dp / 2);
    let half_c = comptime!(g.bc / 2);
    let sw = comptime!(if g.bc > g.dp { g.bc } else { g.dp });
    let qb = CUBE_POS % nqb;
    let bh = CUBE_POS / nqb;
    let hd = bh % heads;
    let lane = UNIT_POS_X as usize;
    let row = UNIT_POS_Y as usize * 16 + lane / 2;
    let half = lane % 2;
    let qi = qb * rows + row;
    let row_ok = qi < nq;
    let q0 = bh * nq * comptime!(g.d);
    let kv0 = bh * nc * comptime!(g.d);

    let mut sq = Shared::<[E]>::new_aligned_slice(rows * dp, 32usize);
    let mut sk = Shared::<[E]>::new_aligned_slice(bc * dp, 32usize);
    let mut sv = Shared::<[E]>::new_aligned_slice(bc * dp, 32usize);
    let mut sp = Shared::<[E]>::new_aligned_slice(rows * bc, 32usize);
    let mut ss = Shared::<[f32]>::new_aligned_slice(rows * sw, 32usize);
    let mut sm = Shared::<[f32]>::new_slice(rows * 2);

    stage::<E>(
        q,
        q0,
        qb * rows,
        nq,
        &mut sq,
        rows,
        comptime!(g.d),
        dp,
        comptime!(g.planes),
    );
    let mut a0 = 0usize;
    let mut b0 = 0usize;
    let mut a1 = 0usize;
    let mut b1 = 0usize;
    if row_ok {
        a0 = run_at::<I>(runs, qi, 0);
        b0 = run_at::<I>(runs, qi, 1);
        a1 = run_at::<I>(runs, qi, 2);
        b1 = run_at::<I>(runs, qi, 3);
    }
    let mut slope = 0.0f32;
    if comptime!(g.alibi) {
        slope = slopes[hd];
    }
    // the extra logit starts the online softmax: m = z, its e^(z − m) = 1 counted once
    let mut m = z[hd];
    let mut l = 0.0f32;
    if half == 0 {
        l = 1.0f32;
    }
    let mut acc = Array::<f32>::new(hw);
    #[unroll]
    for x in 0..hw {
        acc[x] = 0.0f32;
    }
    for r in 0..2usize {
        let ta = run_at::<I>(tiles, qb, 2 * r);
        let tb = run_at::<I>(tiles, qb, 2 * r + 1);
        for t in ta..tb {
            let c0 = t * bc;
            stage::<E>(
                k,
                kv0,
                c0,
                nc,
                &mut sk,
                bc,
                comptime!(g.d),
                dp,
                comptime!(g.planes),
            );
            stage::<E>(
                v,
                kv0,
                c0,
                nc,
                &mut sv,
                bc,
                comptime!(g.d),
                dp,
                comptime!(g.planes),
            );
            sync_cube();
            // s = q kᵀ (rows × bc)
            product::<E>(
                &sq,
                dp,
                &sk,
                dp,
                &mut ss,
                sw,
                comptime!(g.planes),
                bc,
                dp,
                true,
                comptime!(g.tensor_cores),
            );
            sync_cube();
            // this half of the row: scale, bias, mask; its maximum
            let mut mx = f32::new(-1.0e30); // NONE
            for jj in 0..half_c {
                let j = half * half_c + jj;
                let gj = c0 + j;
                let mut s = f32::new(-1.0e30); // NONE
                if row_ok && seen(gj, a0, b0, a1, b1) {
                    s = ss[row * sw + j] * scale;
                    if comptime!(g.alibi) {
                        s += alibi(slope, qi, gj, kv_slots, q_start);
                    }
                    mx = max(mx, s);
                }
                ss[row * sw + j] = s;
            }
            sm[row * 2 + half] = mx;
            sync_cube();
            let m_new = max(m, max(sm[row * 2], sm[row * 2 + 1]));
            let corr = (m - m_new).exp();
            let mut psum = 0.0f32;
            for jj in 0..half_c {
                let j = half * half_c + jj;
                let s = ss[row * sw + j];
                let mut p = 0.0f32;
                if s > -1.0e29f32 {
                    // a real score, not NONE
                    p = (s - m_new).exp();
                }
                psum += p;
                sp[row * bc + j] = E::cast_from(p);
            }
            l = l * corr + psum;
            m = m_new;
            sync_cube();
            // o = o · corr + p v (rows × dp), into the scratch
            product::<E>(
                &sp,
                bc,
                &sv,
                dp,
                &mut ss,
                sw,
                comptime!(g.planes),
                dp,
                bc,
                false,
                comptime!(g.tensor_cores),
            );
            sync_cube();
            #[unroll]
            for x in 0..hw {
                acc[x] = acc[x] * corr + ss[row * sw + half * hw + x];
            }
            sync_cube();
        }
    }
    // the two halves' sums
    sm[row * 2 + half] = l;
    sync_cube();
    let total = sm[row * 2] + sm[row * 2 + 1];
    if row_ok {
        let inv = 1.0f32 / total;
        let o0 = q0 + qi * comptime!(g.d) + half * hw;
        #[unroll]
        for x in 0..hw {
            if half * hw + x < comptime!(g.d) {
                out[o0 + x] = E::cast_from(acc[x] * inv);
            }
        }
        if half == 0 {
            lse[bh * nq + qi] = m + total.ln();
        }
    }
}

/// ∂q and each row's share of ∂z: one cube per (block of query rows, b·h).
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_backward_q<E: Float, I: Numeric>(
    q: &Tensor<E>,
    k: &Tensor<E>,
    v: &Tensor<E>,
    grad: &Tensor<E>,          // ∂o (B, H, Q, D)
    z: &Tensor<f32>,           // (H), clamped
    lse: &Tensor<f32>,         // (B, H, Q)
    dsum: &Tensor<f32>,        // D_i = do_i·o_i (B, H, Q)
    runs: &Tensor<I>,          // (Q, 4)
    tiles: &Tensor<I>,         // (query blocks, 4)
    slopes: &Tensor<f32>,      // (H) or (1)
    dq: &mut Tensor<E>,        // (B, H, Q, D)
    dz_rows: &mut Tensor<f32>, // (B, H, Q)
    scale: f32,
    heads: usize,
    nq: usize,
    nc: usize,
    nqb: usize,
    kv_slots: usize,
    q_start: usize,
    #[comptime] g: Geometry,
    #[define(E, I)] _dtypes: [ElemType; 2],
) {
    let rows = comptime!(g.planes * 16);
    let bc = comptime!(g.bc);
    let dp = comptime!(g.dp);
    let hw = comptime!(g.dp / 2);
    let half_c = comptime!(g.bc / 2);
    let sw = comptime!(if g.bc > g.dp { g.bc } else { g.dp });
    let qb = CUBE_POS % nqb;
    let bh = CUBE_POS / nqb;
    let hd = bh % heads;
    let lane = UNIT_POS_X as usize;
    let row = UNIT_POS_Y as usize * 16 + lane / 2;
    let half = lane % 2;
    let qi = qb * rows + row;
    let row_ok = qi < nq;
    let q0 = bh * nq * comptime!(g.d);
    let kv0 = bh * nc * comptime!(g.d);

    let mut sq = Shared::<[E]>::new_aligned_slice(rows * dp, 32usize);
    let mut sdo = Shared::<[E]>::new_aligned_slice(rows * dp, 32usize);
    let mut sk = Shared::<[E]>::new_aligned_slice(bc * dp, 32usize);
    let mut sv = Shared::<[E]>::new_aligned_slice(bc * dp, 32usize);
    let mut sds = Shared::<[E]>::new_aligned_slice(rows * bc, 32usize);
    let mut ss = Shared::<[f32]>::new_aligned_slice(rows * sw, 32usize);
    let mut sdp = Shared::<[f32]>::new_aligned_slice(rows * bc, 32usize);

    stage::<E>(
        q,
        q0,
        qb * rows,
        nq,
        &mut sq,
        rows,
        comptime!(g.d),
        dp,
        comptime!(g.planes),
    );
    stage::<E>(
        grad,
        q0,
        qb * rows,
        nq,
        &mut sdo,
        rows,
        comptime!(g.d),
        dp,
        comptime!(g.planes),
    );
    let mut a0 = 0usize;
    let mut b0 = 0usize;
    let mut a1 = 0usize;
    let mut b1 = 0usize;
    let mut li = 0.0f32;
    let mut di = 0.0f32;
    if row_ok {
        a0 = run_at::<I>(runs, qi, 0);
        b0 = run_at::<I>(runs, qi, 1);
        a1 = run_at::<I>(runs, qi, 2);
        b1 = run_at::<I>(runs, qi, 3);
        li = lse[bh * nq + qi];
        di = dsum[bh * nq + qi];
    }
    let mut slope = 0.0f32;
    if comptime!(g.alibi) {
        slope = slopes[hd];
    }
    let mut acc = Array::<f32>::new(hw);
    #[unroll]
    for x in 0..hw {
        acc[x] = 0.0f32;
    }
    for r in 0..2usize {
        let ta = run_at::<I>(tiles, qb, 2 * r);
        let tb = run_at::<I>(tiles, qb, 2 * r + 1);
        for t in ta..tb {
            let c0 = t * bc;
            stage::<E>(
                k,
                kv0,
                c0,
                nc,
                &mut sk,
                bc,
                comptime!(g.d),
                dp,
                comptime!(g.planes),
            );
            stage::<E>(
                v,
                kv0,
                c0,
                nc,
                &mut sv,
                bc,
                comptime!(g.d),
                dp,
                comptime!(g.planes),
            );
            sync_cube();
            // s = q kᵀ and ∂p = do vᵀ (rows × bc)
            product::<E>(
                &sq,
                dp,
                &sk,
                dp,
                &mut ss,
                sw,
                comptime!(g.planes),
                bc,
                dp,
                true,
                comptime!(g.tensor_cores),
            );
            product::<E>(
                &sdo,
                dp,
                &sv,
                dp,
                &mut sdp,
                bc,
                comptime!(g.planes),
                bc,
                dp,
                true,
                comptime!(g.tensor_cores),
            );
            sync_cube();
            // ∂s = P (∂p − D) on this half of the row
            for jj in 0..half_c {
                let j = half * half_c + jj;
                let gj = c0 + j;
                let mut ds = 0.0f32;
                if row_ok && seen(gj, a0, b0, a1, b1) {
                    let mut s = ss[row * sw + j] * scale;
                    if comptime!(g.alibi) {
                        s += alibi(slope, qi, gj, kv_slots, q_start);
                    }
                    let p = (s - li).exp();
                    ds = p * (sdp[row * bc + j] - di);
                }
                sds[row * bc + j] = E::cast_from(ds);
            }
            sync_cube();
            // ∂q += ∂s k (rows × dp), into the scratch
            product::<E>(
                &sds,
                bc,
                &sk,
                dp,
                &mut ss,
                sw,
                comptime!(g.planes),
                dp,
                bc,
                false,
                comptime!(g.tensor_cores),
            );
            sync_cube();
            #[unroll]
            for x in 0..hw {
                acc[x] += ss[row * sw + half * hw + x];
            }
            sync_cube();
        }
    }
    if row_ok {
        let o0 = q0 + qi * comptime!(g.d) + half * hw;
        #[unroll]
        for x in 0..hw {
            if half * hw + x < comptime!(g.d) {
                dq[o0 + x] = E::cast_from(acc[x] * scale);
            }
        }
        if half == 0 {
            dz_rows[bh * nq + qi] = 0.0f32 - (z[hd] - li).exp() * di;
        }
    }
}

/// ∂k and ∂v: one cube per (block of key rows, b·h), over the query tiles that see it.
#[cube(launch)]
#[allow(clippy::too_many_arguments)]
pub(super) fn attention_backward_kv<E: Float, I: Numeric>(
    q: &Tensor<E>,
    k: &Tensor<E>,
    v: &Tensor<E>,
    grad: &Tensor<E>,     // ∂o (B, H, Q, D)
    lse: &Tensor<f32>,    // (B, H, Q)
    dsum: &Tensor<f32>,   // (B, H, Q)
    runs: &Tensor<I>,     // (Q, 4)
    qtiles: &Tensor<I>,   // (key blocks, 2): the run of query tiles
    slopes: &Tensor<f32>, // (H) or (1)
    dk: &mut Tensor<E>,   // (B, H, C, D)
    dv: &mut Tensor<E>,   // (B, H, C, D)
    scale: f32,
    heads: usize,
    nq: usize,
    nc: usize,
    nkb: usize,
    kv_slots: usize,
    q_start: usize,
    #[comptime] g: Geometry,
    #[define(E, I)] _dtypes: [ElemType; 2],
) {
    // the block's rows are keys here, the tiles' columns queries
    let rows = comptime!(g.planes * 16);
    let bc = comptime!(g.bc);
    let dp = comptime!(g.dp);
    let hw = comptime!(g.dp / 2);
    let half_c = comptime!(g.bc / 2);
    let sw = comptime!(if g.bc > g.dp { g.bc } else { g.dp });
    let kb = CUBE_POS % nkb;
    let bh = CUBE_POS / nkb;
    let hd = bh % heads;
    let lane = UNIT_POS_X as usize;
    let row = UNIT_POS_Y as usize * 16 + lane / 2;
    let half = lane % 2;
    let kj = kb * rows + row;
    let q0 = bh * nq * comptime!(g.d);
    let kv0 = bh * nc * comptime!(g.d);

    let mut sk = Shared::<[E]>::new_aligned_slice(rows * dp, 32usize);
    let mut sv = Shared::<[E]>::new_aligned_slice(rows * dp, 32usize);
    let mut sq = Shared::<[E]>::new_aligned_slice(bc * dp, 32usize);
    let mut sdo = Shared::<[E]>::new_aligned_slice(bc * dp, 32usize);
    let mut sp = Shared::<[E]>::new_aligned_slice(rows * bc, 32usize);
    let mut sds = Shared::<[E]>::new_aligned_slice(rows * bc, 32usize);
    let mut ss = Shared::<[f32]>::new_aligned_slice(rows * sw, 32usize);
    let mut sdp = Shared::<[f32]>::new_aligned_slice(rows * bc, 32usize);
    let mut sl = Shared::<[f32]>::new_slice(bc * 2);
    let mut sr = Shared::<[u32]>::new_slice(bc * 4);

    stage::<E>(
        k,
        kv0,
        kb * rows,
        nc,
        &mut sk,
        rows,
        comptime!(g.d),
        dp,
        comptime!(g.planes),
    );
    stage::<E>(
        v,
        kv0,
        kb * rows,
        nc,
        &mut sv,
        rows,
        comptime!(g.d),
        dp,
        comptime!(g.planes),
    );
    let mut slope = 0.0f32;
    if comptime!(g.alibi) {
        slope = slopes[hd];
    }
    let mut ak = Array::<f32>::new(hw);
    let mut av = Array::<f32>::new(hw);
    #[unroll]
    for x in 0..hw {
        ak[x] = 0.0f32;
        av[x] = 0.0f32;
    }
    let ta = u32::cast_from(qtiles[kb * 2]) as usize;
    let tb = u32::cast_from(qtiles[kb * 2 + 1]) as usize;
    let units = comptime!(g.planes * 32);
    for t in ta..tb {
        let i0 = t * bc;
        stage::<E>(
            q,
            q0,
            i0,
            nq,
            &mut sq,
            bc,
            comptime!(g.d),
            dp,
            comptime!(g.planes),
        );
        stage::<E>(
            grad,
            q0,
            i0,
            nq,
            &mut sdo,
            bc,
            comptime!(g.d),
            dp,
            comptime!(g.planes),
        );
        // the tile's rows: lse, D and their runs (empty past Q)
        let mut idx = UNIT_POS as usize;
        while idx < bc {
            let gi = i0 + idx;
            let mut lv = 0.0f32;
            let mut dv_ = 0.0f32;
            let mut ra0 = 0u32;
            let mut rb0 = 0u32;
            let mut ra1 = 0u32;
            let mut rb1 = 0u32;
            if gi < nq {
                lv = lse[bh * nq + gi];
                dv_ = dsum[bh * nq + gi];
                ra0 = u32::cast_from(runs[gi * 4]);
                rb0 = u32::cast_from(runs[gi * 4 + 1]);
                ra1 = u32::cast_from(runs[gi * 4 + 2]);
                rb1 = u32::cast_from(runs[gi * 4 + 3]);
            }
            sl[idx * 2] = lv;
            sl[idx * 2 + 1] = dv_;
            sr[idx * 4] = ra0;
            sr[idx * 4 + 1] = rb0;
            sr[idx * 4 + 2] = ra1;
            sr[idx * 4 + 3] = rb1;
            idx += units;
        }
        sync_cube();
        // sᵀ = k qᵀ and ∂pᵀ = v doᵀ (key rows × query columns)
        product::<E>(
            &sk,
            dp,
            &sq,
            dp,
            &mut ss,
            sw,
            comptime!(g.planes),
            bc,
            dp,
            true,
            comptime!(g.tensor_cores),
        );
        product::<E>(
            &sv,
            dp,
            &sdo,
            dp,
            &mut sdp,
            bc,
            comptime!(g.planes),
            bc,
            dp,
            true,
            comptime!(g.tensor_cores),
        );
        sync_cube();
        // Pᵀ and ∂sᵀ on this half of the key row
        for ii in 0..half_c {
            let i = half * half_c + ii;
            let gi = i0 + i;
            let mut p = 0.0f32;
            let mut ds = 0.0f32;
            let vis = kj < nc
                && gi < nq
                && seen(
                    kj,
                    sr[i * 4] as usize,
                    sr[i * 4 + 1] as usize,
                    sr[i * 4 + 2] as usize,
                    sr[i * 4 + 3] as usize,
                );
            if vis {
                let mut s = ss[row * sw + i] * scale;
                if comptime!(g.alibi) {
                    s += alibi(slope, gi, kj, kv_slots, q_start);
                }
                p = (s - sl[i * 2]).exp();
                ds = p * (sdp[row * bc + i] - sl[i * 2 + 1]);
            }
            sp[row * bc + i] = E::cast_from(p);
            sds[row * bc + i] = E::cast_from(ds);
        }
        sync_cube();
        // ∂v += Pᵀ do (key rows × dp)
        product::<E>(
            &sp,
            bc,
            &sdo,
            dp,
            &mut ss,
            sw,
            comptime!(g.planes),
            dp,
            bc,
            false,
            comptime!(g.tensor_cores),
        );
        sync_cube();
        #[unroll]
        for x in 0..hw {
            av[x] += ss[row * sw + half * hw + x];
        }
        sync_cube();
        // ∂k += ∂sᵀ q (key rows × dp)
        product::<E>(
            &sds,
            bc,
            &sq,
            dp,
            &mut ss,
            sw,
            comptime!(g.planes),
            dp,
            bc,
            false,
            comptime!(g.tensor_cores),
        );
        sync_cube();
        #[unroll]
        for x in 0..hw {
            ak[x] += ss[row * sw + half * hw + x];
        }
        sync_cube();
    }
    if kj < nc {
        let o0 = kv0 + kj * comptime!(g.d) + half * hw;
        #[unroll]
        for x in 0..hw {
            if half * hw + x < comptime!(g.d) {
                dk[o0 + x] = E::cast_from(ak[x] * scale);
                dv[o0 + x] = E::cast_from(av[x]);
            }
        }
    }
}
