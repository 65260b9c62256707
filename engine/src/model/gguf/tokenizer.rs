//! Builds an HF `tokenizers` tokenizer from a GGUF's embedded vocabulary (`tokenizer.ggml.*`):
//! byte-level BPE (`gpt2`) and SentencePiece-BPE (`llama`).

use std::path::Path;

use tokenizers::decoders::byte_level::ByteLevel as ByteLevelDecoder;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::digits::Digits;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, PreTokenizerWrapper, SplitDelimiterBehavior, Tokenizer};

use super::GgufFile;
use crate::error::{EngineError, Result};
use crate::model::chat::ChatTemplate;
use crate::model::config::Architecture;
use crate::tensor::TensorSource;
use crate::model::tokenizer::TextTokenizer;

/// llama.cpp token types that are matched as whole added tokens.
const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

/// Llama-3 pre-tokenizer split (llama.cpp `llama-bpe`).
const LLAMA3_REGEX: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2 split: as Llama-3 but digits one at a time.
const QWEN2_REGEX: &str =
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// SmolLM2's default system prompt (its chat template inserts it when none is given).
const SMOLLM_SYSTEM: &str = "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

fn err(path: &Path, reason: impl Into<String>) -> EngineError {
    EngineError::Tokenizer { path: path.to_owned(), reason: reason.into() }
}

/// Why `tokenizer.ggml.tokens` is unusable: absent, or present but not a list of strings.
fn tokens_error(file: &GgufFile) -> EngineError {
    let path = file.path();
    match file.metadata().get("tokenizer.ggml.tokens") {
        None => err(path, "no `tokenizer.ggml.tokens` in the GGUF"),
        Some(v) => err(path, format!("`tokenizer.ggml.tokens` is {}, expected a list of strings", v.describe())),
    }
}

/// The pre-tokenizer llama.cpp uses for a `tokenizer.ggml.pre` value.
fn pre_tokenizer(path: &Path, pre: &str) -> Result<PreTokenizerWrapper> {
    let split = |re: &str| -> Result<PreTokenizerWrapper> {
        let s = Split::new(SplitPattern::Regex(re.to_owned()), SplitDelimiterBehavior::Isolated, false)
            .map_err(|e| err(path, format!("pre-tokenizer regex: {e}")))?;
        Ok(Sequence::new(vec![s.into(), ByteLevel::new(false, false, false).into()]).into())
    };
    match pre {
        "llama-bpe" | "llama3" | "llama-v3" | "dbrx" | "smaug-bpe" => split(LLAMA3_REGEX),
        "qwen2" | "deepseek-r1-qwen" | "qwen35" => split(QWEN2_REGEX),
        // SmolLM / StarCoder: single digits, then the GPT-2 split.
        "smollm" | "starcoder" | "refact" => {
            Ok(Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, false, true).into()]).into())
        }
        // Cohere: single digits, then the GPT-2 split (NFC normaliser added by the caller).
        "command-r" => {
            Ok(Sequence::new(vec![Digits::new(true).into(), ByteLevel::new(false, false, true).into()]).into())
        }
        "deepseek-coder" => {
            let mut parts: Vec<PreTokenizerWrapper> = Vec::new();
            for re in [r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[一-龥ࠀ-一가-퟿]+"] {
                let s = Split::new(SplitPattern::Regex(re.to_owned()), SplitDelimiterBehavior::Isolated, false)
                    .map_err(|e| err(path, format!("pre-tokenizer regex: {e}")))?;
                parts.push(s.into());
            }
            parts.push(Digits::new(true).into());
            parts.push(ByteLevel::new(false, false, false).into());
            Ok(Sequence::new(parts).into())
        }
        "default" | "gpt-2" | "gpt2" | "mpt" | "gpt-neox" | "olmo" | "" => {
            Ok(ByteLevel::new(false, false, true).into())
        }
        other => Err(err(path, format!("unsupported pre-tokenizer `{other}`"))),
    }
}

/// Builds the tokenizer of a GGUF (`tokenizer.ggml.model` = `gpt2` byte-level BPE or `llama` SPM).
pub fn tokenizer_from_gguf(file: &GgufFile) -> Result<TextTokenizer> {
    let path = file.path();
    let meta = file.metadata();
    let model = meta.str("tokenizer.ggml.model").ok_or_else(|| err(path, "no `tokenizer.ggml.model` in the GGUF"))?;
    if model == "llama" {
        return spm_tokenizer(file);
    }
    if model != "gpt2" {
        return Err(err(path, format!("unsupported tokenizer model {model}")));
    }
    let tokens =
        meta.str_array("tokenizer.ggml.tokens").ok_or_else(|| tokens_error(file))?;
    let merges = meta.str_array("tokenizer.ggml.merges").unwrap_or_default();
    let types: Vec<i64> = match meta.get("tokenizer.ggml.token_type").and_then(|t| t.as_array()) {
        Some(a) => a.iter().map(|v| v.as_i64().unwrap_or(1)).collect(),
        None => Vec::new(),
    };
    let pre = meta.str("tokenizer.ggml.pre").unwrap_or("default");

    let mut vocab = Vocab::default();
    for (i, t) in tokens.iter().enumerate() {
        // Duplicate strings (e.g. repeated pad tokens) keep their first id, as llama.cpp's map does.
        vocab.entry((*t).to_owned()).or_insert(i as u32);
    }
    let mut pairs = Vec::with_capacity(merges.len());
    for m in &merges {
        let (a, b) = m.split_once(' ').ok_or_else(|| err(path, format!("merge `{m}` has no space")))?;
        pairs.push((a.to_owned(), b.to_owned()));
    }
    // Llama-3 tokenizers look whole words up in the vocabulary before merging.
    let ignore_merges = matches!(pre, "llama-bpe" | "llama3" | "llama-v3");
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .ignore_merges(ignore_merges)
        .build()
        .map_err(|e| err(path, format!("BPE: {e}")))?;
    let mut tk = Tokenizer::new(bpe);
    tk.with_pre_tokenizer(Some(pre_tokenizer(path, pre)?));
    // These vocabularies' HF tokenizers NFC-normalise the input first.
    if matches!(pre, "mpt" | "gpt-neox" | "olmo" | "command-r") {
        tk.with_normalizer(Some(tokenizers::normalizers::unicode::NFC));
    }
    tk.with_decoder(Some(ByteLevelDecoder::default()));
    let added: Vec<AddedToken> = tokens
        .iter()
        .zip(types.iter())
        .filter(|(_, &t)| t == TOKEN_CONTROL || t == TOKEN_USER_DEFINED)
        .map(|(s, &t)| AddedToken::from((*s).to_owned(), t == TOKEN_CONTROL))
        .collect();
    // Control tokens are special (dropped by `decode(skip_special)`); user-defined ones are plain text.
    check_added_lengths(path, added.iter().map(|t| t.content.as_str()))?;
    let (special, normal): (Vec<_>, Vec<_>) = added.into_iter().partition(|t| t.special);
    tk.add_special_tokens(&special);
    tk.add_tokens(&normal);
    TextTokenizer::from_tokenizer(tk, path)
}

/// llama.cpp token type of the `<unk>` piece (special in HF's SentencePiece conversion).
const TOKEN_UNKNOWN: i64 = 2;

/// SentencePiece-BPE (`tokenizer.ggml.model` = `llama`: tokens + scores) as HF's Llama fast
/// tokenizer does it: "▁" for spaces (plus a leading one), BPE merges derived from the scores,
/// byte fallback through the `<0xNN>` pieces.
fn spm_tokenizer(file: &GgufFile) -> Result<TextTokenizer> {
    use tokenizers::decoders::byte_fallback::ByteFallback;
    use tokenizers::decoders::fuse::Fuse;
    use tokenizers::decoders::sequence::Sequence as DecoderSequence;
    use tokenizers::decoders::strip::Strip;
    use tokenizers::normalizers::{Prepend, Replace, Sequence as NormalizerSequence};
    use tokenizers::{DecoderWrapper, NormalizerWrapper};

    let path = file.path();
    let meta = file.metadata();
    let tokens =
        meta.str_array("tokenizer.ggml.tokens").ok_or_else(|| tokens_error(file))?;
    let scores: Vec<f64> = match meta.get("tokenizer.ggml.scores").and_then(|t| t.as_array()) {
        Some(a) if a.len() == tokens.len() => a.iter().map(|v| v.as_f64().unwrap_or(0.0)).collect(),
        _ => return Err(err(path, "SPM vocabulary without one `tokenizer.ggml.scores` entry per token")),
    };
    let types: Vec<i64> = match meta.get("tokenizer.ggml.token_type").and_then(|t| t.as_array()) {
        Some(a) => a.iter().map(|v| v.as_i64().unwrap_or(1)).collect(),
        None => Vec::new(),
    };
    let mut vocab = Vocab::default();
    for (i, t) in tokens.iter().enumerate() {
        vocab.entry((*t).to_owned()).or_insert(i as u32);
    }
    // A merge (l, r) exists for every split of a piece into two pieces; higher-scored results
    // merge first, and among splits of one piece the longer left part first (HF's extractor).
    let mut merges: Vec<(f64, usize, usize, u32, u32, &str, &str)> = Vec::new();
    for (i, t) in tokens.iter().enumerate() {
        let mut local = Vec::new();
        for (at, _) in t.char_indices().skip(1) {
            let (l, r) = t.split_at(at);
            if let (Some(&il), Some(&ir)) = (vocab.get(l), vocab.get(r)) {
                local.push((scores[i], l.chars().count(), r.chars().count(), il, ir, l, r));
            }
        }
        local.sort_by_key(|m| (m.3, m.4));
        merges.extend(local);
    }
    // Stable sort, descending by (score, left length, right length).
    merges.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)).then(b.2.cmp(&a.2)));
    let pairs: Vec<(String, String)> = merges.iter().map(|m| (m.5.to_owned(), m.6.to_owned())).collect();
    let unk = meta
        .get("tokenizer.ggml.unknown_token_id")
        .and_then(|v| v.as_u64())
        .and_then(|i| tokens.get(i as usize))
        .map(|s| (*s).to_owned())
        .unwrap_or_else(|| "<unk>".to_owned());
    let bpe = BPE::builder()
        .vocab_and_merges(vocab, pairs)
        .unk_token(unk)
        .fuse_unk(true)
        .byte_fallback(true)
        .build()
        .map_err(|e| err(path, format!("BPE: {e}")))?;
    let mut tk = Tokenizer::new(bpe);
    let space = Replace::new(" ", "▁").map_err(|e| err(path, e.to_string()))?;
    let add_prefix = meta.get("tokenizer.ggml.add_space_prefix").and_then(|v| v.as_bool()).unwrap_or(true);
    let mut norm: Vec<NormalizerWrapper> = Vec::new();
    if add_prefix {
        norm.push(Prepend::new("▁".to_owned()).into());
    }
    norm.push(space.into());
    tk.with_normalizer(Some(NormalizerSequence::new(norm)));
    let unspace = Replace::new("▁", " ").map_err(|e| err(path, e.to_string()))?;
    let mut dec: Vec<DecoderWrapper> = vec![unspace.into(), ByteFallback::new().into(), Fuse::new().into()];
    if add_prefix {
        dec.push(Strip::new(' ', 1, 0).into());
    }
    tk.with_decoder(Some(DecoderSequence::new(dec)));
    let mut special = Vec::new();
    let mut normal = Vec::new();
    for (s, &t) in tokens.iter().zip(types.iter()) {
        match t {
            TOKEN_CONTROL | TOKEN_UNKNOWN => special.push(AddedToken::from((*s).to_owned(), true)),
            TOKEN_USER_DEFINED => normal.push(AddedToken::from((*s).to_owned(), false)),
            _ => {}
        }
    }
    check_added_lengths(path, special.iter().chain(&normal).map(|t| t.content.as_str()))?;
    tk.add_special_tokens(&special);
    tk.add_tokens(&normal);
    TextTokenizer::from_tokenizer(tk, path)
}

/// Longest control or user-defined token accepted; real ones are a few dozen bytes.
const MAX_ADDED_TOKEN_BYTES: usize = 256;

/// The added-token matcher is quadratic in a token's length: a hostile file would stall loading.
fn check_added_lengths<'a>(path: &Path, tokens: impl Iterator<Item = &'a str>) -> Result<()> {
    for t in tokens {
        if t.len() > MAX_ADDED_TOKEN_BYTES {
            let shown: String = t.chars().take(24).collect();
            return Err(err(
                path,
                format!("control token `{}…` is {} bytes long (at most {MAX_ADDED_TOKEN_BYTES})", shown.escape_default(), t.len()),
            ));
        }
    }
    Ok(())
}

/// Chooses our chat template from `tokenizer.chat_template` (falling back to the family default).
pub fn chat_template_from_gguf(file: &GgufFile, arch: Architecture) -> ChatTemplate {
    match file.metadata().str("tokenizer.chat_template") {
        Some(t) if t.contains("<|im_start|>") => {
            let default_system = if t.contains("SmolLM") {
                Some(SMOLLM_SYSTEM.to_owned())
            } else if t.contains("You are a helpful assistant") {
                Some("You are a helpful assistant.".to_owned())
            } else {
                None
            };
            ChatTemplate::ChatMl { default_system }
        }
        Some(t) if t.contains("<role>") => ChatTemplate::LladaMoe,
        Some(t) if t.contains("<|start_header_id|>") => ChatTemplate::Llada,
        _ => ChatTemplate::for_arch(arch),
    }
}
