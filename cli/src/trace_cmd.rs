//! `unmask trace export RUN --perfetto out.json`: a run as a Chrome trace / Perfetto JSON, from
//! its stored vNPU timeline, or (CPU and QNN runs) from its step trace as measured events.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::Subcommand;
use serde_json::{json, Value};
use unmask_engine::decode::StepFrame;
use unmask_engine::trace::{to_chrome_trace, Lane, LanePower, Timeline, TraceEvent, MEASURED_DEVICE};
use unmask_store::StoreError;

use crate::data::{self, Data};
use crate::exit::{fail, UNAVAILABLE};

/// What `unmask trace` does.
#[derive(Subcommand, Debug)]
pub enum TraceAction {
    /// Write a run's trace as Chrome trace JSON (open it in ui.perfetto.dev or chrome://tracing).
    Export {
        /// Run id.
        run: i64,
        /// Output file (`-` for standard output).
        #[arg(long, value_name = "OUT.json")]
        perfetto: PathBuf,
    },
}

/// Runs a `trace` subcommand.
pub fn run(action: TraceAction, data_dir: Option<&Path>) -> Result<()> {
    let data = Data::open(&data::data_dir(data_dir)?)?;
    match action {
        TraceAction::Export { run, perfetto } => export(&data, run, &perfetto),
    }
}

fn export(data: &Data, id: i64, out: &Path) -> Result<()> {
    let store = data.store();
    let run = match data.block_on(store.run_detail(id)) {
        Ok(r) => r,
        Err(StoreError::NotFound { .. }) => return Err(fail(UNAVAILABLE, format!("no run {id} in the store"))),
        Err(e) => return Err(e.into()),
    };
    let (doc, what) = match data.block_on(store.run_timeline(id))? {
        // Measured timelines (a speculative run's drafter and verifier, app CPU runs) say so.
        Some(t) if t.timeline.device == MEASURED_DEVICE => {
            let n = t.timeline.events.len();
            (measured_doc(&t.timeline, id, None), format!("{n} measured events"))
        }
        Some(t) => {
            let power = t.power.unwrap_or_else(zero_power);
            let n = t.timeline.events.len();
            (to_chrome_trace(&t.timeline, &power), format!("{n} simulated events"))
        }
        None => {
            let frames = data.block_on(store.run_trace(id))?;
            if frames.is_empty() {
                return Err(fail(UNAVAILABLE, format!("run {id} has neither a timeline nor a step trace")));
            }
            let t = measured_timeline(&format!("{} run {id}", run.backend), &frames);
            (measured_doc(&t, id, Some("decode steps")), format!("{} measured steps", frames.len()))
        }
    };
    let text = serde_json::to_string(&doc)?;
    if out == Path::new("-") {
        println!("{text}");
    } else {
        std::fs::write(out, text + "\n").with_context(|| format!("writing {}", out.display()))?;
        eprintln!("wrote {} ({what})", out.display());
    }
    Ok(())
}

fn zero_power() -> LanePower {
    LanePower { npu_active_w: 0.0, npu_idle_w: 0.0, cpu_core_w: vec![0.0], dma_w: 0.0, dram_j_per_byte: 0.0 }
}

/// Steps back to back on one host lane, at their measured durations, plus the committed count.
pub fn measured_timeline(device: &str, frames: &[StepFrame]) -> Timeline {
    let mut t = Timeline::new(device);
    let mut at = 0.0;
    for f in frames {
        t.push(TraceEvent {
            lane: Lane::Cpu(0),
            name: format!("denoise_step {} (block {}–{}, {} tokens)", f.step, f.block.0, f.block.1, f.forward_tokens),
            category: TraceEvent::SUMMARY.into(),
            start_sim: at,
            dur_sim: f.step_wall_s,
            wall_start: 0.0,
            wall_dur: 0.0,
            bytes: 0,
        });
        t.push_counter("committed tokens", at + f.step_wall_s, f.committed_total as f64);
        at += f.step_wall_s;
    }
    t
}

/// The engine's export of a measured timeline, relabelled: its times are wall time, not simulated
/// (`thread`: one name for its single lane; `None` keeps the lanes' own names).
fn measured_doc(t: &Timeline, id: i64, thread: Option<&str>) -> Value {
    let mut doc = to_chrome_trace(t, &zero_power());
    if let Some(events) = doc.get_mut("traceEvents").and_then(Value::as_array_mut) {
        // No device was simulated: drop the (zero) power counter and name the process honestly.
        events.retain(|e| e["name"] != "power (simulated)");
        for e in events.iter_mut() {
            if e["ph"] == "M" && e["name"] == "process_name" {
                e["args"]["name"] = json!(format!("{} (measured wall time)", t.device));
            }
            if let (Some(name), true) = (thread, e["ph"] == "M" && e["name"] == "thread_name") {
                e["args"]["name"] = json!(name);
            }
        }
    }
    doc["otherData"] = json!({"run_id": id, "time_base": "measured wall time on this machine"});
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measured_steps_are_back_to_back_and_relabelled() {
        let frame = |step, wall| StepFrame {
            step,
            block: (10, 18),
            forward_tokens: 8,
            changes: Vec::new(),
            step_wall_s: wall,
            simulated_s: None,
            committed_total: step + 1,
        };
        let t = measured_timeline("cpu", &[frame(0, 0.002), frame(1, 0.003)]);
        assert_eq!(t.events.len(), 2);
        assert!((t.events[1].start_sim - 0.002).abs() < 1e-12);
        let doc = measured_doc(&t, 7, Some("decode steps"));
        let ev = doc["traceEvents"].as_array().unwrap();
        let slices: Vec<&Value> = ev.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), 2);
        assert_eq!(slices[1]["ts"].as_f64(), Some(2000.0));
        assert_eq!(slices[1]["dur"].as_f64(), Some(3000.0));
        assert!(ev.iter().all(|e| e["name"] != "power (simulated)"));
        assert!(ev.iter().any(|e| e["name"] == "process_name" && e["args"]["name"] == "cpu (measured wall time)"));
    }
}
