//! From an OpenAI request to a checked job: the model, the settings (the user's choices over the
//! model's defaults, the one rule of every front end), the prompt's token ids and the stop
//! tokens — all through the same `Session` methods a run uses, so a request that passes here
//! is one the engine accepts, and one that does not gets its 400 before it waits in a queue.

use std::sync::Arc;

use unmask_engine::decode::DecodeSettings;
use unmask_engine::model::ChatMessage;
use unmask_engine::run::{BackendSpec, RunPrompt, Session, SettingsOverrides};

use super::error::ApiError;
use super::openai::{ChatMessageIn, ChatRequest, CompletionRequest, ContentIn, Params, PromptIn, StopIn};
use super::state::ServedModel;

/// Which API a request came through (decides the response's shape).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completion,
}

/// Stop strings a request may carry (OpenAI allows 4).
const MAX_STOP_STRINGS: usize = 4;

/// A request checked and ready to queue.
pub struct Prepared {
    pub endpoint: Endpoint,
    pub model: Arc<ServedModel>,
    pub ids: Vec<u32>,
    pub settings: DecodeSettings,
    /// Token ids that end an answer.
    pub stop_ids: Vec<u32>,
    /// Strings that cut the answer's text (response only; the run records the model's answer).
    pub stop_strings: Vec<String>,
    /// What the run records as its prompt: the last message, or the completion prompt.
    pub prompt_text: String,
    pub stream: bool,
    pub include_usage: bool,
    pub stream_steps: bool,
}

/// What a request asks for besides its prompt.
struct Options {
    overrides: SettingsOverrides,
    stop_strings: Vec<String>,
    stream: bool,
    include_usage: bool,
    stream_steps: bool,
    /// The draft model the request expects the server to decode with.
    draft_model: Option<String>,
}

/// Checks a chat request against `model`.
pub fn prepare_chat(model: Arc<ServedModel>, req: ChatRequest) -> Result<Prepared, ApiError> {
    let options = options(req.params)?;
    check_draft(&model, options.draft_model.as_deref())?;
    if req.messages.is_empty() {
        return Err(ApiError::invalid_param("messages", "`messages` is empty"));
    }
    let messages = req.messages.into_iter().enumerate().map(|(i, m)| message(i, m)).collect::<Result<Vec<_>, _>>()?;
    let prompt_text = messages.last().map(|m| m.content.clone()).unwrap_or_default();
    let checked = check(&model, RunPrompt::Chat(&messages), &options.overrides, "messages")?;
    Ok(finish(Endpoint::Chat, model, checked, prompt_text, options))
}

/// Checks a text completion request against `model`.
pub fn prepare_completion(model: Arc<ServedModel>, req: CompletionRequest) -> Result<Prepared, ApiError> {
    let options = options(req.params)?;
    check_draft(&model, options.draft_model.as_deref())?;
    if req.echo == Some(true) {
        return Err(ApiError::unsupported("echo", "`echo: true` is not supported"));
    }
    if req.suffix.as_deref().is_some_and(|s| !s.is_empty()) {
        return Err(ApiError::unsupported("suffix", "`suffix` is not supported"));
    }
    let prompt = match req.prompt {
        PromptIn::Text(t) => t,
        PromptIn::Texts(mut v) if v.len() == 1 => v.remove(0),
        PromptIn::Texts(_) => {
            return Err(ApiError::unsupported("prompt", "exactly one prompt per request is supported"))
        }
        PromptIn::Other(v) => {
            let got = if v.is_array() { "a list of token ids or lists" } else { "not text" };
            return Err(ApiError::invalid_param(
                "prompt",
                format!("`prompt` must be a string ({got} is not supported)"),
            ));
        }
    };
    let checked = check(&model, RunPrompt::Raw(&prompt), &options.overrides, "prompt")?;
    Ok(finish(Endpoint::Completion, model, checked, prompt, options))
}

/// `unmask.draft_model` names the draft the server decodes `model` with (`unmask serve --draft`):
/// a draft is loaded once per server, so a request cannot pick another or switch it on.
fn check_draft(model: &ServedModel, wanted: Option<&str>) -> Result<(), ApiError> {
    match (wanted, model.draft.as_deref()) {
        (None, _) => Ok(()),
        (Some(w), Some(d)) if w == d => Ok(()),
        (Some(w), Some(d)) => Err(ApiError::unsupported(
            "unmask.draft_model",
            format!("this server decodes `{}` with the draft model `{d}`, not `{w}` (the draft is chosen when the server starts: `unmask serve --draft MODEL`)", model.name),
        )),
        (Some(w), None) => Err(ApiError::unsupported(
            "unmask.draft_model",
            format!("this server decodes `{}` without a draft model; start it with `unmask serve -m {} --draft {w}` (autoregressive models only)", model.name, model.name),
        )),
    }
}

/// The engine's view of a request: token ids, settings, stop tokens.
struct Checked {
    ids: Vec<u32>,
    settings: DecodeSettings,
    stop_ids: Vec<u32>,
}

fn check(
    model: &ServedModel,
    prompt: RunPrompt<'_>,
    overrides: &SettingsOverrides,
    prompt_param: &str,
) -> Result<Checked, ApiError> {
    // The run's own session methods. A CPU session only holds the shared model (no buffers),
    // so each request opens one to check itself; the run itself uses the worker's backend.
    let session = Session::open(model.parts.clone(), &BackendSpec::Cpu).map_err(|e| ApiError::from_engine(&e))?;
    let settings = session.settings(overrides).map_err(|e| ApiError::from_engine(&e))?;
    let ids = session.prompt_ids(prompt).map_err(|e| ApiError::invalid_param(prompt_param, e.to_string()))?;
    session.check(&ids, &settings).map_err(|e| ApiError::from_engine(&e))?;
    let stop_ids = session.stop_ids(&settings);
    Ok(Checked { ids, settings, stop_ids })
}

fn finish(endpoint: Endpoint, model: Arc<ServedModel>, c: Checked, prompt_text: String, o: Options) -> Prepared {
    Prepared {
        endpoint,
        model,
        ids: c.ids,
        settings: c.settings,
        stop_ids: c.stop_ids,
        stop_strings: o.stop_strings,
        prompt_text,
        stream: o.stream,
        include_usage: o.include_usage,
        stream_steps: o.stream_steps,
    }
}

fn message(index: usize, m: ChatMessageIn) -> Result<ChatMessage, ApiError> {
    let param = format!("messages[{index}]");
    let content = match m.content {
        ContentIn::Text(t) => t,
        ContentIn::Null => String::new(),
        ContentIn::Parts(parts) => {
            let mut text = String::new();
            for p in parts {
                if p.kind != "text" {
                    return Err(ApiError::unsupported(
                        &param,
                        format!("content parts of type `{}` are not supported (text only)", p.kind),
                    ));
                }
                text.push_str(p.text.as_deref().unwrap_or(""));
            }
            text
        }
    };
    match m.role.as_str() {
        "user" => Ok(ChatMessage::user(content)),
        "assistant" => Ok(ChatMessage::assistant(content)),
        // `developer` is OpenAI's newer name for system instructions.
        "system" | "developer" => Ok(ChatMessage::system(content)),
        other => Err(ApiError::invalid_param(
            &param,
            format!("role `{other}` is not supported (system, developer, user, assistant)"),
        )),
    }
}

/// The settings and switches a request sets.
fn options(p: Params) -> Result<Options, ApiError> {
    if p.n.is_some_and(|n| n != 1) {
        return Err(ApiError::unsupported("n", "only n = 1 is supported"));
    }
    if p.logprobs.as_ref().is_some_and(|v| !(v.is_null() || *v == serde_json::Value::Bool(false))) {
        return Err(ApiError::unsupported("logprobs", "`logprobs` is not supported"));
    }
    if p.tools.as_ref().is_some_and(|v| !(v.is_null() || v.as_array().is_some_and(|a| a.is_empty()))) {
        return Err(ApiError::unsupported("tools", "tool calls are not supported"));
    }
    let ext = p.unmask.unwrap_or_default();
    if ext.stream_steps && !p.stream {
        return Err(ApiError::invalid_param("unmask.stream_steps", "`stream_steps` needs `stream: true`"));
    }
    let gen_length = match p.max_completion_tokens.or(p.max_tokens) {
        None => None,
        Some(0) => return Err(ApiError::invalid_param("max_tokens", "`max_tokens` must be at least 1")),
        Some(n) => Some(
            usize::try_from(n)
                .map_err(|_| ApiError::invalid_param("max_tokens", format!("`max_tokens` {n} is too large")))?,
        ),
    };
    if let Some(t) = p.temperature {
        if !(t.is_finite() && (0.0..=2.0).contains(&t)) {
            return Err(ApiError::invalid_param("temperature", format!("`temperature` {t} must be between 0 and 2")));
        }
    }
    if let Some(v) = p.top_p {
        if !(v.is_finite() && v > 0.0 && v <= 1.0) {
            return Err(ApiError::invalid_param("top_p", format!("`top_p` {v} must be in (0, 1]")));
        }
    }
    let seed = match p.seed {
        None => None,
        Some(s) => Some(
            u64::try_from(s)
                .map_err(|_| ApiError::invalid_param("seed", format!("`seed` {s} must be a non-negative integer")))?,
        ),
    };
    let stop_strings = match p.stop {
        None => Vec::new(),
        Some(StopIn::One(s)) => vec![s],
        Some(StopIn::Many(v)) => v,
    };
    if stop_strings.len() > MAX_STOP_STRINGS {
        return Err(ApiError::invalid_param("stop", format!("at most {MAX_STOP_STRINGS} stop strings are allowed")));
    }
    if stop_strings.iter().any(String::is_empty) {
        return Err(ApiError::invalid_param("stop", "stop strings must not be empty"));
    }
    let overrides = SettingsOverrides {
        gen_length,
        block_length: ext.block_length,
        steps: ext.steps,
        temperature: p.temperature,
        remasking: ext.remasking,
        cfg_scale: ext.cfg_scale,
        threshold: ext.threshold,
        cache: ext.cache,
        seed,
        alg: ext.alg,
        alg_temp: ext.alg_temp,
        top_p: p.top_p,
        top_k: ext.top_k,
        early_stop_eos: ext.early_stop_eos,
        speculative: ext.speculative.and_then(|t| t.into_settings()),
        revision: ext.revision.and_then(|t| t.into_settings()),
        eps: ext.eps,
        ..SettingsOverrides::default()
    };
    Ok(Options {
        overrides,
        stop_strings,
        stream: p.stream,
        include_usage: p.stream_options.is_some_and(|o| o.include_usage),
        stream_steps: ext.stream_steps,
        draft_model: ext.draft_model,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: serde_json::Value) -> Params {
        serde_json::from_value(v).expect("params parse")
    }

    #[test]
    fn openai_fields_and_the_extension_become_overrides() {
        let o = options(params(serde_json::json!({
            "max_tokens": 32, "temperature": 0.5, "top_p": 0.9, "seed": 7, "stop": "\n",
            "unmask": {"steps": 8, "block_length": 16, "threshold": 0.9, "cache": "prefix", "speculative": true}
        })))
        .expect("valid");
        let s = &o.overrides;
        assert_eq!((s.gen_length, s.steps, s.block_length, s.seed), (Some(32), Some(8), Some(16), Some(7)));
        assert_eq!((s.temperature, s.top_p, s.threshold), (Some(0.5), Some(0.9), Some(0.9)));
        assert!(s.speculative.is_some() && s.revision.is_none());
        assert_eq!(o.stop_strings, vec!["\n".to_owned()]);
    }

    #[test]
    fn what_cannot_be_honoured_is_refused() {
        let refused = |v: serde_json::Value| options(params(v)).err().map(|e| e.param.unwrap_or_default());
        assert_eq!(refused(serde_json::json!({"n": 2})).as_deref(), Some("n"));
        assert_eq!(refused(serde_json::json!({"max_tokens": 0})).as_deref(), Some("max_tokens"));
        assert_eq!(refused(serde_json::json!({"seed": -1})).as_deref(), Some("seed"));
        assert_eq!(refused(serde_json::json!({"stop": ["a", "b", "c", "d", "e"]})).as_deref(), Some("stop"));
        assert_eq!(
            refused(serde_json::json!({"unmask": {"stream_steps": true}})).as_deref(),
            Some("unmask.stream_steps")
        );
        assert!(serde_json::from_value::<Params>(serde_json::json!({"unmask": {"stepz": 3}})).is_err());
    }
}
