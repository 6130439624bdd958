//! The `Cube` half of the kernels: CubeCL kernels for the GPU backends (`wgpu`, `cuda`), each
//! the device twin of a [`super::cpu`] kernel with the same maths and the same coverage.
//! Today: attention ([`flash`]: the tiled kernels; [`attention`]: their launches); the other
//! kernels keep Burn's ops on these backends (which Burn's fusion compiles into fewer kernels
//! there). [`offline`] compiles the tensor-core path for CUDA without a GPU.

pub mod adamw;
pub mod attention;
pub mod flash;
#[cfg(feature = "cuda")]
pub mod offline;
pub mod tiles;
pub mod xent;
