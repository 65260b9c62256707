//! The backend a [`BackendSpec`] asks for, built once per session, keeping the virtual NPU
//! reachable so that each run's slice of its timeline can be recorded with the run.

use std::sync::Arc;

use super::backend_spec::BackendSpec;
use crate::backend::cpu::CpuBackend;
use crate::backend::vnpu::{profile::DeviceProfile, VirtualNpu, VnpuConfig};
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::model::{ModelConfig, Transformer};
use crate::trace::{LanePower, Timeline};

/// A built backend.
pub enum Executor {
    /// The virtual NPU (its timeline is recorded with each run).
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

/// A run's slice of a device timeline, rebased to start at zero, with the profile's lane powers.
#[derive(Debug, Clone)]
pub struct RunTimeline {
    pub timeline: Timeline,
    pub power: LanePower,
}

impl Executor {
    /// Builds the backend `spec` names for `model`.
    pub fn build(spec: &BackendSpec, model: Arc<Transformer>) -> Result<Executor> {
        match spec {
            BackendSpec::Cpu => Ok(Executor::Other(Box::new(CpuBackend::new(model)))),
            BackendSpec::Vnpu { device } => {
                // A device that does not exist is an unusable backend, like a missing QNN library.
                let profile = DeviceProfile::builtin(&device.to_lowercase()).map_err(|_| EngineError::Backend {
                    backend: "vnpu".into(),
                    reason: format!(
                        "unknown device `{device}` (built-in profiles: {})",
                        DeviceProfile::list_builtin().join(", ")
                    ),
                })?;
                Ok(Executor::Vnpu(Box::new(VirtualNpu::new(model, profile, VnpuConfig::default())?)))
            }
            BackendSpec::Qnn { library, cache_dir } => {
                use crate::backend::qnn::{QnnBackend, QnnOptions};
                let opts = QnnOptions { library: library.clone(), cache_dir: cache_dir.clone(), ..QnnOptions::default() };
                Ok(Executor::Other(Box::new(QnnBackend::new(model, opts)?)))
            }
        }
    }

    /// The backend as the decoders take it.
    pub fn as_dyn(&mut self) -> &mut dyn Backend {
        match self {
            Executor::Vnpu(b) => b.as_mut(),
            Executor::Other(b) => b.as_mut(),
        }
    }

    /// Backend display name.
    pub fn name(&self) -> String {
        match self {
            Executor::Vnpu(b) => b.name(),
            Executor::Other(b) => b.name(),
        }
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        match self {
            Executor::Vnpu(b) => b.config(),
            Executor::Other(b) => b.config(),
        }
    }

    /// The current end of the timeline (virtual NPU only).
    pub fn timeline_mark(&self) -> Option<TimelineMark> {
        match self {
            Executor::Vnpu(b) => {
                let (events, counters) = b.timeline_len();
                Some(TimelineMark { events, counters })
            }
            Executor::Other(_) => None,
        }
    }

    /// The events recorded since `mark`, shifted to start at zero, with the lane powers of the
    /// device profile (what a Perfetto export and the energy figure need).
    pub fn timeline_since(&self, mark: Option<TimelineMark>) -> Option<RunTimeline> {
        let (Executor::Vnpu(b), Some(mark)) = (self, mark) else { return None };
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
        Some(RunTimeline { timeline: t, power: LanePower::from_profile(b.profile()) })
    }
}
