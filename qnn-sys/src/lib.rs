//! Runtime-loaded bindings to Qualcomm's QNN C API, plus a safe wrapper.
//!
//! Nothing links against the QNN SDK: [`QnnLibrary::load`] dlopens a backend
//! (`libQnnHtp.so` on a phone, the `qnn-mock` provider in tests), queries
//! `QnnInterface_getProviders` and applies the version gate. The wrapper owns
//! backend → device → context → graph lifetimes and frees them in reverse.
//!
//! Layouts come from the documented ABI facts (`shared/reference/npu-qnn.md`) and
//! are checked at compile time with `size_of`/`offset_of!` assertions.

pub mod cache;
pub mod error;
pub mod ffi;
pub mod graph;
pub mod handles;
pub mod loader;
pub mod log;
pub mod mem;
pub mod ops;
pub mod power;
pub mod tensor;

pub use cache::{fingerprint, CacheOutcome, CachedContext, ContextCache, Sidecar};
pub use error::{Component, QnnError, Result, StatusCode};
pub use graph::{Binding, BindingMut, Graph, GraphBuilder, GraphMeta, GraphOptions, Op, ParamValue, TensorId};
pub use handles::{Backend, Context, Device, DeviceConfig};
pub use loader::{LoadOptions, QnnLibrary, MIN_CORE_API};
pub use log::LogLevel;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use mem::MemfdAllocator;
pub use mem::{RegisteredBuffer, RpcMemAllocator, SharedBuffer, SharedMemoryAllocator};
pub use power::{PowerProfile, PowerVote};
pub use tensor::{DType, Quant, TensorKind, TensorMeta, TensorSpec};
