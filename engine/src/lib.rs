//! Unmask engine: loads LLaDA / Dream / LLaDA-MoE / Llama / Qwen checkpoints, runs them on the CPU
//! (and, through the [`backend::Backend`] trait, on other units) and decodes with dLLM policies.
//!
//! Dependencies point one way: `tensor` (dtypes, checkpoint bytes) <- `kernels` <- `model` <-
//! `backend` <- `decode` <- `run`.

pub mod backend;
pub mod decode;
pub mod error;
pub mod files;
pub mod kernels;
pub mod memory;
pub mod model;
pub mod moe;
pub mod run;
pub mod tensor;
pub mod threads;
pub mod trace;

pub use error::{EngineError, Result};
