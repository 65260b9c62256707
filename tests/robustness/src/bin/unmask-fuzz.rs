//! Runs every fuzz target with the counting allocator installed (so allocation bounds are
//! checked) and prints the report as JSON on stdout: what `bench/run robustness` records.
//! Usage: `unmask-fuzz [SECONDS_PER_TARGET]` (default: `UNMASK_FUZZ_SECS`, else 4).

use std::process::ExitCode;
use std::time::Duration;

use unmask_robustness::fuzz::{self, FuzzConfig, TrackingAlloc};

#[global_allocator]
static ALLOC: TrackingAlloc = TrackingAlloc;

fn main() -> ExitCode {
    let mut cfg = FuzzConfig::from_env();
    if let Some(secs) = std::env::args().nth(1) {
        match secs.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => cfg.time_per_target = Duration::from_secs_f64(s),
            _ => {
                eprintln!("error: seconds per target must be a positive number, not `{secs}`");
                return ExitCode::from(2);
            }
        }
    }
    match fuzz::run_all(&cfg) {
        Ok(report) => {
            eprintln!("{}", report.summary());
            match serde_json::to_string(&report) {
                Ok(json) => {
                    println!("{json}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("error: encoding the report: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}
