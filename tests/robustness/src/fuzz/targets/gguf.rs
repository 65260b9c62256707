//! GGUF: the container reader, the metadata → config mapping (plus weights), the embedded
//! tokenizer and chat template, and whole-model loading. One target per stage, each mutating the
//! keys its stage reads, so every stage gets deep executions.

use unmask_engine::kernels::quant::TensorToF32;
use unmask_engine::model::gguf::{reader, tokenizer, GgufFile};
use unmask_engine::tensor::TensorSource;
use unmask_engine::model::{load_gguf_transformer, load_model, ChatMessage, ModelConfig};
use unmask_engine::EngineError;

use super::{exercise_model, probe_tokenizer, Scratch, Target};
use crate::fuzz::rng::Rng;
use crate::fuzz::{gguf_format, seeds, FuzzError};

/// Which part of GGUF loading a target drives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// Header, metadata, tensor infos, tensor data.
    Reader,
    /// `ModelConfig::from_gguf` and the weights' shape checks.
    Config,
    /// `tokenizer_from_gguf` and `chat_template_from_gguf`.
    Tokenizer,
    /// `load_model` on the file, then a short chat turn.
    Model,
}

/// Keys `ModelConfig::from_gguf` reads (`{arch}` = the file's architecture).
const CONFIG_KEYS: &[&str] = &[
    "general.architecture",
    "{arch}.embedding_length",
    "{arch}.attention.head_count",
    "{arch}.attention.head_count_kv",
    "{arch}.attention.key_length",
    "{arch}.vocab_size",
    "{arch}.expert_count",
    "{arch}.expert_used_count",
    "{arch}.expert_feed_forward_length",
    "{arch}.expert_weights_norm",
    "{arch}.feed_forward_length",
    "{arch}.block_count",
    "{arch}.context_length",
    "{arch}.rope.freq_base",
    "{arch}.rope.dimension_count",
    "{arch}.attention.layer_norm_rms_epsilon",
    "{arch}.attention.causal",
    "diffusion.shift_logits",
    "tokenizer.ggml.mask_token_id",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.tokens",
];

/// Keys the GGUF tokenizer and chat-template builders read.
const TOKENIZER_KEYS: &[&str] = &[
    "tokenizer.ggml.model",
    "tokenizer.ggml.pre",
    "tokenizer.ggml.tokens",
    "tokenizer.ggml.merges",
    "tokenizer.ggml.token_type",
    "tokenizer.ggml.scores",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.add_space_prefix",
    "tokenizer.chat_template",
];

const READER_KEYS: &[&str] = &["general.alignment", "general.name", "tokenizer.ggml.tokens"];

/// Tensors above this are opened but not converted.
const CONVERT_LIMIT: u64 = 1 << 20;

/// A GGUF target for one stage.
pub struct GgufTarget {
    stage: Stage,
    scratch: Scratch,
}

impl GgufTarget {
    pub fn new(stage: Stage) -> Result<Self, FuzzError> {
        Ok(GgufTarget { stage, scratch: Scratch::new()? })
    }
    fn focus(&self) -> Vec<&'static str> {
        match self.stage {
            Stage::Reader => READER_KEYS.to_vec(),
            Stage::Config => CONFIG_KEYS.to_vec(),
            Stage::Tokenizer => TOKENIZER_KEYS.to_vec(),
            Stage::Model => CONFIG_KEYS.iter().chain(TOKENIZER_KEYS).copied().collect(),
        }
    }
}

impl Target for GgufTarget {
    fn name(&self) -> &'static str {
        match self.stage {
            Stage::Reader => "gguf_reader",
            Stage::Config => "gguf_config",
            Stage::Tokenizer => "gguf_tokenizer",
            Stage::Model => "gguf_model",
        }
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        let Ok(s) = seeds::seeds() else { return Vec::new() };
        let mut out = s.gguf_models.clone();
        if matches!(self.stage, Stage::Reader | Stage::Tokenizer) {
            out.extend(s.gguf_other.iter().cloned());
        }
        out
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        gguf_format::mutate(input, rng, corpus, &self.focus());
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        if self.stage == Stage::Reader {
            // The in-memory entry point first: it must refuse what it cannot read.
            let path = self.scratch.path().join("model.gguf");
            reader::parse(&path, input)?;
        }
        let path = self.scratch.write("model.gguf", input)?;
        match self.stage {
            Stage::Reader => {
                let file = GgufFile::open(&path)?;
                for info in file.tensor_infos() {
                    let t = file.get(&info.name)?;
                    if info.n_bytes <= CONVERT_LIMIT {
                        drop(t.to_f32_vec()?);
                        let _ = t.first_non_finite();
                    }
                }
                Ok(())
            }
            Stage::Config => {
                let file = GgufFile::open(&path)?;
                let cfg = ModelConfig::from_gguf(&file)?;
                let _ = (cfg.q_dim(), cfg.kv_dim());
                load_gguf_transformer(&file).map(drop)
            }
            Stage::Tokenizer => {
                let file = GgufFile::open(&path)?;
                let tok = tokenizer::tokenizer_from_gguf(&file)?;
                probe_tokenizer(&tok, "")?;
                let arch =
                    ModelConfig::from_gguf(&file).map(|c| c.arch).unwrap_or(unmask_engine::model::Architecture::Llama);
                let template = tokenizer::chat_template_from_gguf(&file, arch);
                let prompt = template.render(&[ChatMessage::system("s"), ChatMessage::user("u")], true);
                tok.encode(&prompt).map(drop)
            }
            Stage::Model => exercise_model(&load_model(&path)?),
        }
    }
}
