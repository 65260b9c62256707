//! `generate`: chat bookkeeping (conversation, edit/regenerate), then one decode on a worker
//! thread that records the run and its trace in the store and streams batched frames.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Instant;

use unmask_engine::decode::spec_ar::{check_pair, SpecArSettings};
use unmask_engine::decode::{self as engine_decode, trim_at_stop, CancelFlag, StepFrame};
use unmask_engine::model::ChatMessage;
use unmask_engine::moe::ffn::StaticPlan;
use unmask_engine::moe::{MoeCalibration, MoePolicy};
use unmask_engine::run::{
    effective_settings, fit_chat, static_plan, stop_ids, RunOutcome as EngineRunOutcome, Session,
};
use unmask_engine::EngineError;
use unmask_store::{
    recorded_outcome, MessageRole, ModelRecord, NewConversation, NewRun, RunOutcome, RunRecord, RunSpeculation,
};

use crate::backends::Loaded;
use crate::batcher::FrameBatcher;
use crate::conversations::clean_system_prompt;
use crate::dto::{BackendChoice, FrameDelta, GenerateEvent, GenerateRequest, RunSummary, TokenView};
use crate::error::{AppError, AppResult};
use crate::runs::{speculation_summary, summary_of};
use crate::sink::EventSink;
use crate::state::AppState;

/// Name of the MoE calibration runs use (the CLI's `unmask moe calibrate` writes it).
pub const MOE_CALIBRATION: &str = "default";

/// Shared sink of a generation's events.
pub type GenerateSink = Arc<dyn EventSink<GenerateEvent>>;

/// A draft model a run decodes with: its name (recorded with the run) and weights.
#[derive(Clone)]
pub(crate) struct Draft {
    name: String,
    model: Arc<Loaded>,
}

/// Title of a new conversation: the first line of its first prompt, shortened.
fn title_from(prompt: &str) -> String {
    let line = prompt.lines().find(|l| !l.trim().is_empty()).unwrap_or("New chat").trim();
    let mut t: String = line.chars().take(48).collect();
    if line.chars().count() > 48 {
        t.push('…');
    }
    t
}

fn to_chat(m: &unmask_store::Message) -> ChatMessage {
    match m.role {
        MessageRole::User => ChatMessage::user(m.content.clone()),
        MessageRole::Assistant => ChatMessage::assistant(m.content.clone()),
        MessageRole::System => ChatMessage::system(m.content.clone()),
    }
}

/// What the chat template renders for a turn: the conversation's system prompt as the template's
/// system turn, the stored turns, the prompt. The conversation's prompt is the one the user sees
/// and edits, so it replaces stored system messages (the app shows those nowhere).
fn chat_turns(system_prompt: Option<&str>, history: &[unmask_store::Message], prompt: &str) -> Vec<ChatMessage> {
    let mut chat = Vec::with_capacity(history.len() + 2);
    if let Some(sp) = system_prompt {
        chat.push(ChatMessage::system(sp));
    }
    let kept = history.iter().filter(|m| system_prompt.is_none() || m.role != MessageRole::System);
    chat.extend(kept.map(to_chat));
    chat.push(ChatMessage::user(prompt));
    chat
}

impl AppState {
    /// One chat turn: appends the prompt to the conversation (a new one when none is given;
    /// with `replace_from_message_id` that message and all later ones are replaced first),
    /// decodes the answer on a worker thread while streaming events to `sink`, stores the run
    /// and the assistant message, and returns the run's summary. A stopped run resolves with
    /// status `cancelled` and its partial answer.
    pub async fn generate(&self, req: GenerateRequest, sink: GenerateSink) -> AppResult<RunSummary> {
        let result = self.generate_inner(req, sink.clone()).await;
        if let Err(e) = &result {
            let _ = sink.send(GenerateEvent::Failed { message: e.message.clone() });
        }
        result
    }

    async fn generate_inner(&self, req: GenerateRequest, sink: GenerateSink) -> AppResult<RunSummary> {
        if req.prompt.trim().is_empty() {
            return Err(AppError::invalid("the prompt is empty"));
        }
        let model = self.resolve_model(req.model_id).await?;
        let loaded = self.load(&model).await?;
        // The one settings rule of every front end: the user's choices over the model's defaults.
        let overrides = match &req.overridden {
            Some(chosen) => req.settings.overrides_of(chosen),
            None => req.settings.to_overrides(),
        };
        let settings = effective_settings(&loaded.transformer.config, &loaded.generation, &overrides);
        settings.validate()?;
        // Checked before anything is stored, so a draft that cannot pair costs nothing.
        let draft = match req.draft_model_id {
            Some(id) => {
                let record = self.resolve_model(Some(id)).await?;
                let weights = self.load(&record).await?;
                check_pair(&loaded.transformer.config, &weights.transformer.config)
                    .map_err(|e| AppError::invalid(format!("draft model {}: {e}", record.name)))?;
                Some(Draft { name: record.name, model: weights })
            }
            None => None,
        };

        let system_prompt = req.system_prompt.as_deref().map(|s| clean_system_prompt(Some(s)));
        let conv = match req.conversation_id {
            Some(id) => {
                let conv = self.store.get_conversation(id).await?;
                match system_prompt {
                    Some(sp) if sp != conv.system_prompt => {
                        self.store.set_conversation_system_prompt(id, sp.as_deref()).await?
                    }
                    _ => conv,
                }
            }
            None => {
                let new = NewConversation {
                    title: title_from(&req.prompt),
                    model_id: Some(model.id),
                    system_prompt: system_prompt.flatten(),
                    ..Default::default()
                };
                self.store.create_conversation(&new).await?
            }
        };
        if let Some(mid) = req.replace_from_message_id {
            let msgs = self.store.messages(conv.id).await?;
            if !msgs.iter().any(|m| m.id == mid) {
                return Err(AppError::invalid(format!("message {mid} is not part of conversation {}", conv.id)));
            }
            self.store.truncate_conversation_at(mid).await?;
        }
        let history = self.store.messages(conv.id).await?;
        self.store.add_message(conv.id, MessageRole::User, &req.prompt, None).await?;
        let chat = chat_turns(conv.system_prompt.as_deref(), &history, &req.prompt);
        // A long conversation keeps going: the oldest exchanges that no longer fit the context
        // are left out of the prompt (they stay stored and shown).
        let context = loaded.transformer.config.max_seq;
        let fitted = fit_chat(&loaded.template, &loaded.tokenizer, &chat, context, settings.gen_length)?;
        if fitted.left_out > 0 {
            tracing::info!(
                conversation = conv.id,
                left_out = fitted.left_out,
                "oldest messages left out of the context"
            );
        }
        let ids = fitted.ids;

        let record = self
            .decode_run(&model, loaded, ids, &req.prompt, settings, &req.backend, draft, sink.clone(), Some(conv.id))
            .await?;
        let mut summary = summary_of(&record);
        summary.speculation = self.store.run_speculation(record.id).await?.as_ref().and_then(speculation_summary);
        let answer = record.output.clone().unwrap_or_default();
        if !answer.is_empty() || record.status == unmask_store::RunStatus::Completed {
            self.store.add_message(conv.id, MessageRole::Assistant, &answer, Some(record.id)).await?;
        }
        let _ = sink.send(GenerateEvent::Finished { summary: summary.clone() });
        Ok(summary)
    }

    /// The static MoE plan a static-tiers run of `model` uses: from its stored calibration (the
    /// one `unmask moe calibrate` writes), or none (the session then plans uniformly).
    async fn moe_plan(
        &self,
        model: &ModelRecord,
        loaded: &Loaded,
        settings: &engine_decode::DecodeSettings,
    ) -> AppResult<Option<Arc<StaticPlan>>> {
        let wants_tiers = settings.moe.is_some_and(|m| m.policy == MoePolicy::StaticTiers);
        if !wants_tiers || loaded.transformer.moe_shape().is_none() {
            return Ok(None);
        }
        let Some(stored) = self.store.get_moe_calibration(model.id, MOE_CALIBRATION).await? else {
            return Ok(None);
        };
        let cal: MoeCalibration = serde_json::from_value(stored.data)
            .map_err(|e| AppError::invalid(format!("the stored MoE calibration of {} is damaged: {e}", model.name)))?;
        Ok(Some(static_plan(&loaded.transformer, Some(&cal))?))
    }

    /// Loads (or reuses) a model on a blocking thread.
    pub(crate) async fn load(&self, model: &ModelRecord) -> AppResult<Arc<Loaded>> {
        let path = self.store.model_path(model);
        let cache = self.models.clone();
        tokio::task::spawn_blocking(move || cache.get_blocking(&path))
            .await
            .map_err(|e| AppError::internal(format!("model loader: {e}")))?
    }

    /// Runs one decode of `ids` and records it; returns the stored run. Used by chat turns and by
    /// re-runs from the compare view (`conversation` is only reported in `started`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn decode_run(
        &self,
        model: &ModelRecord,
        loaded: Arc<Loaded>,
        ids: Vec<u32>,
        prompt: &str,
        settings: engine_decode::DecodeSettings,
        backend: &BackendChoice,
        draft: Option<Draft>,
        sink: GenerateSink,
        conversation: Option<i64>,
    ) -> AppResult<RunRecord> {
        // Before the run is recorded or anything is sized by the request (AR models included).
        engine_decode::check_request(&loaded.transformer.config, &ids, &settings)?;
        let new = NewRun::new(model, &backend.to_spec(), prompt, settings.clone());
        let mut rec = self.store.start_run(new).await?;
        let run_id = rec.id();
        let prompt_len = ids.len();
        // Registered before `started` goes out, so a stop sent in reaction to it is honoured.
        let cancel = CancelFlag::new();
        self.running.lock().map_err(|_| AppError::internal("run table poisoned"))?.insert(run_id, cancel.clone());
        let _ = sink.send(GenerateEvent::Started {
            run_id,
            conversation_id: conversation.unwrap_or(0),
            prompt_tokens: prompt_len as u32,
            canvas_length: (prompt_len + settings.gen_length) as u32,
        });

        let moe_plan = self.moe_plan(model, &loaded, &settings).await?;
        let interval = self.frame_interval;
        let backend = backend.clone();
        let worker_loaded = loaded.clone();
        let worker_settings = settings.clone();
        let stop = stop_ids(&loaded.transformer.config, &settings, &loaded.tokenizer, &loaded.template);
        let worker_stop = stop.clone();
        let draft_name = draft.as_ref().map(|d| d.name.clone());
        let joined = tokio::task::spawn_blocking(move || {
            let job = DecodeJob {
                loaded: worker_loaded,
                moe_plan,
                ids,
                settings: worker_settings,
                stop: worker_stop,
                backend,
                draft,
                sink,
                cancel,
                interval,
            };
            let result = job.run(&mut rec);
            (rec, result)
        })
        .await;
        if let Ok(mut running) = self.running.lock() {
            running.remove(&run_id);
        }
        let (mut rec, result) = joined.map_err(|e| AppError::internal(format!("decode worker: {e}")))?;
        let text_of = |tokens: &[u32]| loaded.tokenizer.decode(trim_at_stop(tokens, &stop), true).trim().to_owned();
        let record = match result {
            Ok(done) => {
                let (mut outcome, timeline) = recorded_outcome(&done.outcome);
                outcome.output = done.outcome.text.trim().to_owned();
                // Speculative AR runs come with their drafter / verifier timeline (measured).
                rec.set_timeline(timeline.unwrap_or_else(|| crate::timeline::measured_from_frames(&done.frames)));
                let record = rec.finish(outcome).await?;
                self.store.put_run_counters(record.id, &done.outcome, None).await?;
                if let (Some(draft_model), Some(stats)) = (draft_name, &done.outcome.speculation) {
                    let stats = serde_json::to_value(stats)
                        .map_err(|e| AppError::internal(format!("speculation counters: {e}")))?;
                    self.store.put_run_speculation(record.id, &RunSpeculation { draft_model, stats }).await?;
                }
                record
            }
            Err(Failure { error: EngineError::Cancelled, partial, frames }) => {
                rec.set_timeline(crate::timeline::measured_from_frames(&frames));
                let tokens: Vec<u32> = partial.iter().copied().take_while(|t| t.is_some()).flatten().collect();
                // Counted as the engine counts a finished answer: up to and including the first stop token.
                let answer_tokens = (trim_at_stop(&tokens, &stop).len() + 1).min(tokens.len());
                let outcome = RunOutcome {
                    output: text_of(&tokens),
                    metrics: unmask_store::RunMetrics {
                        answer_tokens: Some(answer_tokens as u64),
                        ..Default::default()
                    },
                    output_tokens: tokens,
                    stop_reason: Some("caller_stopped".into()),
                };
                rec.cancel(Some(outcome)).await?
            }
            Err(Failure { error, .. }) => {
                let message = error.to_string();
                rec.fail(&message).await?;
                return Err(AppError::from(error));
            }
        };
        Ok(record)
    }
}

/// What a finished decode hands back to the async side.
struct Done {
    outcome: EngineRunOutcome,
    frames: Vec<StepFrame>,
}

/// A failed or stopped decode, with the generated tokens committed so far.
struct Failure {
    error: EngineError,
    partial: Vec<Option<u32>>,
    frames: Vec<StepFrame>,
}

/// The blocking part of a run.
struct DecodeJob {
    loaded: Arc<Loaded>,
    /// The static MoE plan from the model's calibration (MoE models that have one).
    moe_plan: Option<Arc<StaticPlan>>,
    ids: Vec<u32>,
    settings: engine_decode::DecodeSettings,
    /// The run's stop ids, to mark end-of-answer tokens in the streamed frames.
    stop: Vec<u32>,
    backend: BackendChoice,
    /// Proposes tokens for an autoregressive model to verify (speculative decoding).
    draft: Option<Draft>,
    sink: GenerateSink,
    cancel: CancelFlag,
    interval: std::time::Duration,
}

impl DecodeJob {
    fn run(self, rec: &mut unmask_store::RunRecorder) -> Result<Done, Failure> {
        let prompt_len = self.ids.len();
        let mut partial: Vec<Option<u32>> = vec![None; self.settings.gen_length];
        let mut frames: Vec<StepFrame> = Vec::new();
        let mut batcher = FrameBatcher::new(self.interval);
        let tokenizer = &self.loaded.tokenizer;
        let stop = &self.stop;
        let sink = &self.sink;
        let mut on_frame = |f: &StepFrame| {
            rec.record(f);
            for c in &f.changes {
                if let Some(slot) = c.pos.checked_sub(prompt_len).and_then(|i| partial.get_mut(i)) {
                    *slot = (c.state != engine_decode::TokenState::Masked).then_some(c.token);
                }
            }
            frames.push(f.clone());
            if let Some(batch) = batcher.push(frame_delta(f, &|t| tokenizer.token_text(t), stop), Instant::now()) {
                // A closed window must not stop the run: it is still recorded.
                let _ = sink.send(GenerateEvent::Frames { frames: batch });
            }
            ControlFlow::Continue(())
        };
        // The same session type the CLI runs through: backend built from its spec, request
        // checked, answer cut at the stop tokens, timeline sliced.
        let result = Session::open(self.loaded.clone(), &self.backend.to_spec()).and_then(|mut session| {
            if let Some(plan) = self.moe_plan.clone() {
                session.set_moe_plan(plan)?;
            }
            if let Some(d) = &self.draft {
                session.set_draft(d.model.clone(), SpecArSettings::default())?;
            }
            session.run(&self.ids, &self.settings, &self.cancel, &mut on_frame)
        });
        if let Some(batch) = batcher.finish() {
            let _ = self.sink.send(GenerateEvent::Frames { frames: batch });
        }
        match result {
            Ok(outcome) => Ok(Done { outcome, frames }),
            Err(error) => Err(Failure { error, partial, frames }),
        }
    }
}

/// The UI form of a frame: positions as numbers, token text from `text` (empty for masks), and
/// committed tokens that are one of the run's `stop` ids marked as the answer's end.
pub fn frame_delta(f: &StepFrame, text: &dyn Fn(u32) -> String, stop: &[u32]) -> FrameDelta {
    FrameDelta {
        step: f.step as u32,
        block: (f.block.0 as u32, f.block.1 as u32),
        forward_tokens: f.forward_tokens as u32,
        changes: f
            .changes
            .iter()
            .map(|c| {
                let masked = c.state == engine_decode::TokenState::Masked;
                TokenView {
                    pos: c.pos as u32,
                    token: c.token,
                    text: if masked { String::new() } else { text(c.token) },
                    state: c.state.into(),
                    confidence: c.confidence,
                    speculative: c.speculative,
                    revised: c.revised,
                    rejected_draft: c.rejected_draft.map(text),
                    end: !masked && stop.contains(&c.token),
                }
            })
            .collect(),
        step_wall_s: f.step_wall_s,
        simulated_s: f.simulated_s,
        committed_total: f.committed_total as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_are_the_first_line_shortened() {
        assert_eq!(title_from("\n  What is 2+2?\nmore"), "What is 2+2?");
        let long = "x".repeat(60);
        assert_eq!(title_from(&long).chars().count(), 49);
    }

    fn stored(id: i64, role: MessageRole, content: &str) -> unmask_store::Message {
        unmask_store::Message { id, conversation_id: 1, role, content: content.into(), run_id: None, created_at: 0 }
    }

    #[test]
    fn the_system_prompt_is_the_templates_system_turn() {
        use unmask_engine::model::ChatTemplate;
        let history = [stored(1, MessageRole::User, "What is 2+2?"), stored(2, MessageRole::Assistant, "4")];
        let chat = chat_turns(Some("Answer with a number."), &history, "And 3+3?");
        let llada = ChatTemplate::Llada.render(&chat, true);
        assert!(
            llada.starts_with("<|startoftext|><|start_header_id|>system<|end_header_id|>\n\nAnswer with a number.<|eot_id|><|start_header_id|>user"),
            "{llada}"
        );
        assert!(llada.ends_with("And 3+3?<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"), "{llada}");
        // ChatML's default system prompt gives way to the conversation's.
        let chatml =
            ChatTemplate::ChatMl { default_system: Some("You are a helpful assistant.".into()) }.render(&chat, true);
        assert!(
            chatml.starts_with("<|im_start|>system\nAnswer with a number.<|im_end|>\n<|im_start|>user"),
            "{chatml}"
        );
        assert!(!chatml.contains("helpful assistant"));
        let moe = ChatTemplate::LladaMoe.render(&chat, true);
        assert!(moe.starts_with("<role>SYSTEM</role>Answer with a number.<|role_end|><role>HUMAN</role>"), "{moe}");
        // No system prompt: the template's own default stays.
        let plain = chat_turns(None, &history, "And 3+3?");
        assert_eq!(plain.len(), 3);
        assert!(ChatTemplate::Llada.render(&plain, true).starts_with("<|startoftext|><|start_header_id|>user"));
        // A stored system message gives way to the conversation's prompt, which the user sees.
        let with_stored = [stored(1, MessageRole::System, "Old.")];
        let chat = chat_turns(Some("New."), &with_stored, "Hi");
        let systems: Vec<&str> =
            chat.iter().filter(|m| m.role == unmask_engine::model::Role::System).map(|m| m.content.as_str()).collect();
        assert_eq!(systems, ["New."]);
    }
}
