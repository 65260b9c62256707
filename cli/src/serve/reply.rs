//! The bodies OpenAI clients read: whole responses, stream chunks, usage, and the `unmask`
//! object that echoes the run (its id, the settings it used, its cost) and carries steps.

use std::sync::Arc;

use serde_json::{json, Value};
use unmask_engine::decode::{DecodeSettings, StepFrame, TokenState};
use unmask_engine::run::RunOutcome;

use super::request::{Endpoint, Prepared};
use super::state::{unix_now, AppState, ServedModel};
use super::text::cut_at_stop_strings;
use super::worker::{Job, JobEvent};

/// What the response to a queued job needs once the job has left for the worker.
pub struct Reply {
    pub endpoint: Endpoint,
    pub model: Arc<ServedModel>,
    pub prompt_len: usize,
    pub settings: DecodeSettings,
    pub stop_ids: Vec<u32>,
    pub stop_strings: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub stream_steps: bool,
    pub created: u64,
    /// Set when decoding starts.
    pub id: String,
    pub run_id: Option<i64>,
    pub queued_s: f64,
}

/// Splits a checked request into the job for the worker and what its reply needs.
pub fn split(p: Prepared, events: tokio::sync::mpsc::UnboundedSender<JobEvent>) -> (Job, Reply) {
    let reply = Reply {
        endpoint: p.endpoint,
        model: p.model,
        prompt_len: p.ids.len(),
        settings: p.settings.clone(),
        stop_ids: p.stop_ids.clone(),
        stop_strings: p.stop_strings,
        stream: p.stream,
        include_usage: p.include_usage,
        stream_steps: p.stream_steps,
        created: unix_now(),
        id: String::new(),
        run_id: None,
        queued_s: 0.0,
    };
    let job = Job {
        ids: p.ids,
        settings: p.settings,
        stop_ids: p.stop_ids,
        prompt_text: p.prompt_text,
        want_frames: p.stream,
        events,
        queued_at: std::time::Instant::now(),
    };
    (job, reply)
}

impl Reply {
    /// Decoding started: the response gets its id.
    pub fn started(&mut self, app: &AppState, run_id: Option<i64>, queued_s: f64) {
        let prefix = match self.endpoint {
            Endpoint::Chat => "chatcmpl",
            Endpoint::Completion => "cmpl",
        };
        self.id = app.response_id(prefix, run_id);
        self.run_id = run_id;
        self.queued_s = queued_s;
    }

    /// The answer as the response carries it, and its finish reason.
    pub fn answer(&self, o: &RunOutcome) -> (String, &'static str) {
        let (text, cut) = cut_at_stop_strings(&o.text, &self.stop_strings);
        // A stop token ended the answer when the answer is shorter than the generated tokens.
        let stopped = cut || o.answer.len() < o.output.tokens.len();
        (text.to_owned(), if stopped { "stop" } else { "length" })
    }

    /// Token counts (completion tokens count up to and including the stop token, as the
    /// engine's metrics do).
    pub fn usage(&self, o: &RunOutcome) -> Value {
        json!({
            "prompt_tokens": o.prompt_tokens,
            "completion_tokens": o.answer_tokens,
            "total_tokens": o.prompt_tokens + o.answer_tokens,
        })
    }

    /// The `unmask` object when decoding starts: run id, canvas shape, settings used.
    pub fn start_info(&self) -> Value {
        json!({
            "run_id": self.run_id,
            "queued_s": self.queued_s,
            "prompt_tokens": self.prompt_len,
            "gen_length": self.settings.gen_length,
            "settings": self.settings,
            "backend": self.model.backend,
        })
    }

    /// The `unmask` object of a finished run: what it cost and the settings it used.
    pub fn end_info(&self, o: &RunOutcome) -> Value {
        let d = &o.output;
        json!({
            "run_id": self.run_id,
            "queued_s": self.queued_s,
            "steps": d.steps,
            "forwards": d.forwards,
            "tokens_per_forward": o.answer_tokens_per_forward(),
            "wall_s": d.wall_s,
            "simulated_s": d.simulated_s,
            "stop_reason": d.stop_reason,
            "backend": self.model.backend,
            "settings": self.settings,
            // What speculative decoding did (drafted, accepted, forwards of both models).
            "speculation": o.speculation.as_ref().map(|sp| json!({"draft_model": self.model.draft, "stats": sp})),
        })
    }

    /// A whole (non-streamed) response.
    pub fn full(&self, o: &RunOutcome) -> Value {
        let (text, finish) = self.answer(o);
        let choice = match self.endpoint {
            Endpoint::Chat => json!({
                "index": 0, "message": {"role": "assistant", "content": text}, "logprobs": null, "finish_reason": finish,
            }),
            Endpoint::Completion => json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish}),
        };
        json!({
            "id": self.id,
            "object": self.object(false),
            "created": self.created,
            "model": self.model.name,
            "system_fingerprint": null,
            "choices": [choice],
            "usage": self.usage(o),
            "unmask": self.end_info(o),
        })
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.endpoint, chunk) {
            (Endpoint::Chat, false) => "chat.completion",
            (Endpoint::Chat, true) => "chat.completion.chunk",
            (Endpoint::Completion, _) => "text_completion",
        }
    }

    /// A stream chunk: the first (`role`), a text delta, the last (`finish`), each optionally
    /// with an `unmask` object.
    pub fn chunk(&self, role: bool, text: Option<&str>, finish: Option<&str>, unmask: Option<Value>) -> Value {
        let choice = match self.endpoint {
            Endpoint::Chat => {
                let mut delta = serde_json::Map::new();
                if role {
                    delta.insert("role".into(), json!("assistant"));
                    delta.insert("content".into(), json!(""));
                }
                if let Some(t) = text {
                    delta.insert("content".into(), json!(t));
                }
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            }
            Endpoint::Completion => {
                json!({"index": 0, "text": text.unwrap_or(""), "logprobs": null, "finish_reason": finish})
            }
        };
        let mut c = json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model.name,
            "system_fingerprint": null,
            "choices": [choice],
        });
        if let (Some(u), Some(map)) = (unmask, c.as_object_mut()) {
            map.insert("unmask".into(), u);
        }
        c
    }

    /// The usage chunk that ends a stream with `include_usage` (no choices, as OpenAI sends it).
    pub fn usage_chunk(&self, o: &RunOutcome) -> Value {
        json!({
            "id": self.id,
            "object": self.object(true),
            "created": self.created,
            "model": self.model.name,
            "system_fingerprint": null,
            "choices": [],
            "usage": self.usage(o),
        })
    }

    /// One denoising step for `stream_steps`: positions relative to the answer's start, each
    /// changed token with its text, state and confidence.
    pub fn step(&self, f: &StepFrame) -> Value {
        let tokenizer = &self.model.parts.tokenizer;
        let rel = |p: usize| p.saturating_sub(self.prompt_len);
        let changes: Vec<Value> = f
            .changes
            .iter()
            .filter(|c| c.pos >= self.prompt_len)
            .map(|c| {
                let masked = c.state == TokenState::Masked;
                json!({
                    "pos": rel(c.pos),
                    "token": c.token,
                    "text": if masked { String::new() } else { tokenizer.decode(&[c.token], false) },
                    "state": c.state,
                    "confidence": c.confidence,
                    "speculative": c.speculative,
                    "revised": c.revised,
                })
            })
            .collect();
        json!({
            "step": f.step,
            "block": [rel(f.block.0), rel(f.block.1)],
            "changes": changes,
            "committed": f.committed_total,
            "step_ms": f.step_wall_s * 1e3,
        })
    }
}
