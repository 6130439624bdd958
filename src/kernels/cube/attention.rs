//! Launching the tiled attention kernels of [`super::flash`] (the `Cube` half of
//! [`crate::kernels::attention_op`]): the launch geometry for the device (tensor cores, block
//! and tile sizes that fit its shared memory), the tile ranges each block visits, the shared
//! tables (runs, ALiBi slopes, the clamped extra logit), and ∂z summed over rows.

use super::flash::{attention_backward_kv, attention_backward_q, attention_forward};
use super::tiles::{Geometry, NONE};
use crate::kernels::attention::{key_block_tiles, query_block_tiles};
use crate::kernels::attention_op::{AttnArgs, Tiles};
use burn::backend::cubecl::dtype_to_storage_type;
use burn::backend::ops::{FloatTensorOps, IntTensorOps};
use burn::backend::{DType, TensorMetadata};
use burn::tensor::FloatDType;
use burn::tensor::{Shape, TensorData};
use burn_cubecl::CubeBackend;
use burn_cubecl::kernel::into_contiguous;
use burn_cubecl::ops::numeric::empty_device_dtype;
use burn_cubecl::tensor::CubeTensor;
use cubecl::prelude::*;

/// The sizes (B, H, Q, C, D) of q (B, H, Q, D) and k (B, H, C, D).
fn dims(q: &CubeTensor, k: &CubeTensor) -> [usize; 5] {
    match (q.shape().as_slice(), k.shape().as_slice()) {
        (&[b, h, nq, d], &[kb, kh, c, kd]) if b == kb && h == kh && d == kd => [b, h, nq, c, d],
        (qs, ks) => panic!("attention kernel: q {qs:?} and k {ks:?} do not match"),
    }
}

/// Whether the device multiplies `dtype` (f16 or bf16) on tensor cores in 16 × 16 × 16
/// fragments with f32 accumulators, 32 lanes to a plane.
fn has_tensor_cores(t: &CubeTensor) -> bool {
    use cubecl::features::MmaConfig;
    use cubecl::ir::{ElemType, FloatKind};
    let ab = match t.dtype {
        DType::F16 | DType::BF16 => dtype_to_storage_type(t.dtype),
        _ => return false,
    };
    let props = t.client.properties();
    props.hardware.plane_size_max == 32
        && props.hardware.plane_size_min == 32
        && props.features.matmul.cmma.contains(&MmaConfig {
            a_type: ab,
            b_type: ab,
            cd_type: ElemType::Float(FloatKind::F32),
            m: 16,
            n: 16,
            k: 16,
        })
}

/// The launch geometry for head width `d` on `t`'s device and dtype: tensor cores where the
/// device has them for the dtype; the largest block and tile (64 rows, 64 columns) that the
/// sizes use and the device's shared memory holds, unless `tiles` fixes them.
pub fn geometry(
    t: &CubeTensor,
    d: usize,
    nq: usize,
    nc: usize,
    alibi: bool,
    tiles: Tiles,
) -> Geometry {
    let tensor_cores = has_tensor_cores(t);
    let dp = if tensor_cores {
        d.div_ceil(16) * 16
    } else {
        d.div_ceil(2) * 2
    };
    let elem = t.dtype.size();
    let smem = t.client.properties().hardware.max_shared_memory_size;
    let fits = |g: &Geometry| g.shared_bytes(elem).iter().all(|&b| b <= smem);
    let make = |planes: usize, bc: usize| Geometry {
        d,
        dp,
        planes,
        bc,
        alibi,
        tensor_cores,
    };
    if let Tiles::Fixed { planes, bc } = tiles {
        let g = make(planes, bc);
        assert!(
            fits(&g) && bc % 16 == 0 && (1..=4).contains(&planes),
            "attention kernel: tiles {planes} planes × {bc} columns do not fit ({:?} bytes of shared memory, {smem} available; bc a multiple of 16, 1–4 planes)",
            g.shared_bytes(elem)
        );
        return g;
    }
    let span = nq.max(nc);
    for (planes, bc) in [(4, 64), (4, 32), (2, 32), (2, 16), (1, 16)] {
        let g = make(planes, bc);
        if (16 * planes <= span.next_power_of_two().max(16) || planes == 1) && fits(&g) {
            return g;
        }
    }
    let g = make(1, 16);
    assert!(
        fits(&g),
        "attention kernel: head width {d} needs {:?} bytes of shared memory at the smallest tiles; the device has {smem}",
        g.shared_bytes(elem)
    );
    g
}

/// What every launch shares: the run table, the key-tile runs per query block, the ALiBi
/// slopes (or a 1-element stand-in), z clamped to [`NONE`], on q's device.
struct Common {
    runs: CubeTensor,
    tiles: CubeTensor,
    slopes: CubeTensor,
    z: CubeTensor,
    nqb: usize,
    kv_slots: usize,
    q_start: usize,
}

fn ints(data: Vec<i32>, device: &burn_cubecl::CubeDevice) -> CubeTensor {
    let n = data.len().max(1);
    let data = if data.is_empty() { vec![0] } else { data };
    CubeBackend::int_from_data(TensorData::new(data, [n]), device)
}

fn common(
    q: &CubeTensor,
    z: CubeTensor,
    args: &AttnArgs,
    g: &Geometry,
    h: usize,
    nq: usize,
) -> Common {
    assert_eq!(args.runs.len(), nq, "one run pair per query row");
    let device = &q.device;
    let runs: Vec<i32> = args
        .runs
        .iter()
        .flatten()
        .flatten()
        .map(|&x| x as i32)
        .collect();
    let tiles = query_block_tiles(&args.runs, g.rows(), g.bc);
    let (slopes, kv_slots, q_start) = match &args.alibi {
        Some(a) => {
            assert_eq!(a.slopes.len(), h, "one ALiBi slope per head");
            (a.slopes.to_vec(), a.kv_slots, a.q_start)
        }
        None => (vec![0f32], 0, 0),
    };
    let n = slopes.len();
    let slopes = CubeBackend::float_from_data(TensorData::new(slopes, [n]), device);
    let z = into_contiguous(CubeBackend::float_clamp_min(f32_of(z), NONE.into()));
    Common {
        runs: ints(runs, device),
        tiles: ints(tiles, device),
        slopes,
        z,
        nqb: nq.div_ceil(g.rows()),
        kv_slots,
        q_start,
    }
}

/// An uninitialised tensor of `shape` and `dtype` on `like`'s device.
fn empty(like: &CubeTensor, shape: &[usize], dtype: DType) -> CubeTensor {
    empty_device_dtype(
        like.client.clone(),
        like.device.clone(),
        Shape::from(shape.to_vec()),
        dtype,
    )
}

/// `t` in f32 (a cast only when it is stored in another float type).
fn f32_of(t: CubeTensor) -> CubeTensor {
    if t.dtype == DType::F32 {
        t
    } else {
        CubeBackend::float_cast(t, FloatDType::F32)
    }
}

/// A cube of `planes` planes of 32 units.
fn cube_dim(g: &Geometry) -> CubeDim {
    CubeDim::new_2d(32, g.planes as u32)
}

/// (o, lse) for contiguous-or-not q, k, v and z (see the module's maths).
pub fn forward(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    z: CubeTensor,
    args: &AttnArgs,
) -> (CubeTensor, CubeTensor) {
    let [b, h, nq, c, d] = dims(&q, &k);
    let (q, k, v) = (into_contiguous(q), into_contiguous(k), into_contiguous(v));
    let out = empty(&q, &[b, h, nq, d], q.dtype);
    let lse = empty(&q, &[b, h, nq], DType::F32);
    if b * h * nq == 0 {
        return (out, lse);
    }
    let g = geometry(&q, d, nq, c, args.alibi.is_some(), args.tiles);
    let cm = common(&q, z, args, &g, h, nq);
    let client = q.client.clone();
    let dtypes = [
        dtype_to_storage_type(q.dtype),
        dtype_to_storage_type(cm.runs.dtype),
    ];
    attention_forward::launch(
        &client,
        CubeCount::Static((cm.nqb * b * h) as u32, 1, 1),
        cube_dim(&g),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        cm.z.into_tensor_arg(),
        cm.runs.into_tensor_arg(),
        cm.tiles.into_tensor_arg(),
        cm.slopes.into_tensor_arg(),
        out.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        args.scale,
        h,
        nq,
        c,
        cm.nqb,
        cm.kv_slots,
        cm.q_start,
        g,
        dtypes,
    );
    (out, lse)
}

/// (∂q, ∂k, ∂v, ∂z) for ∂o = `grad`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    q: CubeTensor,
    k: CubeTensor,
    v: CubeTensor,
    z: CubeTensor,
    out: CubeTensor,
    lse: CubeTensor,
    grad: CubeTensor,
    args: &AttnArgs,
) -> (CubeTensor, CubeTensor, CubeTensor, CubeTensor) {
    let [b, h, nq, c, d] = dims(&q, &k);
    let (q, k, v) = (into_contiguous(q), into_contiguous(k), into_contiguous(v));
    let (lse, grad) = (into_contiguous(lse), into_contiguous(grad));
    let grad = if grad.dtype == q.dtype {
        grad
    } else {
        CubeBackend::float_cast(grad, FloatDType::from(q.dtype))
    };
    let z_dtype = z.dtype;
    let dq = empty(&q, &[b, h, nq, d], q.dtype);
    let dk = empty(&q, &[b, h, c, d], q.dtype);
    let dv = empty(&q, &[b, h, c, d], q.dtype);
    let dz_rows = empty(&q, &[b, h, nq], DType::F32);
    if b * h * nq == 0 || c == 0 {
        let zeros = |shape: &[usize], dt: DType| {
            CubeBackend::float_zeros(Shape::from(shape.to_vec()), &q.device, FloatDType::from(dt))
        };
        return (
            zeros(&[b, h, nq, d], q.dtype),
            zeros(&[b, h, c, d], q.dtype),
            zeros(&[b, h, c, d], q.dtype),
            zeros(&[h], z_dtype),
        );
    }
    let g = geometry(&q, d, nq, c, args.alibi.is_some(), args.tiles);
    let cm = common(&q, z, args, &g, h, nq);
    // D_i = do_i·o_i (B, H, Q) in f32, by Burn's own ops
    let dsum = CubeBackend::float_mul(f32_of(grad.clone()), f32_of(out));
    let dsum = CubeBackend::float_sum_dim(dsum, 3);
    let dsum = into_contiguous(CubeBackend::float_reshape(
        dsum,
        Shape::from(vec![b, h, nq]),
    ));
    let client = q.client.clone();
    let dtypes = [
        dtype_to_storage_type(q.dtype),
        dtype_to_storage_type(cm.runs.dtype),
    ];
    attention_backward_q::launch(
        &client,
        CubeCount::Static((cm.nqb * b * h) as u32, 1, 1),
        cube_dim(&g),
        q.clone().into_tensor_arg(),
        k.clone().into_tensor_arg(),
        v.clone().into_tensor_arg(),
        grad.clone().into_tensor_arg(),
        cm.z.clone().into_tensor_arg(),
        lse.clone().into_tensor_arg(),
        dsum.clone().into_tensor_arg(),
        cm.runs.clone().into_tensor_arg(),
        cm.tiles.into_tensor_arg(),
        cm.slopes.clone().into_tensor_arg(),
        dq.clone().into_tensor_arg(),
        dz_rows.clone().into_tensor_arg(),
        args.scale,
        h,
        nq,
        c,
        cm.nqb,
        cm.kv_slots,
        cm.q_start,
        g,
        dtypes,
    );
    let nkb = c.div_ceil(g.rows());
    let qtiles = ints(key_block_tiles(&args.runs, c, g.rows(), g.bc), &q.device);
    attention_backward_kv::launch(
        &client,
        CubeCount::Static((nkb * b * h) as u32, 1, 1),
        cube_dim(&g),
        q.into_tensor_arg(),
        k.into_tensor_arg(),
        v.into_tensor_arg(),
        grad.into_tensor_arg(),
        lse.into_tensor_arg(),
        dsum.into_tensor_arg(),
        cm.runs.into_tensor_arg(),
        qtiles.into_tensor_arg(),
        cm.slopes.into_tensor_arg(),
        dk.clone().into_tensor_arg(),
        dv.clone().into_tensor_arg(),
        args.scale,
        h,
        nq,
        c,
        nkb,
        cm.kv_slots,
        cm.q_start,
        g,
        dtypes,
    );
    // ∂z_h = Σ_b,i of the rows' shares, in z's own dtype
    let dz = CubeBackend::float_sum_dim(CubeBackend::float_sum_dim(dz_rows, 2), 0);
    let dz = CubeBackend::float_reshape(dz, Shape::from(vec![h]));
    let dz = if z_dtype == DType::F32 {
        dz
    } else {
        CubeBackend::float_cast(dz, FloatDType::from(z_dtype))
    };
    (dq, dk, dv, dz)
}

impl crate::kernels::attention_op::AttentionOps for CubeBackend {
    fn attention_forward(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        z: CubeTensor,
        args: AttnArgs,
    ) -> (CubeTensor, CubeTensor) {
        forward(q, k, v, z, &args)
    }

    fn attention_backward(
        q: CubeTensor,
        k: CubeTensor,
        v: CubeTensor,
        z: CubeTensor,
        out: CubeTensor,
        lse: CubeTensor,
        grad: CubeTensor,
        args: AttnArgs,
    ) -> (CubeTensor, CubeTensor, CubeTensor, CubeTensor) {
        backward(q, k, v, z, out, lse, grad, &args)
    }
}
