//! The pieces the tiled attention kernels ([`super::flash`]) are made of: the launch geometry,
//! the product of a block's rows with a tile (on tensor cores or by the units, into f32 shared
//! memory), staging a tile, visibility and ALiBi.

use cubecl::cmma;
use cubecl::prelude::*;

/// The smallest logit the kernels see: "none" (−inf) is clamped to it, masked scores are set
/// to it (written as the literal `-1.0e30f32` inside the kernels, where a Rust constant is not
/// a kernel value), and a score above −1e29 is a real one.
pub(super) const NONE: f32 = -1.0e30;

/// The comptime shape of a launch: head width `d` (padded to `dp` in shared memory), the block
/// of `16 · planes` rows, the tile of `bc` columns, whether a position bias (ALiBi) is added
/// and whether products run on tensor cores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Geometry {
    pub d: usize,
    pub dp: usize,
    pub planes: usize,
    pub bc: usize,
    pub alibi: bool,
    pub tensor_cores: bool,
}

impl Geometry {
    /// Rows of a block.
    pub fn rows(&self) -> usize {
        16 * self.planes
    }
    /// Columns of the shared f32 scratch: a (rows × bc) score tile or a (rows × dp) product.
    pub fn scratch_cols(&self) -> usize {
        self.bc.max(self.dp)
    }
    /// Bytes of shared memory each kernel needs, with `elem` bytes per stored element.
    pub fn shared_bytes(&self, elem: usize) -> [usize; 3] {
        let (r, c, dp, s) = (self.rows(), self.bc, self.dp, self.scratch_cols());
        let forward = elem * (r * dp + 2 * c * dp + r * c) + 4 * (r * s + 2 * r);
        let dq = elem * (2 * r * dp + 2 * c * dp + r * c) + 4 * (r * s + r * c + 2 * r);
        let dkdv =
            elem * (2 * r * dp + 2 * c * dp + 2 * r * c) + 4 * (r * s + r * c + 2 * c) + 16 * c;
        [forward, dq, dkdv]
    }
}

/// `out[r][c] = Σ_x a[r][x] · b'[x][c]` for the block's rows r < 16·planes and c < `n`, in
/// f32, where `b'` is `b` read as (kd × n) row-major, or, with `bt`, `b` read as (n × kd)
/// row-major and transposed (`a bᵀ`). Strides in elements: `sa`, `sb`, `so`. On tensor cores
/// each plane computes its 16 rows with 16 × 16 × 16 fragments (n and kd multiples of 16);
/// otherwise the units share the (rows × n) outputs.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn product<E: Float>(
    a: &[E],
    sa: usize,
    b: &[E],
    sb: usize,
    out: &mut [f32],
    so: usize,
    #[comptime] planes: usize,
    #[comptime] n: usize,
    #[comptime] kd: usize,
    #[comptime] bt: bool,
    #[comptime] tensor_cores: bool,
) {
    if tensor_cores {
        let r0 = UNIT_POS_Y as usize * 16;
        #[unroll]
        for ct in 0..n / 16 {
            let acc = cmma::Matrix::<f32>::from_value(
                cmma::MatrixIdent::Accumulator,
                16usize,
                16usize,
                16usize,
                cmma::MatrixLayout::Undefined,
                0.0f32,
            );
            #[unroll]
            for kk in 0..kd / 16 {
                let fa = cmma::Matrix::<E>::from_slice(
                    cmma::MatrixIdent::A,
                    16usize,
                    16usize,
                    16usize,
                    cmma::MatrixLayout::RowMajor,
                    &a[r0 * sa + kk * 16..a.len()],
                    sa as u32,
                );
                let fb = fragment_b::<E>(b, sb, ct, kk, bt);
                cmma::execute(&fa, &fb, &acc, &acc);
            }
            let end = out.len();
            cmma::store(
                &mut out[r0 * so + ct * 16..end],
                &acc,
                so as u32,
                cmma::MatrixLayout::RowMajor,
            );
        }
    } else {
        let units = planes * 32;
        let total = planes * 16 * n;
        let mut idx = UNIT_POS as usize;
        while idx < total {
            let r = idx / n;
            let c = idx % n;
            let mut acc = 0.0f32;
            for x in 0..kd {
                let bv = if bt { b[c * sb + x] } else { b[x * sb + c] };
                acc += f32::cast_from(a[r * sa + x]) * f32::cast_from(bv);
            }
            out[r * so + c] = acc;
            idx += units;
        }
    }
}

/// The B fragment of output column tile `ct` and reduction tile `kk`: (kd × n) row-major, or
/// (n × kd) row-major read column-major (its transpose) with `bt`.
#[cube]
pub(super) fn fragment_b<E: Float>(
    b: &[E],
    sb: usize,
    #[comptime] ct: usize,
    #[comptime] kk: usize,
    #[comptime] bt: bool,
) -> cmma::Matrix<E> {
    if bt {
        cmma::Matrix::<E>::from_slice(
            cmma::MatrixIdent::B,
            16usize,
            16usize,
            16usize,
            cmma::MatrixLayout::ColMajor,
            &b[ct * 16 * sb + kk * 16..b.len()],
            sb as u32,
        )
    } else {
        cmma::Matrix::<E>::from_slice(
            cmma::MatrixIdent::B,
            16usize,
            16usize,
            16usize,
            cmma::MatrixLayout::RowMajor,
            &b[kk * 16 * sb + ct * 16..b.len()],
            sb as u32,
        )
    }
}

/// Copies `rows` rows of `d` values starting at global row `r0` (of `n` rows, row stride `d`,
/// from element `base`) into a (rows × dp) shared tile, zero past `n` and past `d`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn stage<E: Float>(
    src: &Tensor<E>,
    base: usize,
    r0: usize,
    n: usize,
    dst: &mut [E],
    #[comptime] rows: usize,
    #[comptime] d: usize,
    #[comptime] dp: usize,
    #[comptime] planes: usize,
) {
    let units = planes * 32;
    let mut idx = UNIT_POS as usize;
    while idx < rows * dp {
        let r = idx / dp;
        let x = idx % dp;
        let gr = r0 + r;
        let mut val = E::from_int(0);
        if gr < n && x < d {
            val = src[base + gr * d + x];
        }
        dst[idx] = val;
        idx += units;
    }
}

/// Whether column j lies in one of the runs `[a0, b0)`, `[a1, b1)`.
#[cube]
pub(super) fn seen(j: usize, a0: usize, b0: usize, a1: usize, b1: usize) -> bool {
    (j >= a0 && j < b0) || (j >= a1 && j < b1)
}

/// ALiBi's bias for query row `i` (of the forward's rows, position `q_start + i`) and key
/// column `j`: 0 on the key/value slot columns, else `−m_h |pos_i − pos_j|`.
#[cube]
#[allow(clippy::manual_abs_diff)] // `abs_diff` is not a kernel operation
pub(super) fn alibi(slope: f32, i: usize, j: usize, kv_slots: usize, q_start: usize) -> f32 {
    let mut b = 0.0f32;
    if j >= kv_slots {
        let qi = (q_start + i) as u32;
        let kj = (j - kv_slots) as u32;
        let dist = if qi > kj { qi - kj } else { kj - qi };
        b = 0.0f32 - slope * f32::cast_from(dist);
    }
    b
}

/// The run table's entry `r` (0..4) of row i: `[a0, b0, a1, b1]`.
#[cube]
pub(super) fn run_at<I: Numeric>(runs: &Tensor<I>, i: usize, r: usize) -> usize {
    u32::cast_from(runs[i * 4 + r]) as usize
}
