//! `tokenizer.json` construction (HF `tokenizers` behind `TextTokenizer::from_file`).

use serde_json::{json, Value};
use unmask_engine::model::TextTokenizer;
use unmask_engine::EngineError;

use super::{probe_tokenizer, Scratch, Target};
use crate::fuzz::rng::Rng;
use crate::fuzz::{bytes, json, seeds, FuzzError};

/// Pipeline parts that stress the deserialisers and the encoder: bad regexes, empty patterns,
/// garbage charsmaps, huge strip counts, zero-sized padding and truncation.
fn hostile_component(slot: &str, rng: &mut Rng) -> Value {
    let choices: Vec<Value> = match slot {
        "normalizer" => vec![
            json!({"type": "Replace", "pattern": {"String": ""}, "content": "x"}),
            json!({"type": "Replace", "pattern": {"Regex": "("}, "content": ""}),
            json!({"type": "Precompiled", "precompiled_charsmap": "AAAA"}),
            json!({"type": "Precompiled", "precompiled_charsmap": "////////////"}),
            json!({"type": "Prepend", "prepend": ""}),
            json!({"type": "Sequence", "normalizers": [{"type": "NFKD"}, {"type": "StripAccents"}, {"type": "Strip", "strip_left": true, "strip_right": true}]}),
            json!({"type": "BertNormalizer", "clean_text": true, "handle_chinese_chars": true, "strip_accents": null, "lowercase": true}),
        ],
        "pre_tokenizer" => vec![
            json!({"type": "Split", "pattern": {"Regex": "(a*)*b"}, "behavior": "Isolated", "invert": false}),
            json!({"type": "Split", "pattern": {"Regex": ""}, "behavior": "Removed", "invert": true}),
            json!({"type": "Split", "pattern": {"String": ""}, "behavior": "MergedWithNext", "invert": false}),
            json!({"type": "Metaspace", "replacement": "", "prepend_scheme": "first", "split": true}),
            json!({"type": "Punctuation", "behavior": "Contiguous"}),
            json!({"type": "CharDelimiterSplit", "delimiter": "\u{0}"}),
            json!({"type": "UnicodeScripts"}),
            json!({"type": "Digits", "individual_digits": false}),
        ],
        "decoder" => vec![
            json!({"type": "Strip", "content": " ", "start": u64::MAX, "stop": u64::MAX}),
            json!({"type": "CTC", "pad_token": "", "word_delimiter_token": "", "cleanup": true}),
            json!({"type": "Replace", "pattern": {"String": ""}, "content": "y"}),
            json!({"type": "BPEDecoder", "suffix": ""}),
            json!({"type": "WordPiece", "prefix": "", "cleanup": true}),
            json!({"type": "ByteFallback"}),
        ],
        "post_processor" => vec![
            json!({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[X]", "type_id": 0}}],
                   "pair": [], "special_tokens": {"[X]": {"id": "[X]", "ids": [u32::MAX], "tokens": ["[X]"]}}}),
            json!({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "[X]", "type_id": 0}}],
                   "pair": [], "special_tokens": {"[X]": {"id": "[X]", "ids": [1, 2], "tokens": ["[X]"]}}}),
            json!({"type": "RobertaProcessing", "sep": ["</s>", u32::MAX], "cls": ["<s>", 0], "trim_offsets": true, "add_prefix_space": true}),
            json!({"type": "BertProcessing", "sep": ["[SEP]", 0], "cls": ["[CLS]", 1]}),
        ],
        "truncation" => vec![
            json!({"direction": "Left", "max_length": 0, "strategy": "LongestFirst", "stride": 0}),
            json!({"direction": "Right", "max_length": 2, "strategy": "OnlyFirst", "stride": 5}),
            json!({"direction": "Right", "max_length": u64::MAX, "strategy": "OnlySecond", "stride": u64::MAX}),
        ],
        _ => vec![
            json!({"strategy": "BatchLongest", "direction": "Left", "pad_to_multiple_of": 0, "pad_id": u32::MAX, "pad_type_id": 0, "pad_token": ""}),
            json!({"strategy": {"Fixed": u64::MAX}, "direction": "Right", "pad_to_multiple_of": null, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}),
            json!({"strategy": {"Fixed": 100000}, "direction": "Right", "pad_to_multiple_of": 7, "pad_id": 0, "pad_type_id": 0, "pad_token": "[PAD]"}),
        ],
    };
    choices[rng.below(choices.len())].clone()
}

const SLOTS: &[&str] = &["normalizer", "pre_tokenizer", "decoder", "post_processor", "truncation", "padding"];

/// Mutates a `tokenizer.json`: vocabulary, merges, added tokens, pipeline parts, model type.
pub fn mutate_tokenizer(input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
    let parsed = if rng.chance(9, 10) { serde_json::from_slice::<Value>(input).ok() } else { None };
    let Some(mut v) = parsed else {
        bytes::mutate(input, rng, corpus);
        return;
    };
    match rng.below(10) {
        0 | 1 => json::mutate_under(&mut v, "/model/vocab", rng, &["[UNK]", "<unk>", "a", ""]),
        2 => json::mutate_under(&mut v, "/model/merges", rng, &["a b", "a", "x y", " "]),
        3 | 4 => json::mutate_under(&mut v, "/added_tokens", rng, &["id", "content", "special", "normalized"]),
        5 | 6 => {
            let slot = *rng.pick(SLOTS);
            let value = hostile_component(slot, rng);
            if let Some(o) = v.as_object_mut() {
                o.insert(slot.into(), value);
            }
        }
        7 => {
            let ty = *rng.pick(&["BPE", "WordPiece", "WordLevel", "Unigram", "Nope"]);
            if let Some(m) = v.get_mut("model").and_then(|m| m.as_object_mut()) {
                m.insert("type".into(), json!(ty));
            }
        }
        8 => json::mutate_under(
            &mut v,
            "/model",
            rng,
            &["unk_token", "dropout", "byte_fallback", "fuse_unk", "ignore_merges", "continuing_subword_prefix"],
        ),
        _ => json::mutate(&mut v, rng, SLOTS),
    }
    *input = json::to_bytes(&v, rng);
}

/// `TextTokenizer::from_file` on a mutated `tokenizer.json`, then encode/decode probes.
pub struct TokenizerJson {
    scratch: Scratch,
}

impl TokenizerJson {
    pub fn new() -> Result<Self, FuzzError> {
        Ok(TokenizerJson { scratch: Scratch::new()? })
    }
}

impl Target for TokenizerJson {
    fn name(&self) -> &'static str {
        "tokenizer_json"
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        seeds::seeds().map(|s| s.tokenizers.clone()).unwrap_or_default()
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        mutate_tokenizer(input, rng, corpus);
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        let path = self.scratch.write("tokenizer.json", input)?;
        let tok = TextTokenizer::from_file(&path)?;
        let tail = &input[input.len().saturating_sub(64)..];
        probe_tokenizer(&tok, &String::from_utf8_lossy(tail))
    }
}
