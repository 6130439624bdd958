//! The CPU half of the kernels: host code on f32 slices, called by the `Flex` implementation
//! of [`super::ops::KernelPrimitives`]. Each file is one operation, its forward and backward,
//! with a test against a direct f64 computation of its definition.

pub mod adamw;
pub mod attention;
pub mod gemm;
pub mod glu;
pub mod head_xent;
pub mod linear;
pub mod narrow;
pub mod norm;
pub mod rope;
pub mod sgemm;
pub mod xent;
