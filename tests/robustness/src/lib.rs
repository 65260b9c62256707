//! Hostile and broken inputs, exercised three ways:
//! - [`fuzz`]: a structured mutation fuzzer over every parser of untrusted model files and
//!   settings (no panic, no abort, allocation bounded by input size, typed errors only);
//! - [`corpus`] + [`runner`]: damaged model folders/files and extreme settings, each with its
//!   expected exit code, run against the real `unmask` binary under a wall-clock and peak-RSS limit;
//! - [`soak`]: many runs in one process with peak RSS sampled (memory must stay flat).

pub mod corpus;
pub mod fuzz;
pub mod runner;
pub mod soak;
