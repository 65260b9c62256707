//! Runs `engine/src/kernels/int8_aarch64.rs` (included verbatim) against a plain reference.

#[path = "../../../engine/src/kernels/int8_aarch64.rs"]
pub mod int8_aarch64;

#[cfg(test)]
mod tests;
