//! The one denoising loop of every dLLM policy: blocks, forwards (through a pluggable window
//! policy: the reference block windows with the Fast-dLLM caches, or the NPU-aware sliding
//! windows), scoring, committing, streaming, cancellation and early stop. The NPU-aware features
//! plug in as step hooks ([`super::dual_path`]): speculative drafts add logit rows and accepted
//! drafts, the CPU path re-checks committed tokens beside the dense forward. Without hooks the
//! loop is the reference decoder.

use std::ops::ControlFlow;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::canvas::{Canvas, TokenState};
use super::dual_path::{CpuPath, DualPathStats, Speculation, WindowRecord};
use super::frame::{CancelFlag, StepFrame};
use super::output::{DecodeOutput, StopReason};
use super::policy::{Candidate, Scorer, TransferPolicy};
use super::settings::DecodeSettings;
use super::window::{BlockWindows, SlidingWindows, StepWindow, WindowPolicy};
use crate::backend::{Backend, ForwardStats};
use crate::error::{EngineError, Result};
use crate::model::{ForwardRequest, KvMode};

/// Callback receiving each frame; `Break` stops decoding (result `StopReason::CallerStopped`).
pub type FrameSink<'a> = dyn FnMut(&StepFrame) -> ControlFlow<()> + 'a;

/// Logits of the requested rows as f64, one `Vec` per row.
type Rows = Vec<Vec<f64>>;

/// Runs the loop with `scorer` and `policy` (settings must already be validated for the model).
pub fn run(
    backend: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    scorer: &mut dyn Scorer,
    policy: &mut dyn TransferPolicy,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
) -> Result<DecodeOutput> {
    let sliding = super::dual_path::is_enabled(settings);
    run_loop(backend, prompt, settings, sliding, scorer, policy, cancel, on_frame).map(|(out, _)| out)
}

/// The loop, returning the counters of the NPU-aware hooks too. `sliding` picks the NPU-aware
/// windows (which the speculative and revision hooks need) over the reference block windows.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_loop(
    backend: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    sliding: bool,
    scorer: &mut dyn Scorer,
    policy: &mut dyn TransferPolicy,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
) -> Result<(DecodeOutput, DualPathStats)> {
    let cfg = backend.config().clone();
    let mask = cfg
        .mask_token_id
        .ok_or_else(|| EngineError::InvalidRequest("diffusion decoding needs a mask token id".into()))?;
    let stop_ids: Vec<u32> = [settings.eos_id(&cfg), settings.eot_id(&cfg)].into_iter().flatten().collect();
    let t0 = Instant::now();
    let mut canvas = Canvas::new(prompt, settings.gen_length, mask);
    let len = canvas.len();
    let positions: Vec<usize> = (0..len).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    // The NPU-aware features run on sliding windows; the reference on Fast-dLLM's block windows.
    let npu_aware = sliding || super::dual_path::is_enabled(settings);
    let mut windows: Box<dyn WindowPolicy> = if npu_aware {
        Box::new(SlidingWindows::new(backend, settings, len))
    } else {
        Box::new(BlockWindows::new(backend, settings.cache, len))
    };
    let mut spec = settings.speculative.as_ref().map(|s| Speculation::new(s.clone(), settings.seed, len));
    let mut cpu_path = settings.revision.as_ref().map(|r| CpuPath::new(r.clone(), backend, len));
    let mut stats = DualPathStats {
        dense_thread: Some(std::thread::current().id()),
        concurrent: cpu_path.as_ref().is_some_and(CpuPath::concurrent),
        lockstep: cpu_path.as_ref().is_some_and(CpuPath::lockstep),
        threaded: cpu_path.as_ref().is_some_and(CpuPath::threaded),
        buckets: windows.buckets().to_vec(),
        ..Default::default()
    };
    let mut counters = Counters::default();
    let mut stop_reason = StopReason::Completed;
    // A policy may decline a step (zero transfers); it may not decline forever.
    let max_skips = settings.steps.max(1) + 1;
    // Forwards a block normally needs at most (fixed schedule, or one commit per threshold step).
    let planned_steps = settings.steps_per_block().max(settings.block_length);
    let ends_in_stop = |canvas: &Canvas, block: (usize, usize)| {
        settings.early_stop_eos && block.1 > block.0 && stop_ids.contains(&canvas.tokens()[block.1 - 1])
    };

    'blocks: for b in 0..settings.num_blocks() {
        let block = (prompt.len() + b * settings.block_length, prompt.len() + (b + 1) * settings.block_length);
        let mut masked = canvas.masked_in(block.0, block.1);
        policy.begin_block(masked.len());
        if let Some(sp) = spec.as_mut() {
            sp.begin_block(block);
        }
        let (mut step_in_block, mut skips) = (0usize, 0usize);
        while let Some(&first_masked) = masked.first() {
            cancel.check()?;
            if !policy.next_step(masked.len()) {
                skips += 1;
                if skips > max_skips {
                    return Err(EngineError::InvalidRequest(format!("policy {} made no progress", policy.name())));
                }
                continue;
            }
            let step_t0 = Instant::now();
            let step = counters.steps;
            let w: StepWindow = windows.plan(step_in_block, block, len, &masked);
            let draft_pos = spec.as_ref().map(|sp| sp.positions(&canvas, block, &w)).unwrap_or_default();
            let all_rows: Vec<usize> = masked.iter().chain(&draft_pos).copied().collect();
            let rows = logit_rows(&all_rows, w.start, cfg.shift_logits)?;
            stats.lm_head_rows += rows.len();
            stats.lm_head_window_rows += w.end - w.start;
            let job = cpu_path.as_mut().and_then(|c| c.job(&canvas, block, windows.kv(), &w, &mut stats));
            let req = ForwardRequest {
                tokens: &canvas.tokens()[w.start..w.end],
                positions: &positions[w.start..w.end],
                logits_rows: &rows,
                kv: w.kv,
            };
            // The dense forward, with the CPU path's job beside it when there is one.
            let (dense, outcome) = match cpu_path.as_mut() {
                Some(c) => c.forward_beside(job, step, backend, &mut |b| b.forward(&req, windows.kv_mut())),
                None => (backend.forward(&req, windows.kv_mut()), Ok(None)),
            };
            let (out, fstats) = dense?;
            let outcome = outcome?;
            windows.after_forward(&w, block, first_masked);
            counters.add(&fstats);
            let mut logits = to_rows(&out.logits, out.vocab, rows.len(), backend.name())?;
            if settings.cfg_scale > 0.0 {
                let un = unconditional_rows(backend, &canvas, &w, &positions, &rows)?;
                counters.add(&un.1);
                apply_cfg(&mut logits, &un.0, settings.cfg_scale);
            }
            let mut step_sim = counters.step_simulated.take();
            if let Some(c) = cpu_path.as_mut() {
                step_sim = c.after_forward(outcome, step_sim, step, backend, &mut stats);
                counters.forwards += c.take_dense_forwards();
            }
            if let Some(s) = step_sim {
                *counters.simulated.get_or_insert(0.0) += s;
            }
            // A predicted MASK token is "committed" as a mask by the references, i.e. the position
            // stays masked (below). Once a block has used up its planned steps, the mask token is
            // banned from the rows so that every block terminates.
            let overtime = step_in_block >= planned_steps;
            let mut logits = logits.into_iter();
            let mut candidates: Vec<Candidate> = masked
                .iter()
                .zip(&mut logits)
                .map(|(&pos, mut row)| {
                    if overtime {
                        if let Some(slot) = row.get_mut(mask as usize) {
                            *slot = f64::NEG_INFINITY;
                        }
                    }
                    let (token, confidence) = scorer.score(&mut row, &mut rng);
                    Candidate { pos, token, confidence }
                })
                .collect();
            let mut changes = Vec::new();
            if let Some(sp) = spec.as_mut() {
                for (&pos, mut row) in draft_pos.iter().zip(logits) {
                    changes.push(sp.record(pos, &mut row, scorer, step, &mut stats));
                }
            }
            let mut chosen: Vec<usize> =
                policy.select(&candidates, &mut rng).into_iter().filter(|&i| i < candidates.len()).collect();
            if let Some(sp) = spec.as_mut() {
                chosen.extend(sp.accept(&mut candidates, &chosen, &mut stats));
            }
            chosen.sort_by_key(|&i| candidates[i].pos);
            chosen.dedup();
            for c in chosen.iter().map(|&i| candidates[i]).filter(|c| c.token != mask) {
                let state = cpu_path.as_ref().map_or(TokenState::Stable, |p| p.commit_state(c.confidence));
                changes.push(canvas.commit(c.pos, c.token, c.confidence as f32, step, state));
            }
            // Step boundary: the CPU path's verdicts whose job has ended, its K/V merge.
            if let Some(c) = cpu_path.as_mut() {
                changes.extend(c.step_boundary(
                    &mut canvas,
                    windows.kv_mut(),
                    prompt.len(),
                    block,
                    step,
                    &mut stats,
                )?);
            }
            masked = canvas.masked_in(block.0, block.1);
            if masked.is_empty() {
                if let Some(c) = cpu_path.as_mut() {
                    let ends_run = b + 1 == settings.num_blocks() || ends_in_stop(&canvas, block);
                    changes.extend(c.leave_block(
                        &mut canvas,
                        backend,
                        windows.kv(),
                        prompt.len(),
                        block,
                        step,
                        ends_run,
                        &mut stats,
                    )?);
                    // The run's end (a drained job, final passes) is the last step's time.
                    let end_s = c.take_end_s();
                    counters.forwards += c.take_dense_forwards();
                    if let (Some(s), true) = (step_sim.as_mut(), end_s > 0.0) {
                        *s += end_s;
                        *counters.simulated.get_or_insert(0.0) += end_s;
                    }
                }
            }
            if npu_aware {
                stats.windows.push(WindowRecord {
                    step,
                    start: w.start,
                    end: w.end,
                    padded: w.padded,
                    lookahead: w.lookahead,
                });
            }
            let frame = StepFrame {
                step,
                block,
                forward_tokens: w.end - w.start,
                changes,
                step_wall_s: step_t0.elapsed().as_secs_f64(),
                simulated_s: step_sim,
                committed_total: canvas.committed_total(),
            };
            counters.steps += 1;
            counters.frames += 1;
            step_in_block += 1;
            if on_frame(&frame).is_break() {
                stop_reason = StopReason::CallerStopped;
                break 'blocks;
            }
        }
        if ends_in_stop(&canvas, block) {
            stop_reason = StopReason::Eos;
            break;
        }
    }

    if let Some(c) = cpu_path.as_mut() {
        c.finish(&mut stats);
    }
    let fill = settings.eos_id(&cfg).unwrap_or(mask);
    let tokens: Vec<u32> =
        (prompt.len()..len).map(|p| if canvas.is_masked(p) { fill } else { canvas.tokens()[p] }).collect();
    let committed = canvas.committed_total();
    let out = DecodeOutput {
        tokens,
        steps: counters.steps,
        forwards: counters.forwards,
        tokens_per_forward: if counters.forwards > 0 { committed as f64 / counters.forwards as f64 } else { 0.0 },
        wall_s: t0.elapsed().as_secs_f64(),
        simulated_s: counters.simulated,
        frames: counters.frames,
        stop_reason,
        canvas,
    };
    Ok((out, stats))
}

/// Running totals of one run.
#[derive(Debug, Default)]
struct Counters {
    steps: usize,
    forwards: usize,
    frames: usize,
    simulated: Option<f64>,
    step_simulated: Option<f64>,
}

impl Counters {
    fn add(&mut self, stats: &ForwardStats) {
        self.forwards += 1;
        if let Some(s) = stats.simulated_s {
            *self.step_simulated.get_or_insert(0.0) += s;
        }
    }
}

/// Window rows whose logits predict the masked positions: row p (in place) or p − 1 (shifted;
/// position 0 uses row 0), relative to the window start.
fn logit_rows(masked: &[usize], start: usize, shift: bool) -> Result<Vec<usize>> {
    masked
        .iter()
        .map(|&p| {
            let src = if shift { p.saturating_sub(1) } else { p };
            src.checked_sub(start).ok_or_else(|| {
                EngineError::InvalidRequest(format!("position {p} lies before the forward window at {start}"))
            })
        })
        .collect()
}

/// Splits a backend's logits into f64 rows, checking it returned what was asked for.
pub(crate) fn to_rows(logits: &[f32], vocab: usize, n: usize, backend: String) -> Result<Rows> {
    if vocab == 0 || logits.len() < n * vocab {
        return Err(EngineError::Backend {
            backend,
            reason: format!("returned {} logits for {n} rows of vocab {vocab}", logits.len()),
        });
    }
    // Sampling from NaN logits would emit arbitrary tokens as if they were an answer.
    for (row, r) in logits.chunks_exact(vocab).take(n).enumerate() {
        if let Some(&value) = r.iter().find(|v| !v.is_finite()) {
            return Err(EngineError::NonFiniteLogits { row, value });
        }
    }
    Ok(logits.chunks_exact(vocab).take(n).map(|r| r.iter().map(|&v| v as f64).collect()).collect())
}

/// The unconditional pass of classifier-free guidance: the same window with every prompt
/// position replaced by the mask token, no cache.
fn unconditional_rows(
    backend: &mut dyn Backend,
    canvas: &Canvas,
    plan: &StepWindow,
    positions: &[usize],
    rows: &[usize],
) -> Result<(Rows, ForwardStats)> {
    let mut un: Vec<u32> = canvas.tokens()[plan.start..plan.end].to_vec();
    for (i, t) in un.iter_mut().enumerate() {
        if plan.start + i < canvas.prompt_len() {
            *t = canvas.mask_id();
        }
    }
    let req = ForwardRequest {
        tokens: &un,
        positions: &positions[plan.start..plan.end],
        logits_rows: rows,
        kv: KvMode::Ignore,
    };
    let (out, stats) = backend.forward(&req, None)?;
    Ok((to_rows(&out.logits, out.vocab, rows.len(), backend.name())?, stats))
}

/// `logits = un + (cfg + 1)·(cond − un)`.
fn apply_cfg(cond: &mut Rows, un: &Rows, cfg_scale: f64) {
    for (c_row, u_row) in cond.iter_mut().zip(un) {
        for (c, &u) in c_row.iter_mut().zip(u_row) {
            *c = u + (cfg_scale + 1.0) * (*c - u);
        }
    }
}
