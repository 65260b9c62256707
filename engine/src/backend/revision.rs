//! What dual-path revision needs from a backend besides forwards: a second executor on the same
//! weights for the CPU path, and the pairing of the two paths' steps on a device timeline.
//! Backends without these run revision inline, after the dense forward.

use super::Backend;

/// A backend that can run the CPU path of dual-path revision next to its own (dense) forwards.
pub trait CpuPathHost {
    /// A second, independent executor on the same weights; it runs on its own thread. `None`:
    /// revision runs inline after the dense forward.
    fn cpu_path_executor(&self) -> Option<Box<dyn CpuPathExecutor>>;
    /// Called at a step boundary where the dense path waits for the CPU path (lockstep
    /// schedule): the next dense forward starts after every CPU-path task so far. Without the
    /// call a device timeline lets the two paths overlap across steps.
    fn sync_cpu_path(&self) {}
}

/// The CPU path's executor.
pub trait CpuPathExecutor: Backend {
    /// Called by the decoding loop just before the dense forward of a step starts, so that the
    /// forwards that follow can be paired with that dense forward (timelines, recordings).
    fn begin_step(&mut self) {}
}
