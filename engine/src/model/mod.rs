//! Models: configs, checkpoint readers, tokenizers, chat templates and the forward pass.

pub mod arch;
pub(crate) mod chat;
pub mod config;
pub mod embedded;
pub mod gguf;
pub(crate) mod kv_cache;
pub mod safetensors;
pub(crate) mod tokenizer;
pub(crate) mod transformer;
pub mod weights;

use std::path::{Path, PathBuf};

use crate::error::{EngineError, Result};
use crate::files;
pub use crate::kernels::linear::KernelChoice;

pub use chat::{ChatMessage, ChatTemplate, Role};
pub use config::{Architecture, ModelConfig};
pub use kv_cache::{KvCache, KvLayout};
pub use tokenizer::TextTokenizer;
pub use transformer::{BatchItem, ForwardOutput, ForwardRequest, KvMode, Transformer};

/// Decoding defaults shipped with a model (`generation_config.json`), all optional.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct GenerationDefaults {
    pub gen_length: Option<usize>,
    pub block_length: Option<usize>,
    pub steps: Option<usize>,
    pub temperature: Option<f32>,
    pub remasking: Option<crate::decode::Remasking>,
}

impl GenerationDefaults {
    /// The `generation_config.json` in a model directory; none there = no model defaults.
    pub fn read_from_dir(dir: &Path) -> Result<Self> {
        let path = dir.join("generation_config.json");
        if !path.exists() {
            return Ok(Self::default());
        }
        Self::from_json_text(&files::read_text(&path)?, &path)
    }

    /// Reads the keys Unmask uses from a `generation_config.json` (others are ignored), naming
    /// the key and what it holds when one has the wrong type.
    pub fn from_json_text(text: &str, path: &Path) -> Result<Self> {
        use serde_json::Value;
        let json: Value =
            serde_json::from_str(text).map_err(|e| EngineError::config(path, format!("not valid JSON ({e})")))?;
        let Value::Object(obj) = &json else {
            return Err(EngineError::config(path, format!("is {}, expected a JSON object", config::describe(&json))));
        };
        let wrong = |key: &str, v: &Value, what: &str| {
            EngineError::config(path, format!("`{key}` is {}, expected {what}", config::describe(v)))
        };
        let size = |key: &str| -> Result<Option<usize>> {
            match obj.get(key).filter(|v| !v.is_null()) {
                None => Ok(None),
                Some(v) => v
                    .as_u64()
                    .and_then(|x| usize::try_from(x).ok())
                    .map(Some)
                    .ok_or_else(|| wrong(key, v, "a non-negative integer")),
            }
        };
        let temperature = match obj.get("temperature").filter(|v| !v.is_null()) {
            None => None,
            Some(v) => Some(v.as_f64().ok_or_else(|| wrong("temperature", v, "a number"))? as f32),
        };
        let remasking = match obj.get("remasking").filter(|v| !v.is_null()) {
            None => None,
            // The engine's enum reads every spelling it knows; anything else is named, not ignored.
            Some(v @ Value::String(_)) => Some(
                serde_json::from_value(v.clone())
                    .map_err(|_| wrong("remasking", v, "\"low-confidence\" or \"random\""))?,
            ),
            Some(v) => return Err(wrong("remasking", v, "\"low-confidence\" or \"random\"")),
        };
        Ok(GenerationDefaults {
            gen_length: size("gen_length")?,
            block_length: size("block_length")?,
            steps: size("steps")?,
            temperature,
            remasking,
        })
    }
}

/// A model with everything needed to chat with it.
#[derive(Debug)]
pub struct LoadedModel {
    pub path: PathBuf,
    pub transformer: Transformer,
    pub tokenizer: TextTokenizer,
    pub template: ChatTemplate,
    pub generation: GenerationDefaults,
    /// Bytes of tensor data in the checkpoint files.
    pub file_bytes: u64,
}

impl LoadedModel {
    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.transformer.config
    }
}

/// Whether `path` names a GGUF file.
pub fn is_gguf(path: &Path) -> bool {
    path.extension().and_then(|e| e.to_str()).map(|e| e.eq_ignore_ascii_case("gguf")).unwrap_or(false)
}

/// Loads config and weights only (no tokenizer): an HF directory or a `.gguf` file. Quantised matrices are repacked
/// for the int8 kernels ([`KernelChoice::Auto`]); float ones stay as loaded.
pub fn load_transformer(path: &Path) -> Result<(Transformer, u64)> {
    load_transformer_with(path, KernelChoice::Auto)
}

/// As [`load_transformer`], preparing every matrix for `kernels` (e.g. requantise f32 to int8).
pub fn load_transformer_with(path: &Path, kernels: KernelChoice) -> Result<(Transformer, u64)> {
    if !path.exists() {
        return Err(EngineError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    if is_gguf(path) {
        let file = gguf::GgufFile::open(path)?;
        return load_gguf_transformer_with(&file, kernels);
    }
    let dir = if path.is_dir() { path.to_owned() } else { path.parent().unwrap_or(Path::new(".")).to_owned() };
    if dir.join("config.json").exists() {
        files::require_regular(&dir.join("config.json"))?;
    } else {
        return Err(EngineError::NotAModel {
            path: path.to_owned(),
            reason: "no config.json beside it (expected an HF model folder or a .gguf file)".into(),
        });
    }
    let config = ModelConfig::from_hf_file(&dir.join("config.json"))?;
    let src = safetensors::SafetensorsSource::open(&dir)?;
    let names = arch::hf_scheme(&config);
    let weights = weights::ModelWeights::load(&src, names, &config)?;
    let bytes = crate::tensor::TensorSource::data_bytes(&src);
    drop(src);
    let weights = weights.repack(kernels)?;
    Ok((Transformer::new(config, weights), bytes))
}

/// Builds the transformer of an opened GGUF file (llama.cpp tensor names).
pub fn load_gguf_transformer(file: &gguf::GgufFile) -> Result<(Transformer, u64)> {
    load_gguf_transformer_with(file, KernelChoice::Auto)
}

/// As [`load_gguf_transformer`], preparing every matrix for `kernels`.
pub fn load_gguf_transformer_with(file: &gguf::GgufFile, kernels: KernelChoice) -> Result<(Transformer, u64)> {
    let config = ModelConfig::from_gguf(file)?;
    let weights = weights::ModelWeights::load(file, &arch::gguf_names::GgufNames, &config)?.repack(kernels)?;
    let bytes = crate::tensor::TensorSource::data_bytes(file);
    Ok((Transformer::new(config, weights), bytes))
}

/// A model whose config names no EOT id takes its chat template's turn-end token (LLaDA's
/// config has none, its tokenizer has `<|eot_id|>`, and its reference chat code treats it as EOT).
fn fill_eot(config: &mut ModelConfig, tokenizer: &TextTokenizer, template: &ChatTemplate) {
    if config.eot_token_id.is_none() {
        config.eot_token_id = template
            .stop_strings()
            .first()
            .and_then(|s| tokenizer.token_id(s))
            .filter(|&id| (id as usize) < config.vocab);
    }
}

/// Loads a GGUF file with its embedded tokenizer and chat template.
fn load_gguf_model(path: &Path) -> Result<LoadedModel> {
    if !path.exists() {
        return Err(EngineError::io(
            path,
            std::io::Error::new(std::io::ErrorKind::NotFound, "no such file or directory"),
        ));
    }
    let file = gguf::GgufFile::open(path)?;
    let (transformer, file_bytes) = load_gguf_transformer(&file)?;
    let tokenizer = gguf::tokenizer::tokenizer_from_gguf(&file)?;
    // llama.cpp sizes the embedding by the token list, so the two must agree exactly.
    if let Some(tokens) = file.metadata().get("tokenizer.ggml.tokens").and_then(|t| t.as_array()) {
        if tokens.len() != transformer.config.vocab {
            return Err(EngineError::Tokenizer {
                path: path.to_owned(),
                reason: format!(
                    "`tokenizer.ggml.tokens` lists {} tokens, but the model's vocabulary has {}",
                    tokens.len(),
                    transformer.config.vocab
                ),
            });
        }
    }
    if tokenizer.vocab_size() > transformer.config.vocab {
        return Err(EngineError::Tokenizer {
            path: path.to_owned(),
            reason: format!(
                "{} tokens, more than the model's vocab of {}",
                tokenizer.vocab_size(),
                transformer.config.vocab
            ),
        });
    }
    let template = gguf::tokenizer::chat_template_from_gguf(&file, transformer.config.arch);
    let mut transformer = transformer;
    fill_eot(&mut transformer.config, &tokenizer, &template);
    Ok(LoadedModel {
        path: path.to_owned(),
        transformer,
        tokenizer,
        template,
        generation: GenerationDefaults::default(),
        file_bytes,
    })
}

/// Loads a model directory (config, weights, tokenizer, generation defaults) or a `.gguf` file.
pub fn load_model(path: &Path) -> Result<LoadedModel> {
    if is_gguf(path) {
        return load_gguf_model(path);
    }
    let (transformer, file_bytes) = load_transformer(path)?;
    let dir = if path.is_dir() { path.to_owned() } else { path.parent().unwrap_or(Path::new(".")).to_owned() };
    let tokenizer = TextTokenizer::from_file(&dir.join("tokenizer.json"))?;
    if tokenizer.vocab_size() > transformer.config.vocab {
        return Err(EngineError::Tokenizer {
            path: dir.join("tokenizer.json"),
            reason: format!(
                "{} tokens, more than the model's vocab of {}",
                tokenizer.vocab_size(),
                transformer.config.vocab
            ),
        });
    }
    let generation = GenerationDefaults::read_from_dir(&dir)?;
    let template = ChatTemplate::for_arch(transformer.config.arch);
    let mut transformer = transformer;
    fill_eot(&mut transformer.config, &tokenizer, &template);
    Ok(LoadedModel { path: dir, transformer, tokenizer, template, generation, file_bytes })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::Remasking;

    #[test]
    fn generation_defaults_read_every_remasking_spelling_and_name_a_bad_one() {
        let read = |text: &str| GenerationDefaults::from_json_text(text, Path::new("m/generation_config.json"));
        for spelling in ["low_confidence", "low-confidence"] {
            let g = read(&format!(r#"{{"steps": 8, "remasking": "{spelling}"}}"#)).unwrap();
            assert_eq!((g.steps, g.remasking), (Some(8), Some(Remasking::LowConfidence)));
        }
        assert_eq!(read(r#"{"remasking": "random"}"#).unwrap().remasking, Some(Remasking::Random));
        for bad in [r#"{"remasking": "lowest"}"#, r#"{"remasking": 3}"#] {
            let e = read(bad).unwrap_err().to_string();
            assert!(e.contains("m/generation_config.json") && e.contains("`remasking`"), "{e}");
        }
    }
}
