//! Timelines of simulated device work: every operator, transfer and CPU task as an event on a lane,
//! energy per lane, and export to the Chrome trace / Perfetto JSON format.
//!
//! Times named `*_sim` are **simulated** device seconds; `wall_*` are measured on this machine.

pub(crate) mod chrome;
pub(crate) mod energy;

pub use chrome::to_chrome_trace;
pub use energy::{EnergyReport, LanePower};

/// Device label of timelines measured on this machine (their `*_sim` times hold measured wall
/// seconds; nothing on them is simulated).
pub const MEASURED_DEVICE: &str = "host CPU (measured wall time, not simulated)";

/// Where an event runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub enum Lane {
    /// The NPU (matrix and vector units, one queue).
    Npu,
    /// CPU core i.
    Cpu(usize),
    /// The DMA engine copying into NPU-visible memory.
    Dma,
    /// Speculative AR decoding's verifier task (the target model; measured on this machine).
    Verifier,
    /// Speculative AR decoding's drafter task (the draft model; measured on this machine).
    Drafter,
}

impl Lane {
    /// Display name of the lane's track.
    pub fn label(self) -> String {
        match self {
            Lane::Npu => "NPU".into(),
            Lane::Cpu(i) => format!("CPU {i}"),
            Lane::Dma => "DMA".into(),
            Lane::Verifier => "Verifier".into(),
            Lane::Drafter => "Drafter".into(),
        }
    }
}

/// One slice of work.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TraceEvent {
    /// Lane it runs on.
    pub lane: Lane,
    /// Operator or task name.
    pub name: String,
    /// Category ("matmul", "attention", "vector", "transfer", "launch", "map", "step").
    pub category: String,
    /// Simulated start, seconds.
    pub start_sim: f64,
    /// Simulated duration, seconds.
    pub dur_sim: f64,
    /// Wall-clock start on this machine, seconds since the timeline began (0 when not measured).
    pub wall_start: f64,
    /// Wall-clock duration, seconds (0 when not measured).
    pub wall_dur: f64,
    /// DRAM bytes the event moves (for energy).
    pub bytes: u64,
}

impl TraceEvent {
    /// Category of events that summarise others (a whole forward); they nest around the operator
    /// events of their lane and are excluded from busy time and energy.
    pub const SUMMARY: &'static str = "step";

    /// Whether this event summarises nested events rather than being work itself.
    pub fn is_summary(&self) -> bool {
        self.category == Self::SUMMARY
    }
}

/// A sampled value (memory footprint, ...) at a simulated time.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CounterSample {
    /// Counter name ("npu_visible_bytes").
    pub name: String,
    /// Simulated time, seconds.
    pub t_sim: f64,
    /// Value.
    pub value: f64,
}

/// All events of one simulated device.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Timeline {
    /// Device display name ("Snapdragon 8 Elite (SM8750)").
    pub device: String,
    /// Events in insertion order.
    pub events: Vec<TraceEvent>,
    /// Counter samples in insertion order.
    pub counters: Vec<CounterSample>,
}

impl Timeline {
    /// An empty timeline for `device`.
    pub fn new(device: impl Into<String>) -> Self {
        Timeline { device: device.into(), events: Vec::new(), counters: Vec::new() }
    }
    /// Appends an event.
    pub fn push(&mut self, e: TraceEvent) {
        self.events.push(e);
    }
    /// Appends a counter sample.
    pub fn push_counter(&mut self, name: &str, t_sim: f64, value: f64) {
        self.counters.push(CounterSample { name: name.to_owned(), t_sim, value });
    }
    /// Latest simulated end time of any event.
    pub fn end_sim(&self) -> f64 {
        self.events.iter().map(|e| e.start_sim + e.dur_sim).fold(0.0, f64::max)
    }
    /// Simulated busy seconds of a lane.
    pub fn busy_s(&self, lane: Lane) -> f64 {
        self.events.iter().filter(|e| e.lane == lane && !e.is_summary()).map(|e| e.dur_sim).sum()
    }
    /// Lanes that carry events, sorted.
    pub fn lanes(&self) -> Vec<Lane> {
        let mut l: Vec<Lane> = self.events.iter().map(|e| e.lane).collect();
        l.sort();
        l.dedup();
        l
    }
    /// Energy per lane over the whole timeline.
    pub fn energy(&self, power: &LanePower) -> EnergyReport {
        energy::energy_of(self, power)
    }
}
