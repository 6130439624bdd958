//! The `Cube` half of the kernels: CubeCL kernels for the GPU backends (`wgpu`, `cuda`), each
//! the device twin of a [`super::cpu`] kernel with the same maths and the same coverage.
//! Today: attention ([`attention`]); the other kernels keep Burn's ops on these backends
//! (which Burn's fusion compiles into fewer kernels there).

pub mod attention;
