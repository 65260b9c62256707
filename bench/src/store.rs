//! Suite `store`: cost of persisting step traces. Per-step write cost with one
//! transaction per step vs one per batch of 32, the cost `RunRecorder::record` adds on the
//! decoding thread, and the overhead of recording on real decodes of the embedded model
//! (plain and recorded decodes alternate, same prompts, several repetitions).

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::backend::cpu::CpuBackend;
use unmask_engine::decode::{generate, CancelFlag, DecodeSettings, StepFrame, TokenChange, TokenState};
use unmask_engine::model::load_model;
use unmask_store::{NewRun, RunOutcome, Store, TraceBatching};

use crate::tasks;

const BATCH: usize = 32;

/// A frame like a threshold decode's: a few commits in a 32-token block.
fn synthetic_frame(i: usize) -> StepFrame {
    let start = 64 + 32 * (i / 16);
    StepFrame {
        step: i,
        block: (start, start + 32),
        forward_tokens: 96,
        changes: (0..3)
            .map(|k| TokenChange {
                pos: start + (i * 5 + k * 11) % 32,
                token: 1000 + ((i * 31 + k * 7) % 5000) as u32,
                confidence: 0.6 + (k as f32) * 0.1,
                state: TokenState::Visible,
                speculative: false,
                revised: false,
                rejected_draft: None,
            })
            .collect(),
        step_wall_s: 0.004,
        simulated_s: None,
        committed_total: 3 * (i % 16 + 1),
    }
}

fn new_run(name: &str) -> NewRun {
    NewRun {
        model_id: None,
        model_name: name.into(),
        backend: unmask_engine::run::BackendSpec::Cpu,
        prompt: "bench".into(),
        settings: DecodeSettings::default(),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub fn run(quick: bool) -> Result<Value> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    rt.block_on(run_async(quick))
}

async fn run_async(quick: bool) -> Result<Value> {
    let data = tempfile::tempdir()?;
    let store = Store::open(data.path()).await?;
    let steps = if quick { 400 } else { 2000 };
    let reps = if quick { 3 } else { 5 };
    let frames: Vec<StepFrame> = (0..steps).map(synthetic_frame).collect();

    // 1. Write cost per step, awaited, on the store's real settings (WAL, synchronous=NORMAL).
    let (mut unbatched, mut batched, mut record_only) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..reps {
        eprintln!("[store] trace writes, repetition {}/{reps}", rep + 1);
        let rec = store.start_run(new_run("unbatched")).await?;
        let t = Instant::now();
        for f in &frames {
            store.append_trace(rec.id(), std::slice::from_ref(f)).await?;
        }
        unbatched.push(t.elapsed().as_secs_f64() / steps as f64);
        rec.finish(RunOutcome::default()).await?;

        let rec = store.start_run(new_run("batched")).await?;
        let t = Instant::now();
        for chunk in frames.chunks(BATCH) {
            store.append_trace(rec.id(), chunk).await?;
        }
        batched.push(t.elapsed().as_secs_f64() / steps as f64);
        rec.finish(RunOutcome::default()).await?;

        // What the decoding thread pays: `record` only (the batches are written by the
        // recorder's background task).
        let mut rec = store.start_run(new_run("recorder")).await?;
        let t = Instant::now();
        for f in &frames {
            rec.record(f);
        }
        record_only.push(t.elapsed().as_secs_f64() / steps as f64);
        let done = rec.finish(RunOutcome::default()).await?;
        anyhow::ensure!(done.trace_frames == steps as u64, "recorder stored {} of {steps} frames", done.trace_frames);
    }
    let (unbatched_s, batched_s, record_s) =
        (median(unbatched.clone()), median(batched.clone()), median(record_only.clone()));

    // 2. Real decodes of the embedded model, with and without recording (a fresh store, so
    // its trace bytes are those of real frames).
    let data = tempfile::tempdir()?;
    let store = Store::open(data.path()).await?;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada");
    let m = load_model(&dir)?;
    let model = Arc::new(m.transformer);
    let per_task = if quick { 1 } else { 2 };
    let examples = tasks::load(&tasks::test_split(), per_task)?;
    let prompts: Vec<Vec<u32>> = examples.iter().map(|e| m.tokenizer.encode(&e.prompt)).collect::<Result<_, _>>()?;
    let settings = DecodeSettings { gen_length: 32, block_length: 8, steps: 32, ..Default::default() };
    let decode_reps = if quick { 2 } else { 4 };
    let (mut plain_s, mut recorded_s, mut recorded_e2e_s, mut callback_s) = (0.0, 0.0, 0.0, 0.0);
    let mut frames_recorded = 0u64;
    let (mut ratios, mut aa_ratios, mut discard_ratios) = (Vec::new(), Vec::new(), Vec::new());
    let mut pairs = Vec::new();
    for rep in 0..decode_reps {
        eprintln!(
            "[store] decodes with and without recording, repetition {}/{decode_reps} ({} prompts)",
            rep + 1,
            prompts.len()
        );
        for (pi, ids) in prompts.iter().enumerate() {
            // Each prompt runs: plain (the baseline), recorded, plain again (an A/A control that
            // shows the noise floor) and plain with a callback that ignores frames; the order
            // rotates per prompt so drift in machine load hits every variant alike.
            let (mut p, mut p2, mut pd) = (0.0, 0.0, 0.0);
            let mut r = Recorded::default();
            for slot in 0..4 {
                match (slot + rep + pi) % 4 {
                    0 => p = plain_decode(model.clone(), ids.clone(), settings.clone(), true).await?,
                    1 => r = recorded_decode(&store, model.clone(), ids.clone(), settings.clone()).await?,
                    2 => p2 = plain_decode(model.clone(), ids.clone(), settings.clone(), true).await?,
                    _ => pd = plain_decode(model.clone(), ids.clone(), settings.clone(), false).await?,
                }
            }
            plain_s += p;
            recorded_s += r.decode_s;
            recorded_e2e_s += r.end_to_end_s;
            callback_s += r.callback_s;
            frames_recorded += r.frames;
            ratios.push(r.decode_s / p);
            aa_ratios.push(p2 / p);
            discard_ratios.push(pd / p);
            pairs.push(
                json!({"prompt": pi, "rep": rep, "plain_s": p, "plain_again_s": p2, "plain_ignoring_frames_s": pd,
                "recorded_s": r.decode_s, "recorded_end_to_end_s": r.end_to_end_s, "record_callback_s": r.callback_s}),
            );
        }
    }
    let usage = store.disk_usage().await?;
    let trace_bytes_per_frame = usage.trace_bytes as f64 / frames_recorded.max(1) as f64;
    // The paired wall-clock ratio is what a user sees, but on a shared machine its noise is far
    // larger than the effect; the time spent inside the recorder on the decoding thread and the
    // writer's database time (run on other threads) bound the cost directly.
    let overhead = median(ratios.clone()) - 1.0;
    let writer_s = batched_s * frames_recorded as f64;
    Ok(json!({
        "headline": {
            "unbatched_us_per_step": unbatched_s * 1e6,
            "batched_us_per_step": batched_s * 1e6,
            "batching_speedup": unbatched_s / batched_s,
            "record_call_us_per_step": record_s * 1e6,
            "decode_overhead_fraction": overhead,
            "aa_control_fraction": median(aa_ratios.clone()) - 1.0,
            "ignoring_frames_vs_keeping_fraction": median(discard_ratios.clone()) - 1.0,
            "record_callback_fraction_of_decode": callback_s / recorded_s,
            "writer_db_time_fraction_of_decode": writer_s / recorded_s,
            "trace_bytes_per_frame": trace_bytes_per_frame,
        },
        "writes": {
            "steps_per_repetition": steps,
            "batch_frames": BATCH,
            "changes_per_frame": 3,
            "unbatched_s_per_step": unbatched,
            "batched_s_per_step": batched,
            "record_call_s_per_step": record_only,
            "database": "WAL, synchronous=NORMAL (the store's settings)",
        },
        "decode": {
            "model": "tiny-llada",
            "settings": settings,
            "prompts": prompts.len(),
            "repetitions": decode_reps,
            "plain_total_s": plain_s,
            "recorded_total_s": recorded_s,
            "recorded_end_to_end_total_s": recorded_e2e_s,
            "record_callback_total_s": callback_s,
            "total_ratio_minus_one": recorded_s / plain_s - 1.0,
            "end_to_end_total_ratio_minus_one": recorded_e2e_s / plain_s - 1.0,
            "recorded_over_plain_p10_p50_p90": percentiles(ratios),
            "plain_again_over_plain_p10_p50_p90": percentiles(aa_ratios.clone()),
            "ignoring_frames_over_plain_p10_p50_p90": percentiles(discard_ratios.clone()),
            "frames_recorded": frames_recorded,
            "batching": "default (32 frames or 250 ms)",
            "pairs": pairs,
        },
        "note": "Plain decodes keep a copy of each frame in their callback (as a UI or the CLI's live view does). decode_overhead_fraction = median over prompts x repetitions of recorded decode wall / plain decode wall, minus 1; ignoring_frames_vs_keeping_fraction is the same for a plain decode whose callback ignores frames (it isolates the cost of copying frames from the store's own cost); aa_control_fraction is the same statistic for plain vs plain again (the noise floor); single pairs on a shared machine vary widely (see the p10/p50/p90 spreads). record_callback_fraction_of_decode = time inside RunRecorder::record on the decoding thread / recorded decode wall. writer_db_time_fraction_of_decode = batched write cost per step x frames / recorded decode wall (work done on the writer's thread). End-to-end totals add start_run and finish (the final commit).",
    }))
}

/// A decode without the store. `keep`: the callback keeps a copy of every frame (what a UI or
/// the CLI's live view does anyway); otherwise it ignores them.
async fn plain_decode(
    model: Arc<unmask_engine::model::Transformer>,
    ids: Vec<u32>,
    s: DecodeSettings,
    keep: bool,
) -> Result<f64> {
    tokio::task::spawn_blocking(move || -> Result<f64> {
        let mut backend = CpuBackend::new(model);
        let mut kept = Vec::new();
        let t = Instant::now();
        generate(&mut backend, &ids, &s, &CancelFlag::new(), |f| {
            if keep {
                kept.push(f.clone());
            }
            ControlFlow::Continue(())
        })?;
        Ok(t.elapsed().as_secs_f64())
    })
    .await?
}

#[derive(Default)]
struct Recorded {
    decode_s: f64,
    /// Including start_run and finish.
    end_to_end_s: f64,
    /// Time spent inside `record` on the decoding thread.
    callback_s: f64,
    frames: u64,
}

async fn recorded_decode(
    store: &Store,
    model: Arc<unmask_engine::model::Transformer>,
    ids: Vec<u32>,
    s: DecodeSettings,
) -> Result<Recorded> {
    let t0 = Instant::now();
    let rec = store.start_run_with(new_run("tiny-llada"), TraceBatching::default()).await?;
    let (rec, out, decode_s, callback_s) = tokio::task::spawn_blocking(move || -> Result<_> {
        let mut rec = rec;
        let mut backend = CpuBackend::new(model);
        let mut in_record = 0.0;
        let t = Instant::now();
        let out = generate(&mut backend, &ids, &s, &CancelFlag::new(), |f| {
            let c = Instant::now();
            rec.record(f);
            in_record += c.elapsed().as_secs_f64();
            ControlFlow::Continue(())
        })?;
        Ok((rec, out, t.elapsed().as_secs_f64(), in_record))
    })
    .await??;
    let done = rec.finish(RunOutcome::from_decode(&out, "")).await?;
    Ok(Recorded { decode_s, end_to_end_s: t0.elapsed().as_secs_f64(), callback_s, frames: done.trace_frames })
}

fn percentiles(mut v: Vec<f64>) -> [f64; 3] {
    v.sort_by(|a, b| a.total_cmp(b));
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    [at(0.1), at(0.5), at(0.9)]
}
