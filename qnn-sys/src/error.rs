//! Typed errors: QNN status codes (low 16 bits of `Qnn_ErrorHandle_t`), the
//! component ranges they belong to, and everything the loader/wrapper can fail on.

use crate::ffi::Qnn_Version_t;
use std::fmt;
use std::path::PathBuf;

/// A QNN status code (`ret & 0xFFFF`), never 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StatusCode(pub u16);

/// API component a status code belongs to, from the documented ranges.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Component {
    /// 1000–1999.
    Common,
    /// 2000–2999.
    Property,
    /// 3000–3999.
    OpPackage,
    /// 4000–4999 (SAVER 4950–4998).
    Backend,
    /// 5000–5999.
    Context,
    /// 6000–6999.
    Graph,
    /// 7000–7999.
    Tensor,
    /// 8000–8999.
    Mem,
    /// 9000–9999.
    Signal,
    /// 10000–10999.
    Error,
    /// 11000–11999.
    Log,
    /// 12000–12999.
    Profile,
    /// 13000–13006.
    PerfInfrastructure,
    /// 14000–14999.
    Device,
    /// 15000–15999.
    GlobalConfig,
    /// 30000–49999.
    System,
    /// 60000+.
    Interface,
    /// Anything else.
    Unknown,
}

/// Documented code names, one row per code.
const KNOWN: &[(u16, &str)] = &[
    (1000, "COMMON_ERROR_NOT_SUPPORTED"),
    (1002, "COMMON_ERROR_MEM_ALLOC"),
    (1003, "COMMON_ERROR_SYSTEM"),
    (1004, "COMMON_ERROR_INVALID_ARGUMENT"),
    (1005, "COMMON_ERROR_OPERATION_NOT_PERMITTED"),
    (1006, "COMMON_ERROR_PLATFORM_NOT_SUPPORTED"),
    (1007, "COMMON_ERROR_SYSTEM_COMMUNICATION"),
    (1008, "COMMON_ERROR_INCOMPATIBLE_BINARIES"),
    (1009, "COMMON_ERROR_LOADING_BINARIES"),
    (1010, "COMMON_ERROR_RESOURCE_UNAVAILABLE"),
    (1011, "COMMON_ERROR_SYSTEM_COMMUNICATION_FATAL"),
    (1100, "COMMON_ERROR_GENERAL"),
    (5000, "CONTEXT_ERROR_INVALID_ARGUMENT"),
    (5001, "CONTEXT_ERROR_DOES_NOT_EXIST"),
    (5002, "CONTEXT_ERROR_INVALID_HANDLE"),
    (5003, "CONTEXT_ERROR_NOT_FINALIZED"),
    (5004, "CONTEXT_ERROR_BINARY_VERSION"),
    (5005, "CONTEXT_ERROR_CREATE_FROM_BINARY"),
    (5006, "CONTEXT_ERROR_GET_BINARY_SIZE_FAILED"),
    (5007, "CONTEXT_ERROR_GET_BINARY_FAILED"),
    (5008, "CONTEXT_ERROR_BINARY_CONFIGURATION"),
    (5009, "CONTEXT_ERROR_SET_PROFILE"),
    (5010, "CONTEXT_ERROR_INVALID_CONFIG"),
    (5011, "CONTEXT_ERROR_BINARY_SUBOPTIMAL"),
    (6000, "GRAPH_ERROR_INVALID_ARGUMENT"),
    (6001, "GRAPH_ERROR_INVALID_HANDLE"),
    (6002, "GRAPH_ERROR_DOES_NOT_EXIST"),
    (6003, "GRAPH_ERROR_INVALID_NAME"),
    (6004, "GRAPH_ERROR_INVALID_TENSOR"),
    (6005, "GRAPH_ERROR_INVALID_OP_CONFIG"),
    (6007, "GRAPH_ERROR_UNCONNECTED_NODE"),
    (6020, "GRAPH_ERROR_CREATE_FAILED"),
    (6021, "GRAPH_ERROR_OPTIMIZATION_FAILED"),
    (6022, "GRAPH_ERROR_FINALIZE_FAILED"),
    (6023, "GRAPH_ERROR_GRAPH_NOT_FINALIZED"),
    (6024, "GRAPH_ERROR_GRAPH_FINALIZED"),
    (6033, "GRAPH_ERROR_TIMED_OUT"),
    (6036, "GRAPH_ERROR_DYNAMIC_TENSOR_SHAPE"),
    (8000, "MEM_ERROR_INVALID_ARGUMENT"),
    (8001, "MEM_ERROR_INVALID_HANDLE"),
    (8002, "MEM_ERROR_ALREADY_REGISTERED"),
    (8003, "MEM_ERROR_MAPPING"),
    (8004, "MEM_ERROR_INVALID_SHAPE"),
    (8005, "MEM_ERROR_UNSUPPORTED_MEMTYPE"),
    (14000, "DEVICE_ERROR_INVALID_HANDLE"),
    (14001, "DEVICE_ERROR_INVALID_CONFIG"),
    (14002, "DEVICE_ERROR_HARDWARE_UNAVAILABLE"),
    (14003, "DEVICE_ERROR_ASSOCIATED_TO_CONTEXT"),
];

impl StatusCode {
    /// Common: not supported.
    pub const NOT_SUPPORTED: Self = Self(1000);
    /// Common: invalid argument.
    pub const INVALID_ARGUMENT: Self = Self(1004);
    /// Common: reloading the backend in-process (never dlclose).
    pub const LOADING_BINARIES: Self = Self(1009);
    /// Context: invalid handle.
    pub const CONTEXT_INVALID_HANDLE: Self = Self(5002);
    /// Context: binary version mismatch.
    pub const CONTEXT_BINARY_VERSION: Self = Self(5004);
    /// Context: create-from-binary failed.
    pub const CONTEXT_CREATE_FROM_BINARY: Self = Self(5005);
    /// Graph: invalid handle.
    pub const GRAPH_INVALID_HANDLE: Self = Self(6001);
    /// Graph: does not exist.
    pub const GRAPH_DOES_NOT_EXIST: Self = Self(6002);
    /// Graph: invalid tensor.
    pub const GRAPH_INVALID_TENSOR: Self = Self(6004);
    /// Graph: invalid op config (unknown op, bad shapes/dtypes).
    pub const GRAPH_INVALID_OP_CONFIG: Self = Self(6005);
    /// Graph: unconnected node.
    pub const GRAPH_UNCONNECTED_NODE: Self = Self(6007);
    /// Graph: finalize failed.
    pub const GRAPH_FINALIZE_FAILED: Self = Self(6022);
    /// Graph: not finalized.
    pub const GRAPH_NOT_FINALIZED: Self = Self(6023);
    /// Graph: already finalized.
    pub const GRAPH_FINALIZED: Self = Self(6024);
    /// Mem: invalid handle.
    pub const MEM_INVALID_HANDLE: Self = Self(8001);
    /// Device: invalid handle.
    pub const DEVICE_INVALID_HANDLE: Self = Self(14000);
    /// Device: invalid config (e.g. missing `libcdsprpc.so` manifest entry).
    pub const DEVICE_INVALID_CONFIG: Self = Self(14001);

    /// Extracts the code from a raw return value; `None` on success.
    pub fn from_raw(ret: u64) -> Option<Self> {
        let code = (ret & crate::ffi::QNN_ERROR_CODE_MASK) as u16;
        (code != 0).then_some(Self(code))
    }

    /// The component range the code falls into.
    pub fn component(self) -> Component {
        match self.0 {
            1000..=1999 => Component::Common,
            2000..=2999 => Component::Property,
            3000..=3999 => Component::OpPackage,
            4000..=4999 => Component::Backend,
            5000..=5999 => Component::Context,
            6000..=6999 => Component::Graph,
            7000..=7999 => Component::Tensor,
            8000..=8999 => Component::Mem,
            9000..=9999 => Component::Signal,
            10000..=10999 => Component::Error,
            11000..=11999 => Component::Log,
            12000..=12999 => Component::Profile,
            13000..=13006 => Component::PerfInfrastructure,
            14000..=14999 => Component::Device,
            15000..=15999 => Component::GlobalConfig,
            30000..=49999 => Component::System,
            60000..=u16::MAX => Component::Interface,
            _ => Component::Unknown,
        }
    }

    /// The documented name, if the code is one we know.
    pub fn name(self) -> Option<&'static str> {
        KNOWN.iter().find(|(c, _)| *c == self.0).map(|(_, n)| *n)
    }

    /// True for SYSTEM_COMMUNICATION (1007): a DSP subsystem restart, recoverable.
    pub fn is_recoverable_ssr(self) -> bool {
        self.0 == 1007
    }
}

impl fmt::Display for StatusCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "{} ({n}, {:?})", self.0, self.component()),
            None => write!(f, "{} ({:?} range)", self.0, self.component()),
        }
    }
}

/// Formats a QNN version as `major.minor.patch`.
pub(crate) fn fmt_version(v: &Qnn_Version_t) -> String {
    format!("{}.{}.{}", v.major, v.minor, v.patch)
}

/// The loader's message without the path it starts with (dlerror repeats the path we show).
fn loader_reason(path: &std::path::Path, e: &libloading::Error) -> String {
    let text = e.to_string();
    let shown = path.display().to_string();
    match text.find(&shown) {
        Some(i) => text[i + shown.len()..].trim_start_matches(':').trim().to_owned(),
        None => text,
    }
}

/// Every failure of the bindings.
#[derive(Debug, thiserror::Error)]
pub enum QnnError {
    /// dlopen failed (missing file, wrong architecture, missing dependency).
    #[error("cannot load QNN library {path}: {}", loader_reason(.path, .source))]
    LibraryLoad {
        /// Path given to the loader.
        path: PathBuf,
        /// Loader error.
        source: libloading::Error,
    },
    /// The library lacks a required symbol.
    #[error("QNN library {path} has no symbol `{symbol}`: {source}")]
    MissingSymbol {
        /// Library path.
        path: PathBuf,
        /// Symbol name.
        symbol: &'static str,
        /// Loader error.
        source: libloading::Error,
    },
    /// `QnnInterface_getProviders` itself returned an error.
    #[error("QnnInterface_getProviders failed: QNN error {0}")]
    ProviderQuery(StatusCode),
    /// The library returned no usable provider.
    #[error("QNN library {path} returned no providers")]
    NoProviders {
        /// Library path.
        path: PathBuf,
    },
    /// Every provider has a core API older than we support.
    #[error("QNN provider core API {found} is older than the minimum supported {required} (QAIRT >= 2.25)")]
    ApiVersionTooOld {
        /// Best version found, `major.minor.patch`.
        found: String,
        /// Minimum required, `major.minor.patch`.
        required: String,
    },
    /// A provider with a different major version (ABI-incompatible).
    #[error("QNN provider core API {found} has an unsupported major version (need {required}.x)")]
    ApiMajorMismatch {
        /// Version found.
        found: String,
        /// Required major.
        required: u32,
    },
    /// The provider left a slot we need NULL.
    #[error("QNN provider does not implement `{0}`")]
    MissingFunction(&'static str),
    /// A QNN call returned an error code.
    #[error("QNN `{function}` failed: error {code}")]
    Api {
        /// Function that failed.
        function: &'static str,
        /// Status code.
        code: StatusCode,
    },
    /// The caller passed something the wrapper rejects before calling QNN.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// Shared-memory allocation failed.
    #[error("shared memory: {0}")]
    SharedMemory(String),
    /// Cache file I/O.
    #[error("context cache I/O at {path}: {source}")]
    CacheIo {
        /// File involved.
        path: PathBuf,
        /// I/O error.
        source: std::io::Error,
    },
    /// Sidecar (de)serialisation.
    #[error("context cache sidecar {path}: {source}")]
    Sidecar {
        /// Sidecar path.
        path: PathBuf,
        /// JSON error.
        source: serde_json::Error,
    },
}

impl QnnError {
    /// The QNN status code, when this error came from a QNN call.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            QnnError::Api { code, .. } | QnnError::ProviderQuery(code) => Some(*code),
            _ => None,
        }
    }
}

/// Result alias.
pub type Result<T, E = QnnError> = std::result::Result<T, E>;

/// Turns a raw QNN return value into `Ok(())` or a typed `Api` error.
pub(crate) fn check(function: &'static str, ret: u64) -> Result<()> {
    match StatusCode::from_raw(ret) {
        None => Ok(()),
        Some(code) => Err(QnnError::Api { function, code }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_low_16_bits_count() {
        assert_eq!(StatusCode::from_raw(0), None);
        assert_eq!(StatusCode::from_raw(0xABCD_0000), None);
        assert_eq!(StatusCode::from_raw(0x1_0000 + 6022), Some(StatusCode(6022)));
    }

    #[test]
    fn ranges_and_names() {
        assert_eq!(StatusCode(6022).component(), Component::Graph);
        assert_eq!(StatusCode(6022).name(), Some("GRAPH_ERROR_FINALIZE_FAILED"));
        assert_eq!(StatusCode(4960).component(), Component::Backend);
        assert_eq!(StatusCode(13006).component(), Component::PerfInfrastructure);
        assert_eq!(StatusCode(13007).component(), Component::Unknown);
        assert_eq!(StatusCode(35000).component(), Component::System);
        assert_eq!(StatusCode(60001).component(), Component::Interface);
        assert_eq!(StatusCode(14001).component(), Component::Device);
        assert!(StatusCode(1007).is_recoverable_ssr());
        let e = check("graphFinalize", 6022).unwrap_err();
        assert!(e.to_string().contains("GRAPH_ERROR_FINALIZE_FAILED"), "{e}");
    }
}
