//! Options of the QNN backend and the counters it keeps.

use std::path::PathBuf;

use qnn_sys::{DeviceConfig, LogLevel, PowerProfile};

use super::buckets::BucketPlan;
use super::quantize::QnnPrecision;

/// How the QNN backend loads, lowers and caches.
#[derive(Debug, Clone)]
pub struct QnnOptions {
    /// QNN backend library: `libQnnHtp.so` on a phone (the mock provider in tests).
    pub library: PathBuf,
    /// Context-binary cache directory (`None` = build every graph in every process).
    pub cache_dir: Option<PathBuf>,
    /// Weight/activation formats.
    pub precision: QnnPrecision,
    /// Shape buckets (`None` = [`BucketPlan::for_config`]).
    pub buckets: Option<BucketPlan>,
    /// Layers per graph (0 = the whole stack in one graph; split large models so each context
    /// stays under ~3 GB of the cDSP session).
    pub layers_per_graph: usize,
    /// HTP SoC/arch selection.
    pub device: DeviceConfig,
    /// Power vote held while the backend lives.
    pub power: Option<PowerProfile>,
    /// QNN log level (routed to `tracing`, target `qnn`).
    pub log_level: LogLevel,
}

impl Default for QnnOptions {
    fn default() -> Self {
        QnnOptions {
            library: PathBuf::from("libQnnHtp.so"),
            cache_dir: None,
            precision: QnnPrecision::default(),
            buckets: None,
            layers_per_graph: 0,
            device: DeviceConfig::default(),
            power: None,
            log_level: LogLevel::Warn,
        }
    }
}

/// Counters of what the backend did (contexts are per bucket × layer group, plus heads).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QnnStats {
    /// Contexts whose graphs were built and finalized here.
    pub contexts_built: usize,
    /// Contexts reloaded from cached binaries.
    pub contexts_loaded: usize,
    /// `graphExecute` calls.
    pub executes: usize,
    /// Of those, grouped expert graphs (one per MoE expert group that received tokens).
    pub moe_launches: usize,
    /// Forwards run.
    pub forwards: usize,
}
