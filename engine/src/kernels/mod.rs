//! Compute kernels. Each op has a plain reference implementation and, where it matters, a fast
//! variant checked against it. Model code reaches weights only through [`linear::Linear`].

pub(crate) mod activation;
pub mod attention;
pub mod f32gemm;
pub mod int8;
pub(crate) mod int8_aarch64;
pub mod linear;
pub(crate) mod norm;
pub mod quant;
pub(crate) mod rope;
pub mod simd;
