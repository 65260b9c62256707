//! Building the execution backend from the flags, keeping the virtual NPU reachable so that a
//! run's slice of its timeline can be stored with the run.

use std::sync::Arc;

use anyhow::Result;
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::backend::vnpu::{profile::DeviceProfile, VirtualNpu, VnpuConfig};
use unmask_engine::backend::Backend;
use unmask_engine::model::{ModelConfig, Transformer};
use unmask_engine::trace::{LanePower, Timeline};
use unmask_store::StoredTimeline;

use crate::args::{BackendArgs, BackendKind};
use crate::exit::{fail, UNAVAILABLE};

/// The backend of a session.
pub enum AnyBackend {
    /// The virtual NPU (its timeline is stored with each run).
    Vnpu(Box<VirtualNpu>),
    /// CPU or QNN.
    Other(Box<dyn Backend>),
}

/// Where a run's events start in the virtual NPU's timeline.
#[derive(Debug, Clone, Copy)]
pub struct TimelineMark {
    events: usize,
    counters: usize,
}

impl AnyBackend {
    /// Builds the backend the flags ask for.
    pub fn new(kind: &BackendArgs, t: Arc<Transformer>) -> Result<AnyBackend> {
        match kind.backend {
            BackendKind::Cpu => Ok(AnyBackend::Other(Box::new(CpuBackend::new(t)))),
            BackendKind::Vnpu => {
                let profile = DeviceProfile::builtin(&kind.device.to_lowercase()).map_err(|e| {
                    fail(
                        UNAVAILABLE,
                        format!(
                            "unknown device `{}` ({e}; built-in profiles: {})",
                            kind.device,
                            DeviceProfile::list_builtin().join(", ")
                        ),
                    )
                })?;
                Ok(AnyBackend::Vnpu(Box::new(VirtualNpu::new(t, profile, VnpuConfig::default())?)))
            }
            BackendKind::Qnn => {
                use unmask_engine::backend::qnn::{QnnBackend, QnnOptions};
                let opts = QnnOptions {
                    library: kind.qnn_lib.clone(),
                    cache_dir: kind.qnn_cache.clone(),
                    ..QnnOptions::default()
                };
                Ok(AnyBackend::Other(Box::new(QnnBackend::new(t, opts)?)))
            }
        }
    }

    /// The backend as the decoders take it.
    pub fn as_dyn(&mut self) -> &mut dyn Backend {
        match self {
            AnyBackend::Vnpu(b) => b.as_mut(),
            AnyBackend::Other(b) => b.as_mut(),
        }
    }

    /// Backend display name.
    pub fn name(&self) -> String {
        match self {
            AnyBackend::Vnpu(b) => b.name(),
            AnyBackend::Other(b) => b.name(),
        }
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        match self {
            AnyBackend::Vnpu(b) => b.config(),
            AnyBackend::Other(b) => b.config(),
        }
    }

    /// The current end of the timeline (virtual NPU only).
    pub fn timeline_mark(&self) -> Option<TimelineMark> {
        match self {
            AnyBackend::Vnpu(b) => {
                let t = b.timeline();
                Some(TimelineMark { events: t.events.len(), counters: t.counters.len() })
            }
            AnyBackend::Other(_) => None,
        }
    }

    /// The events recorded since `mark`, shifted to start at zero, with the lane powers of the
    /// device profile (what a Perfetto export and the energy figure need).
    pub fn timeline_since(&self, mark: Option<TimelineMark>) -> Option<StoredTimeline> {
        let (AnyBackend::Vnpu(b), Some(mark)) = (self, mark) else { return None };
        let full = b.timeline();
        let mut t = Timeline::new(full.device.clone());
        t.events = full.events.get(mark.events..).unwrap_or_default().to_vec();
        t.counters = full.counters.get(mark.counters..).unwrap_or_default().to_vec();
        // A chat session's later turns start where the previous ones ended: rebase both clocks.
        let sim0 = t.events.iter().map(|e| e.start_sim).fold(f64::INFINITY, f64::min);
        let wall0 = t.events.iter().filter(|e| e.wall_dur > 0.0).map(|e| e.wall_start).fold(f64::INFINITY, f64::min);
        for e in &mut t.events {
            if sim0.is_finite() {
                e.start_sim -= sim0;
            }
            if wall0.is_finite() && e.wall_dur > 0.0 {
                e.wall_start -= wall0;
            }
        }
        if sim0.is_finite() {
            for c in &mut t.counters {
                c.t_sim = (c.t_sim - sim0).max(0.0);
            }
        }
        Some(StoredTimeline { timeline: t, power: Some(LanePower::from_profile(b.profile())) })
    }
}
