//! Autoregressive greedy / sampled decoding for causal models (Llama, Qwen) with a KV cache,
//! streaming one token per step through the same frames as the dLLM policies, so AR baselines
//! run through the same API.

use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::canvas::{Canvas, TokenState};
use super::denoise::{to_rows, FrameSink};
use super::frame::{CancelFlag, StepFrame};
use super::output::{DecodeOutput, StopReason};
use super::sampling::{argmax, probability_of, sample_categorical, softmax, top_k_filter, top_p_filter};
use super::settings::DecodeSettings;
use crate::backend::Backend;
use crate::error::{EngineError, Result};
use crate::model::{ForwardRequest, KvCache, KvMode};

/// K/V of tokens already run through a causal model, kept between calls so a new prompt that
/// starts with them (the next chat turn) only forwards its new suffix. Exact for causal models:
/// a token's K/V depend only on the tokens before it.
#[derive(Debug, Clone, Default)]
pub struct ArPrefixCache {
    cache: Option<KvCache>,
    /// Tokens whose K/V are valid at positions `0..tokens.len()`.
    tokens: Vec<u32>,
}

impl ArPrefixCache {
    /// Number of leading tokens of `prompt` whose K/V can be reused (at least one token is left
    /// to forward, since the last prompt position must produce logits).
    pub fn reusable(&self, prompt: &[u32]) -> usize {
        let common = self.tokens.iter().zip(prompt).take_while(|(a, b)| a == b).count();
        common.min(prompt.len().saturating_sub(1))
    }
    /// Forgets everything.
    pub fn clear(&mut self) {
        *self = ArPrefixCache::default();
    }
    /// A cache of `capacity` positions for `prompt`: the kept one (grown, valid for the leading
    /// tokens it shares with `prompt`) when it fits `backend`'s model, else a new one; with the
    /// number of leading tokens already in it. The kept state is handed over.
    pub(crate) fn take_for(&mut self, backend: &dyn Backend, prompt: &[u32], capacity: usize) -> (KvCache, usize) {
        let common = self.reusable(prompt);
        self.tokens.clear();
        let cfg = backend.config();
        match self.cache.take() {
            Some(mut c) if common > 0 && c.n_layers() == cfg.n_layers && c.kv_dim() == cfg.kv_dim() => {
                c.grow(capacity);
                c.invalidate_from(common);
                (c, common)
            }
            _ => (backend.new_cache(capacity), 0),
        }
    }
    /// Keeps `cache`, whose K/V are valid for `tokens`, for the next call.
    pub(crate) fn store(&mut self, cache: KvCache, tokens: &[u32]) {
        self.cache = Some(cache);
        self.tokens = tokens.to_vec();
    }
}

/// Picks the next token from a logits row: argmax at temperature 0, else temperature, top-p,
/// top-k and a categorical draw. Returns (token, probability under the sampling distribution).
pub fn sample_next(row: &mut [f64], settings: &DecodeSettings, rng: &mut ChaCha8Rng) -> (u32, f64) {
    if settings.temperature == 0.0 {
        let t = argmax(row);
        return (t as u32, probability_of(row, t));
    }
    row.iter_mut().for_each(|l| *l /= settings.temperature);
    if let Some(p) = settings.top_p {
        top_p_filter(row, p);
    }
    if let Some(k) = settings.top_k {
        top_k_filter(row, k);
    }
    let probs = softmax(row);
    let t = sample_categorical(&probs, rng);
    (t as u32, probs[t])
}

/// Generates up to `settings.gen_length` tokens after `prompt`, stopping after EOS/EOT.
pub fn generate_ar(
    backend: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
) -> Result<DecodeOutput> {
    generate_ar_reusing(backend, prompt, settings, cancel, on_frame, &mut ArPrefixCache::default())
}

/// [`generate_ar`] that starts from the K/V in `reuse` where `prompt` begins with its tokens,
/// and leaves the K/V of this run (prompt and fed-back tokens) there for the next call.
pub fn generate_ar_reusing(
    backend: &mut dyn Backend,
    prompt: &[u32],
    settings: &DecodeSettings,
    cancel: &CancelFlag,
    on_frame: &mut FrameSink<'_>,
    reuse: &mut ArPrefixCache,
) -> Result<DecodeOutput> {
    let cfg = backend.config().clone();
    check_ar_request(&cfg, prompt, settings)?;
    let len = prompt.len() + settings.gen_length;
    let stop_ids: Vec<u32> = [settings.eos_id(&cfg), settings.eot_id(&cfg)].into_iter().flatten().collect();
    // AR models have no mask token; not-yet-generated canvas slots hold a placeholder.
    let placeholder = cfg.pad_token_id.or(cfg.eos_token_id).unwrap_or(0);
    let t0 = Instant::now();
    let mut rng = ChaCha8Rng::seed_from_u64(settings.seed);
    let mut canvas = Canvas::new(prompt, settings.gen_length, placeholder);
    let (mut cache, common) = reuse.take_for(backend, prompt, len);
    let positions: Vec<usize> = (0..len).collect();
    let (mut tokens, mut frames, mut simulated) = (Vec::new(), 0usize, None::<f64>);
    let mut stop_reason = StopReason::Completed;
    // The first step consumes the prompt (minus what `reuse` already holds); each later step
    // feeds back the last token.
    let mut window = (common, prompt.len());
    let mut fed = common;
    for step in 0..settings.gen_length {
        cancel.check()?;
        let step_t0 = Instant::now();
        let n = window.1 - window.0;
        let req = ForwardRequest {
            tokens: &canvas.tokens()[window.0..window.1],
            positions: &positions[window.0..window.1],
            logits_rows: &[n - 1],
            kv: KvMode::ReadWrite,
        };
        let (out, stats) = backend.forward(&req, Some(&mut cache))?;
        fed = window.1;
        if let Some(s) = stats.simulated_s {
            *simulated.get_or_insert(0.0) += s;
        }
        let mut rows = to_rows(&out.logits, out.vocab, 1, backend.name())?;
        let (token, p) = sample_next(&mut rows[0], settings, &mut rng);
        let pos = window.1;
        let change = canvas.commit(pos, token, p as f32, step, TokenState::Stable);
        tokens.push(token);
        let frame = StepFrame {
            step,
            block: (pos, pos + 1),
            forward_tokens: n,
            changes: vec![change],
            step_wall_s: step_t0.elapsed().as_secs_f64(),
            simulated_s: stats.simulated_s,
            committed_total: tokens.len(),
        };
        frames += 1;
        if on_frame(&frame).is_break() {
            stop_reason = StopReason::CallerStopped;
            break;
        }
        if stop_ids.contains(&token) {
            stop_reason = StopReason::Eos;
            break;
        }
        window = (pos, pos + 1);
    }
    let forwards = tokens.len();
    reuse.tokens = canvas.tokens()[..fed].to_vec();
    reuse.cache = Some(cache);
    Ok(DecodeOutput {
        steps: tokens.len(),
        forwards,
        tokens_per_forward: if forwards > 0 { 1.0 } else { 0.0 },
        tokens,
        wall_s: t0.elapsed().as_secs_f64(),
        simulated_s: simulated,
        frames,
        stop_reason,
        canvas,
    })
}

/// The checks of an autoregressive request, before anything is allocated for it.
pub(crate) fn check_ar_request(
    cfg: &crate::model::ModelConfig,
    prompt: &[u32],
    settings: &DecodeSettings,
) -> Result<()> {
    if prompt.is_empty() {
        return Err(EngineError::InvalidRequest("AR decoding needs a non-empty prompt".into()));
    }
    if settings.gen_length == 0 {
        return Err(EngineError::InvalidRequest("gen_length must be positive".into()));
    }
    super::settings::check_fits(cfg, prompt.len(), settings)?;
    if let Some(&t) = prompt.iter().find(|&&t| t as usize >= cfg.vocab) {
        return Err(EngineError::InvalidRequest(format!("prompt token {t} outside vocab of {}", cfg.vocab)));
    }
    Ok(())
}
