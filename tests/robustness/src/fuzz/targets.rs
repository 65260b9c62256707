//! Fuzz targets: one per parser or validator of untrusted input. Each turns fuzz bytes into a
//! call of the engine's real entry point and returns its verdict; a panic is caught by `exec`.

mod chat;
mod config;
mod gguf;
mod model;
mod safetensors;
mod settings;
mod tokenizer;

use std::path::{Path, PathBuf};

use unmask_engine::decode::DecodeSettings;
use unmask_engine::model::{ChatMessage, ForwardRequest, KvMode, LoadedModel, TextTokenizer};
use unmask_engine::EngineError;

use super::rng::Rng;
use super::FuzzError;

/// A fuzz target.
pub trait Target {
    /// Stable name (also the regression sub-folder).
    fn name(&self) -> &'static str;
    /// Valid inputs to start mutating from.
    fn seeds(&self) -> Vec<Vec<u8>>;
    /// Mutates `input` in place; `corpus` supplies splice material.
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]);
    /// Runs the engine on `input`: Ok when accepted, the engine's typed error when rejected.
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError>;
    /// Heap bytes an execution may use beyond what its input size explains.
    fn allowance(&self) -> u64 {
        0
    }
}

/// Names of every target, in run order.
pub const NAMES: &[&str] = &[
    "safetensors_header",
    "safetensors_index",
    "gguf_reader",
    "gguf_config",
    "gguf_tokenizer",
    "gguf_model",
    "hf_config",
    "hf_model",
    "tokenizer_json",
    "chat_template",
    "decode_settings",
];

/// Builds the target called `name`.
pub fn build(name: &str) -> Result<Box<dyn Target>, FuzzError> {
    Ok(match name {
        "safetensors_header" => Box::new(safetensors::Header::new()?),
        "safetensors_index" => Box::new(safetensors::Index::new()?),
        "gguf_reader" => Box::new(gguf::GgufTarget::new(gguf::Stage::Reader)?),
        "gguf_config" => Box::new(gguf::GgufTarget::new(gguf::Stage::Config)?),
        "gguf_tokenizer" => Box::new(gguf::GgufTarget::new(gguf::Stage::Tokenizer)?),
        "gguf_model" => Box::new(gguf::GgufTarget::new(gguf::Stage::Model)?),
        "hf_config" => Box::new(config::HfConfig::new()?),
        "hf_model" => Box::new(model::HfModel::new()?),
        "tokenizer_json" => Box::new(tokenizer::TokenizerJson::new()?),
        "chat_template" => Box::new(chat::ChatTemplates::new()?),
        "decode_settings" => Box::new(settings::Settings::new()?),
        other => return Err(FuzzError::UnknownTarget(other.to_owned())),
    })
}

/// A private scratch folder for the files a target writes (in RAM where `/dev/shm` exists).
#[derive(Debug)]
pub struct Scratch {
    dir: tempfile::TempDir,
}

impl Scratch {
    /// A fresh folder.
    pub fn new() -> Result<Scratch, FuzzError> {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() { tempfile::tempdir_in(shm) } else { tempfile::tempdir() };
        Ok(Scratch { dir: dir.map_err(FuzzError::Io)? })
    }
    /// The folder.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
    /// Writes `bytes` to `name` in the folder and returns its path.
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<PathBuf, EngineError> {
        let path = self.dir.path().join(name);
        std::fs::write(&path, bytes).map_err(|e| EngineError::io(&path, e))?;
        Ok(path)
    }
}

/// Text a hostile user or file might feed a tokenizer.
const PROBE_TEXTS: &[&str] = &[
    "Hello world 123",
    "<|startoftext|><|eot_id|><|mdm_mask|> x <|im_start|>",
    "",
    "\u{0}\u{FFFD}é漢字🙂\r\n\t\u{202E}\u{FEFF}",
];

/// Uses a freshly built tokenizer the way the engine does: encode, decode (valid and invalid ids),
/// single-token text and look-ups. `extra` is input-derived text.
pub fn probe_tokenizer(tok: &TextTokenizer, extra: &str) -> Result<(), EngineError> {
    for text in PROBE_TEXTS.iter().copied().chain([extra]) {
        let ids = tok.encode(text)?;
        let _ = tok.decode(&ids, true);
        let _ = tok.decode(&ids, false);
    }
    let v = u32::try_from(tok.vocab_size()).unwrap_or(u32::MAX);
    for id in [0, 1, v.saturating_sub(1), v, u32::MAX] {
        let _ = tok.token_text(id);
    }
    let _ = tok.decode(&[0, v, u32::MAX], false);
    let _ = tok.token_id("<|mdm_mask|>");
    Ok(())
}

/// Uses a freshly loaded model the way a chat does: render, tokenise, validate the settings and
/// run one small forward pass.
pub fn exercise_model(model: &LoadedModel) -> Result<(), EngineError> {
    probe_tokenizer(&model.tokenizer, "")?;
    let prompt = model.template.render(&[ChatMessage::user("Hi")], true);
    let ids = model.tokenizer.encode(&prompt)?;
    let settings = DecodeSettings { gen_length: 8, block_length: 8, steps: 8, ..DecodeSettings::default() };
    settings.validate_for(model.config(), &ids)?;
    let tokens: Vec<u32> = ids.iter().copied().take(4).collect();
    if tokens.is_empty() {
        return Ok(());
    }
    let positions: Vec<usize> = (0..tokens.len()).collect();
    let req =
        ForwardRequest { tokens: &tokens, positions: &positions, logits_rows: &[tokens.len() - 1], kv: KvMode::Ignore };
    let out = model.transformer.forward(&req, None)?;
    // A wrong-sized result is an engine bug, reported like a crash.
    assert_eq!(out.logits.len(), model.config().vocab, "invariant: one logits row per requested row");
    Ok(())
}
