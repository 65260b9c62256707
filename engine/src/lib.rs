//! Unmask engine: loads LLaDA / Dream / LLaDA-MoE / Llama / Qwen checkpoints, runs them on the CPU
//! (and, through the [`backend::Backend`] trait, on other units) and decodes with dLLM policies.
//!
//! Dependencies point one way: `tensor` (dtypes, checkpoint bytes) <- `kernels` <- `model` <-
//! `backend` <- `decode` <- `run`.
//!
//! The facade below is what a front end needs: load a model, pick a backend, run a generation
//! through the one pipeline ([`Session`]) or the bare decoder ([`generate`]), watch its frames,
//! handle its errors. The modules stay public for the benchmarks and the integration tests, which
//! reach deeper (simulators, kernels, traces); modules that nothing outside the engine uses are
//! private to it.

pub mod backend;
pub mod decode;
pub(crate) mod error;
pub(crate) mod files;
pub mod kernels;
pub mod memory;
pub mod model;
pub mod moe;
pub mod run;
pub mod tensor;
pub mod threads;
pub mod trace;

pub use backend::cpu::CpuBackend;
pub use backend::vnpu::{DeviceProfile, VirtualNpu, VnpuConfig};
pub use backend::{Backend, ForwardStats};
pub use decode::{
    generate, CacheMode, CancelFlag, DecodeOutput, DecodeSettings, DreamAlg, Remasking, StepFrame, StopReason,
    TokenChange, TokenState,
};
pub use error::{EngineError, Result};
pub use model::{load_model, Architecture, ChatMessage, GenerationDefaults, LoadedModel, ModelConfig};
pub use moe::MoePolicy;
pub use run::{effective_settings, BackendSpec, RunOutcome, RunPrompt, Session, SettingsOverrides};
