//! Multi-turn chat on top of [`generate`](super::generate): render history with the model's
//! template, decode the assistant reply, trim it at EOT/EOS, append it to the history.
//!
//! KV reuse across turns: for causal (AR) models the session keeps the K/V of the conversation so
//! far ([`ArPrefixCache`]) and each turn forwards only the tokens the history does not already
//! hold — exact, since a causal token's K/V depend only on earlier tokens. For dLLMs every turn
//! recomputes the conversation: the previous turn's K/V were computed while the reply was still
//! (partly) masked and attend bidirectionally, so reusing them would only approximate, and the
//! prefix-cache mode rebuilds the prompt's K/V in its first forward of each block anyway.
//! Recomputing keeps every dLLM turn exactly equal to a fresh run of the rendered conversation.

use std::ops::ControlFlow;

use super::ar::ArPrefixCache;
use super::frame::{CancelFlag, StepFrame};
use super::output::{trim_at_stop, DecodeOutput};
use super::settings::DecodeSettings;
use crate::backend::Backend;
use crate::error::Result;
use crate::model::{ChatMessage, ChatTemplate, LoadedModel, TextTokenizer};

/// The assistant's answer to one turn.
#[derive(Debug, Clone)]
pub struct ChatReply {
    /// Reply text (special tokens dropped).
    pub text: String,
    /// Reply token ids, cut before the first stop token.
    pub tokens: Vec<u32>,
    /// The full decoding result of the turn.
    pub output: DecodeOutput,
}

/// A conversation: history, template and decoding settings.
#[derive(Debug, Clone)]
pub struct ChatSession {
    /// Turns so far (system, user, assistant, ...).
    pub messages: Vec<ChatMessage>,
    /// How turns are rendered into a prompt.
    pub template: ChatTemplate,
    /// Settings every turn decodes with.
    pub settings: DecodeSettings,
    /// K/V of the conversation so far (causal models only).
    pub ar_cache: ArPrefixCache,
}

impl ChatSession {
    /// An empty conversation.
    pub fn new(template: ChatTemplate, settings: DecodeSettings) -> Self {
        ChatSession { messages: Vec::new(), template, settings, ar_cache: ArPrefixCache::default() }
    }

    /// An empty conversation with a loaded model's template.
    pub fn for_model(model: &LoadedModel, settings: DecodeSettings) -> Self {
        ChatSession::new(model.template.clone(), settings)
    }

    /// Token ids of the history rendered with the assistant prompt appended.
    pub fn prompt_ids(&self, tokenizer: &TextTokenizer) -> Result<Vec<u32>> {
        tokenizer.encode(&self.template.render(&self.messages, true))
    }

    /// Ids that end an assistant turn (see [`crate::run::stop_ids`]).
    pub fn stop_ids(&self, backend: &dyn Backend, tokenizer: &TextTokenizer) -> Vec<u32> {
        crate::run::stop_ids(backend.config(), &self.settings, tokenizer, &self.template)
    }

    /// Adds `user_text`, decodes the reply (streaming frames), appends it and returns it. On error
    /// the user turn is removed again so the history stays consistent.
    pub fn reply(
        &mut self,
        backend: &mut dyn Backend,
        tokenizer: &TextTokenizer,
        user_text: &str,
        cancel: &CancelFlag,
        mut on_frame: impl FnMut(&StepFrame) -> ControlFlow<()>,
    ) -> Result<ChatReply> {
        self.messages.push(ChatMessage::user(user_text));
        let result = self.decode_turn(backend, tokenizer, cancel, &mut on_frame);
        match result {
            Ok(reply) => {
                self.messages.push(ChatMessage::assistant(reply.text.clone()));
                Ok(reply)
            }
            Err(e) => {
                self.messages.pop();
                Err(e)
            }
        }
    }

    fn decode_turn(
        &mut self,
        backend: &mut dyn Backend,
        tokenizer: &TextTokenizer,
        cancel: &CancelFlag,
        on_frame: &mut super::denoise::FrameSink<'_>,
    ) -> Result<ChatReply> {
        let prompt = self.prompt_ids(tokenizer)?;
        let stop = self.stop_ids(backend, tokenizer);
        let settings = self.settings.clone();
        let output = if backend.config().arch.is_diffusion() {
            super::generate_dyn(backend, &prompt, &settings, cancel, on_frame)?
        } else {
            super::ar::generate_ar_reusing(backend, &prompt, &settings, cancel, on_frame, &mut self.ar_cache)?
        };
        let tokens = trim_at_stop(&output.tokens, &stop).to_vec();
        let text = tokenizer.decode(&tokens, true);
        Ok(ChatReply { text, tokens, output })
    }
}
