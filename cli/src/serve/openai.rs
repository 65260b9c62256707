//! The request bodies of OpenAI's chat and text completion APIs (the subset this server reads),
//! and the `unmask` extension object. Fields the server does not know are ignored, as OpenAI's
//! own server ignores them; fields it knows but cannot honour are refused in `request.rs`.

use serde::Deserialize;
use serde_json::Value;
use unmask_engine::decode::revision::RevisionSettings;
use unmask_engine::decode::speculative::SpeculativeSettings;
use unmask_engine::decode::{CacheMode, DreamAlg, Remasking};

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<ChatMessageIn>,
    #[serde(flatten)]
    pub params: Params,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: PromptIn,
    /// Only `false` is supported.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Not supported (a diffusion model could fill it in, but nothing here does yet).
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(flatten)]
    pub params: Params,
}

/// One message of a conversation.
#[derive(Debug, Deserialize)]
pub struct ChatMessageIn {
    pub role: String,
    #[serde(default)]
    pub content: ContentIn,
}

/// Message content: a string, or a list of parts of which only text is read.
#[derive(Debug, Deserialize, Default)]
#[serde(untagged)]
pub enum ContentIn {
    Text(String),
    Parts(Vec<ContentPart>),
    #[default]
    Null,
}

/// One part of a multi-part message.
#[derive(Debug, Deserialize)]
pub struct ContentPart {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// The prompt of a text completion: a string or a list holding one string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum PromptIn {
    Text(String),
    Texts(Vec<String>),
    /// Token ids (not supported: prompts are text here).
    Other(Value),
}

/// `stop`: one string or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StopIn {
    One(String),
    Many(Vec<String>),
}

/// `stream_options`.
#[derive(Debug, Deserialize, Default)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: bool,
}

/// Parameters both endpoints take.
#[derive(Debug, Deserialize, Default)]
pub struct Params {
    #[serde(default)]
    pub max_tokens: Option<u64>,
    /// The newer name of `max_tokens` (chat); wins when both are given.
    #[serde(default)]
    pub max_completion_tokens: Option<u64>,
    #[serde(default)]
    pub temperature: Option<f64>,
    #[serde(default)]
    pub top_p: Option<f64>,
    #[serde(default)]
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Option<StopIn>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Only 1 is supported.
    #[serde(default)]
    pub n: Option<u64>,
    /// Not supported (refused unless absent, false or null).
    #[serde(default)]
    pub logprobs: Option<Value>,
    /// Not supported (refused unless absent, empty or null).
    #[serde(default)]
    pub tools: Option<Value>,
    /// The diffusion extension.
    #[serde(default)]
    pub unmask: Option<Extension>,
}

/// `"unmask": {...}`: decoding options OpenAI's API has no words for, and `stream_steps`.
/// Unknown keys are refused so a typo never silently does nothing.
#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Extension {
    pub steps: Option<usize>,
    pub block_length: Option<usize>,
    pub threshold: Option<f64>,
    pub cache: Option<CacheMode>,
    pub remasking: Option<Remasking>,
    pub cfg_scale: Option<f64>,
    pub alg: Option<DreamAlg>,
    pub alg_temp: Option<f64>,
    pub top_k: Option<usize>,
    pub eps: Option<f64>,
    pub early_stop_eos: Option<bool>,
    /// `true` (defaults), `false`, or an object of speculative-decoding knobs.
    pub speculative: Option<Toggle<SpeculativeSettings>>,
    /// `true` (defaults), `false`, or an object of revision knobs.
    pub revision: Option<Toggle<RevisionSettings>>,
    /// The draft model the server decodes with (`unmask serve --draft`); a request naming
    /// another, or a draft for a model served without one, is refused.
    pub draft_model: Option<String>,
    /// Stream every denoising step's changed positions (`stream: true` only).
    #[serde(default)]
    pub stream_steps: bool,
}

/// A feature switched on with its defaults, off, or on with settings.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Toggle<T> {
    Switch(bool),
    Settings(T),
}

impl<T: Default> Toggle<T> {
    /// The settings when on.
    pub fn into_settings(self) -> Option<T> {
        match self {
            Toggle::Switch(true) => Some(T::default()),
            Toggle::Switch(false) => None,
            Toggle::Settings(s) => Some(s),
        }
    }
}
