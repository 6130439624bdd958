//! The tensor-core path of the tiled attention kernels (src/kernels/cube/attention.rs), which
//! no CI machine can run (lavapipe has no tensor cores), compiled for CUDA without a GPU: the
//! forward, ∂q and ∂k/∂v kernels for sm_90 with bf16 and f16 operands at the head widths of the
//! shipped models, to CUDA C++ (cubecl-cpp: the expansion, the fragment shapes checked against
//! the device's tensor-core table, the source CUDA's runtime compiler would get), and to PTX
//! through LLVM — what sinklab's `cuda` runtime really loads — where CUDA's libdevice is found
//! (`CUDA_PATH`; scripts/setup_cuda_build.sh fetches it for CI).
//!
//! Built and run only with the `cuda` feature (scripts/wgpu_smoke.sh:
//! `cargo test --profile smoke --features wgpu,cuda --test cube_compile`).
#![cfg(feature = "cuda")]

use burn::tensor::DType;
use cubecl::cuda::compiler::CudaBackend;
use sinklab::kernels::cube::offline::compile_for_cuda;

/// The head widths of the shipped models: gu60m (96), SmolLM2 (64), the natural-text model
/// (32), the quickstart (16), and one that needs padding to a fragment (40).
const WIDTHS: [usize; 5] = [96, 64, 32, 16, 40];

#[test]
fn the_tensor_core_kernels_compile_to_cuda_cpp() {
    for dtype in [DType::BF16, DType::F16] {
        for d in WIDTHS {
            let sources = compile_for_cuda(d, dtype, CudaBackend::Cpp)
                .unwrap_or_else(|e| panic!("{dtype:?}, d {d}: {e}"));
            assert_eq!(sources.len(), 3);
            for (name, src) in &sources {
                // each product on fragments: loads, the multiply-accumulate, the store
                let mma = src.matches("mma_sync").count();
                assert!(
                    mma >= 2
                        && src.contains("load_matrix_sync")
                        && src.contains("store_matrix_sync"),
                    "{name} ({dtype:?}, d {d}): no tensor-core fragments in the C++ source:\n{}",
                    &src[..src.len().min(4000)]
                );
                println!(
                    "{name:<12} {dtype:?} d {d:>3}: {mma} mma_sync, {} bytes of C++",
                    src.len()
                );
            }
        }
    }
}

#[test]
fn the_tensor_core_kernels_compile_to_ptx_where_libdevice_is_found() {
    let libdevice = std::env::var("CUDA_PATH")
        .map(|p| std::path::Path::new(&p).join("nvvm/libdevice/libdevice.10.bc"))
        .ok()
        .filter(|p| p.is_file());
    let Some(libdevice) = libdevice else {
        // Not a skip that can pass silently in CI: scripts/wgpu_smoke.sh sets CUDA_PATH and
        // requires this line not to be printed.
        println!("PTX NOT COMPILED: no libdevice.10.bc under $CUDA_PATH/nvvm/libdevice");
        return;
    };
    println!("libdevice: {}", libdevice.display());
    for dtype in [DType::BF16, DType::F16] {
        for d in [96, 64] {
            let sources = compile_for_cuda(d, dtype, CudaBackend::Llvm)
                .unwrap_or_else(|e| panic!("{dtype:?}, d {d}: {e}"));
            for (name, ptx) in &sources {
                let wmma = ptx.matches("wmma.mma.sync.aligned").count();
                assert!(
                    wmma >= 2 && ptx.contains(".target sm_90"),
                    "{name} ({dtype:?}, d {d}): no sm_90 wmma in the PTX:\n{}",
                    &ptx[..ptx.len().min(4000)]
                );
                println!(
                    "{name:<12} {dtype:?} d {d}: {wmma} wmma.mma.sync, {} bytes of PTX",
                    ptx.len()
                );
            }
        }
    }
}
