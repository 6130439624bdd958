//! The tensor-core attention kernels compiled for CUDA without a GPU (tests/cube_compile.rs):
//! what CI can check of a path no CI machine runs.

use super::flash::{attention_backward_kv, attention_backward_q, attention_forward};
use super::tiles::Geometry;
use burn::backend::DType;
use cubecl::prelude::*;

/// The three kernels as the CUDA runtime would compile them for a GPU with tensor cores, made
/// here without one: `d` the head width, `dtype` the stored precision (bf16 or f16, the
/// tensor-core operands; f32 takes the plain path), the largest tiles, for sm_90 (H100/H200),
/// by `backend` (CUDA C++ through cubecl-cpp: pure Rust; or PTX through LLVM, which needs
/// libdevice for exp and log). Returns each kernel's name and source (C++ or PTX), or the
/// compiler's error. The device properties are written out: 32-lane planes, 227 KiB of shared
/// memory, and the tensor-core shapes CUDA reports from sm_80 on (16 × 16 × 16, f16/bf16
/// operands, f32 accumulators).
pub fn compile_for_cuda(
    d: usize,
    dtype: DType,
    backend: cubecl::cuda::compiler::CudaBackend,
) -> Result<Vec<(String, String)>, String> {
    use cubecl::cuda::{CudaCompilationOptions, CudaCompiler, CudaRepresentation};
    use cubecl::features::{Features, MmaConfig, Plane};
    use cubecl::ir::{
        DeviceIdentity, ElemType, FloatKind, HardwareProperties, IntKind, MemoryDeviceProperties,
        nvidia::SmArch,
    };
    use cubecl::{Compiler, CubeKernel, define_kernel};
    use std::sync::Arc;
    let hardware = HardwareProperties {
        load_width: 128,
        vector_register_count: None,
        plane_size_min: 32,
        plane_size_max: 32,
        max_bindings: 32,
        max_shared_memory_size: 232_448,
        max_cube_count: (u32::MAX, u16::MAX as u32, u16::MAX as u32),
        max_units_per_cube: 1024,
        max_cube_dim: (1024, 1024, 64),
        num_streaming_multiprocessors: None,
        num_tensor_cores: None,
        min_tensor_cores_dim: None,
        num_cpu_cores: None,
        last_level_cache_size: None,
        max_vector_size: VectorSize::MAX,
        cube_mma_reserved_shared_memory: 0,
    };
    let mut props = DeviceProperties::new(
        Features::default(),
        MemoryDeviceProperties::new(u64::MAX, 256),
        hardware,
        cubecl::profile::TimingMethod::Device,
        DeviceIdentity {
            name: "offline sm_90".into(),
            fingerprint: "offline".into(),
            physical: None,
        },
    );
    for ab in [FloatKind::F16, FloatKind::BF16] {
        props.features.matmul.cmma.insert(MmaConfig {
            a_type: ElemType::Float(ab),
            b_type: ElemType::Float(ab),
            cd_type: ElemType::Float(FloatKind::F32),
            m: 16,
            n: 16,
            k: 16,
        });
    }
    props.features.plane.insert(Plane::Ops);
    let props = Arc::new(props);
    let stored = match dtype {
        DType::BF16 => ElemType::Float(FloatKind::BF16),
        DType::F16 => ElemType::Float(FloatKind::F16),
        other => {
            return Err(format!(
                "tensor cores take f16 or bf16 operands, not {other:?}"
            ));
        }
    };
    let dtypes = [stored, ElemType::Int(IntKind::I32)];
    let g = Geometry {
        d,
        dp: d.div_ceil(16) * 16,
        planes: 4,
        bc: 64,
        alibi: true,
        tensor_cores: true,
    };
    let settings = || {
        KernelSettings::new(
            *CubeDim::new_2d(32, g.planes as u32),
            ExecutionMode::Checked,
            AddressType::U32,
        )
    };
    let target = || Arc::new(TargetProperties::default());
    let t = || TensorCompilationArg {
        meta: TensorMetaCompilationArg { len: (), rank: () },
        buffer: BufferCompilationArg { inplace: None },
    };
    let kernels: Vec<(&str, Box<dyn CubeKernel>)> = vec![
        (
            "forward",
            Box::new(attention_forward::AttentionForward::new(
                settings(),
                props.clone(),
                target(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                g,
                dtypes,
            )),
        ),
        (
            "backward_q",
            Box::new(attention_backward_q::AttentionBackwardQ::new(
                settings(),
                props.clone(),
                target(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                g,
                dtypes,
            )),
        ),
        (
            "backward_kv",
            Box::new(attention_backward_kv::AttentionBackwardKv::new(
                settings(),
                props.clone(),
                target(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                t(),
                (),
                (),
                (),
                (),
                (),
                (),
                (),
                g,
                dtypes,
            )),
        ),
    ];
    let options = CudaCompilationOptions {
        arch: Some(SmArch::new(90, true)),
        ..Default::default()
    };
    kernels
        .into_iter()
        .map(|(name, kernel)| {
            let def = define_kernel(kernel.as_ref()).map_err(|e| format!("{name}: {e:?}"))?;
            let source = match CudaCompiler::new(backend)
                .compile(def, &options)
                .map_err(|e| format!("{name}: {e:?}"))?
            {
                CudaRepresentation::Cpp(k) => k.to_string(),
                CudaRepresentation::Llvm(m) => {
                    // SAFETY: the module's PTX is NUL-terminated (cubecl-llvm).
                    unsafe { std::ffi::CStr::from_ptr(m.ptx.as_ptr()) }
                        .to_string_lossy()
                        .into_owned()
                }
            };
            Ok((name.to_string(), source))
        })
        .collect()
}
