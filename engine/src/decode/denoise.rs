//! The denoising loop shared by every dLLM policy: blocks, forwards (with cache windows, CFG and
//! logit skipping), scoring, committing, streaming, cancellation and early stop.

use std::ops::ControlFlow;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::cache::{DecodeCache, ForwardPlan};
use super::canvas::{Canvas, TokenState};
use super::frame::{CancelFlag, StepFrame};
use super::output::{DecodeOutput, StopReason};
use super::policy::{Candidate, Scorer, TransferPolicy};
use super::settings::DecodeSettings;
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
    let mut cache = DecodeCache::new(backend, settings.cache, len);
    let mut counters = Counters::default();
    let mut stop_reason = StopReason::Completed;
    // A policy may decline a step (zero transfers); it may not decline forever.
    let max_skips = settings.steps.max(1) + 1;
    // Forwards a block normally needs at most (fixed schedule, or one commit per threshold step).
    let planned_steps = settings.steps_per_block().max(settings.block_length);

    'blocks: for b in 0..settings.num_blocks() {
        let block = (prompt.len() + b * settings.block_length, prompt.len() + (b + 1) * settings.block_length);
        let mut masked = canvas.masked_in(block.0, block.1);
        policy.begin_block(masked.len());
        let (mut step_in_block, mut skips) = (0usize, 0usize);
        while !masked.is_empty() {
            cancel.check()?;
            if !policy.next_step(masked.len()) {
                skips += 1;
                if skips > max_skips {
                    return Err(EngineError::InvalidRequest(format!("policy {} made no progress", policy.name())));
                }
                continue;
            }
            let step_t0 = Instant::now();
            let plan = cache.plan(step_in_block, block, len);
            let rows = logit_rows(&masked, plan.start, cfg.shift_logits)?;
            let req = ForwardRequest {
                tokens: &canvas.tokens()[plan.start..plan.end],
                positions: &positions[plan.start..plan.end],
                logits_rows: &rows,
                kv: plan.kv,
            };
            let (out, stats) = backend.forward(&req, cache.kv_mut())?;
            cache.after_forward(&plan, block);
            counters.add(&stats);
            let mut logits = to_rows(&out.logits, out.vocab, rows.len(), backend.name())?;
            if settings.cfg_scale > 0.0 {
                let un = unconditional_rows(backend, &canvas, &plan, &positions, &rows)?;
                counters.add(&un.1);
                apply_cfg(&mut logits, &un.0, settings.cfg_scale);
            }
            // A predicted MASK token is "committed" as a mask by the references, i.e. the position
            // stays masked (below). Once a block has used up its planned steps, the mask token is
            // banned from the rows so that every block terminates.
            let overtime = step_in_block >= planned_steps;
            let candidates: Vec<Candidate> = masked
                .iter()
                .zip(logits.iter_mut())
                .map(|(&pos, row)| {
                    if overtime {
                        if let Some(slot) = row.get_mut(mask as usize) {
                            *slot = f64::NEG_INFINITY;
                        }
                    }
                    let (token, confidence) = scorer.score(row, &mut rng);
                    Candidate { pos, token, confidence }
                })
                .collect();
            let mut chosen: Vec<&Candidate> = policy
                .select(&candidates, &mut rng)
                .into_iter()
                .filter_map(|i| candidates.get(i))
                .filter(|c| c.token != mask)
                .collect();
            chosen.sort_by_key(|c| c.pos);
            let changes = chosen
                .iter()
                .map(|c| canvas.commit(c.pos, c.token, c.confidence as f32, counters.steps, TokenState::Stable))
                .collect();
            let frame = StepFrame {
                step: counters.steps,
                block,
                forward_tokens: plan.end - plan.start,
                changes,
                step_wall_s: step_t0.elapsed().as_secs_f64(),
                simulated_s: counters.step_simulated.take(),
                committed_total: canvas.committed_total(),
            };
            counters.steps += 1;
            counters.frames += 1;
            step_in_block += 1;
            if on_frame(&frame).is_break() {
                stop_reason = StopReason::CallerStopped;
                break 'blocks;
            }
            masked = canvas.masked_in(block.0, block.1);
        }
        if settings.early_stop_eos && block.1 > block.0 && stop_ids.contains(&canvas.tokens()[block.1 - 1]) {
            stop_reason = StopReason::Eos;
            break;
        }
    }

    let fill = settings.eos_id(&cfg).unwrap_or(mask);
    let tokens: Vec<u32> =
        (prompt.len()..len).map(|p| if canvas.is_masked(p) { fill } else { canvas.tokens()[p] }).collect();
    let committed = canvas.committed_total();
    Ok(DecodeOutput {
        tokens,
        steps: counters.steps,
        forwards: counters.forwards,
        tokens_per_forward: if counters.forwards > 0 { committed as f64 / counters.forwards as f64 } else { 0.0 },
        wall_s: t0.elapsed().as_secs_f64(),
        simulated_s: counters.simulated,
        frames: counters.frames,
        stop_reason,
        canvas,
    })
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
            *self.simulated.get_or_insert(0.0) += s;
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
    plan: &ForwardPlan,
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
