//! Mixture-of-experts execution shaped for static-graph accelerators (NPUs).
//!
//! A router picks `top_k` experts per token at run time, so the rows each expert sees change from
//! forward to forward. NPUs compile graphs for fixed shapes and pay a fixed cost per launch, so
//! this module turns dynamic routing into static work:
//! - [`routing`]: the router's softmax/top-k decision, per expert;
//! - [`calibration`]: offline per-layer, per-expert token counts by prompt-length bucket;
//! - [`capacity`]: a small ladder of static capacity tiers per expert, tokens over capacity dropped
//!   lowest-saliency first;
//! - [`grouped`]: experts gathered into one unified, padded buffer per group and run as one launch;
//! - [`residency`]: which groups stay on the NPU and which run on the CPU concurrently;
//! - [`ffn`]: the MoE feed-forward under each [`MoePolicy`], as the transformer calls it;
//! - [`shape`]: published MoE model shapes for simulations that need no weights.

pub(crate) mod calibration;
pub(crate) mod capacity;
pub mod ffn;
pub(crate) mod grouped;
pub(crate) mod residency;
pub(crate) mod routing;
pub(crate) mod shape;

use serde::{Deserialize, Serialize};

use crate::kernels::linear::Linear;

pub use calibration::MoeCalibration;
pub use capacity::{CapacityPlan, CapacityTiers};
pub use ffn::{MoeExecution, MoeLayer, MoeStats};
pub use grouped::ExpertGroups;
pub use residency::{DispatchCosts, GroupCost, Placement, ResidencyCostModel, ResidencyPlan};
pub use routing::Routing;
pub use shape::MoeShape;

/// One routed expert: a SwiGLU MLP `down(silu(gate(x)) * up(x))`.
#[derive(Debug, Clone)]
pub struct Expert {
    pub gate: Linear,
    pub up: Linear,
    pub down: Linear,
}

/// How MoE feed-forward layers execute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[cfg_attr(feature = "specta", derive(specta::Type))]
pub enum MoePolicy {
    /// Dynamic shapes: each expert runs on exactly its routed rows, all experts in one parallel
    /// region. Exact (no token is dropped); what a CPU does best.
    #[default]
    Cpu,
    /// Naive accelerator offload: one launch per expert, one after another, each sized to the rows
    /// routed to it. Exact; the per-launch cost is paid once per active expert.
    Naive,
    /// Static capacity tiers + grouped execution: every expert has a fixed capacity for the prompt
    /// length's bucket, tokens beyond it are dropped by saliency, and experts run in groups, one
    /// launch per group over a padded unified buffer.
    StaticTiers,
}

/// The MoE part of a run's settings (recorded with the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoeSettings {
    pub policy: MoePolicy,
    /// When capacity drops some of a token's experts, scale its remaining gate weights back to
    /// the original total (`false`: keep them as routed).
    #[serde(default = "default_renormalise")]
    pub renormalise_dropped: bool,
    /// static-tiers on a simulated device: load-aware residency, i.e. cold expert groups run on a CPU
    /// lane (a second thread) concurrently with the NPU's grouped launches, placed per layer by the
    /// device's cost of a launch, the merge and each unit's compute. Backends without a device cost
    /// model launch every group.
    #[serde(default = "default_cpu_lane")]
    pub cpu_lane: bool,
}

fn default_renormalise() -> bool {
    MoeSettings::default().renormalise_dropped
}

fn default_cpu_lane() -> bool {
    MoeSettings::default().cpu_lane
}

impl Default for MoeSettings {
    fn default() -> Self {
        MoeSettings { policy: MoePolicy::Cpu, renormalise_dropped: true, cpu_lane: true }
    }
}

// The one spelling of flags, settings and records; `staticTiers` is how older app builds sent it.
crate::decode::settings::spelled!(MoePolicy { Cpu => "cpu", Naive => "naive", StaticTiers => "static-tiers" | "staticTiers" });
