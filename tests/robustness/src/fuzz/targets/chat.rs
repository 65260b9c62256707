//! Chat templates with hostile message contents (NUL bytes, megabyte strings, template markers
//! inside user text, lossily decoded invalid UTF-8), rendered, tokenised and validated against a
//! real model config. The input is a byte string read as a sequence of choices.

use std::path::Path;

use unmask_engine::decode::DecodeSettings;
use unmask_engine::model::{Architecture, ChatMessage, ChatTemplate, ModelConfig, Role, TextTokenizer};
use unmask_engine::EngineError;

use super::{Scratch, Target};
use crate::fuzz::bytes::{self, ByteSource};
use crate::fuzz::rng::Rng;
use crate::fuzz::seeds::{self, repo_root};
use crate::fuzz::FuzzError;

/// Every marker any template or tokenizer treats specially.
const MARKERS: &[&str] = &[
    "<|startoftext|>",
    "<|endoftext|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
    "<|mdm_mask|>",
    "<|im_start|>",
    "<|im_end|>",
    "<role>",
    "</role>",
    "<|role_end|>",
    "<|pad|>",
    "SYSTEM",
    "assistant\n",
    "{{",
    "{%",
];

/// Odd but valid Unicode: BOM, bidi override, combining marks, surrogate-range replacement.
const ODD_UNICODE: &[&str] =
    &["\u{FEFF}", "\u{202E}", "\u{0301}\u{0301}", "\u{FFFD}", "🙂", "\r\n", "\u{2028}", "\u{10FFFF}", "ﷺ", "\u{200D}"];

/// Byte sequences that are not UTF-8 (overlong, surrogates, past U+10FFFF, truncated).
const BAD_UTF8: &[&[u8]] = &[&[0xC0, 0x80], &[0xED, 0xA0, 0x80], &[0xF4, 0x90, 0x80, 0x80], &[0xE2, 0x82], &[0xFF]];

/// Rendered prompts above this are not tokenised (a 1 MiB BPE encode takes seconds).
const ENCODE_LIMIT: usize = 256 << 10;

const MEGABYTE: usize = 1 << 20;

/// Renders fuzz-chosen conversations with every template.
pub struct ChatTemplates {
    tokenizers: Vec<TextTokenizer>,
    configs: Vec<ModelConfig>,
}

impl ChatTemplates {
    pub fn new() -> Result<Self, FuzzError> {
        let s = seeds::seeds()?;
        let scratch = Scratch::new()?;
        let mut tokenizers = Vec::new();
        let real = repo_root().join("models/tiny-llada/tokenizer.json");
        for (i, t) in s.tokenizers.iter().take(1).enumerate() {
            let path = scratch.write(&format!("t{i}.json"), t).map_err(|e| FuzzError::Seeds(e.to_string()))?;
            tokenizers.push(TextTokenizer::from_file(&path).map_err(|e| FuzzError::Seeds(e.to_string()))?);
        }
        if let Ok(t) = TextTokenizer::from_file(&real) {
            tokenizers.push(t);
        }
        let mut configs = Vec::new();
        for (_, files) in &s.models {
            if let Some(c) = seeds::file(files, "config.json") {
                let v: serde_json::Value = serde_json::from_slice(&c).map_err(|e| FuzzError::Seeds(e.to_string()))?;
                configs.push(
                    ModelConfig::from_hf_json(&v, Path::new("config.json"))
                        .map_err(|e| FuzzError::Seeds(e.to_string()))?,
                );
            }
        }
        Ok(ChatTemplates { tokenizers, configs })
    }
}

fn text(src: &mut ByteSource<'_>) -> String {
    match src.u8() % 9 {
        0 | 1 => {
            let n = src.u8() as usize * 4;
            String::from_utf8_lossy(src.take(n)).into_owned()
        }
        2 => (0..src.u8() % 16).map(|_| MARKERS[src.index(MARKERS.len())]).collect(),
        3 => "\u{0}".repeat(src.u8() as usize),
        4 => {
            // Megabyte contents only now and then (each costs milliseconds).
            let unit = MARKERS[src.index(MARKERS.len())];
            let size = if src.one_in(4) { MEGABYTE } else { 4096 };
            unit.repeat(size / unit.len())
        }
        5 => (0..src.u8() % 32).map(|_| ODD_UNICODE[src.index(ODD_UNICODE.len())]).collect(),
        6 => {
            let raw: Vec<u8> =
                (0..src.u8() % 8).flat_map(|_| BAD_UTF8[src.index(BAD_UTF8.len())].iter().copied()).collect();
            String::from_utf8_lossy(&raw).into_owned()
        }
        7 => {
            let mut s = String::from_utf8_lossy(src.take(16)).into_owned();
            s.push_str(MARKERS[src.index(MARKERS.len())]);
            s.push('\u{0}');
            s
        }
        _ => String::new(),
    }
}

impl Target for ChatTemplates {
    fn name(&self) -> &'static str {
        "chat_template"
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        vec![
            vec![0, 1, 3, 1, 0, 5, b'H', b'i', b'!', b'?', b'x'],
            vec![1, 1, 2, 0, 2, 4, 1, 2, 3, 4, 1, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 5],
            vec![3, 0, 4, 2, 6, 5, 0, 5, 6, 3, 1, 6, 2, 1, 4, 3, 0],
            vec![4, 1, 8, 0, 4, 0, 0, 1, 3, 255, 2, 5, 31, 0, 6, 7, 0],
        ]
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        if rng.chance(1, 4) {
            let marker = rng.pick(MARKERS).as_bytes();
            let at = rng.below(input.len() + 1);
            input.splice(at..at, marker.iter().copied());
        } else {
            bytes::mutate(input, rng, corpus);
        }
        input.truncate(4096);
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        let mut src = ByteSource::new(input);
        let arch = src.pick(Architecture::ALL);
        let template = match src.u8() % 5 {
            0 => ChatTemplate::Llada,
            1 => ChatTemplate::ChatMl { default_system: None },
            2 => ChatTemplate::ChatMl { default_system: Some(text(&mut src)) },
            3 => ChatTemplate::LladaMoe,
            _ => ChatTemplate::for_arch(arch),
        };
        let add_generation_prompt = src.one_in(2);
        let n = src.u8() % 9;
        let messages: Vec<ChatMessage> = (0..n)
            .map(|_| {
                let role = src.pick(&[Role::System, Role::User, Role::Assistant]);
                ChatMessage { role, content: text(&mut src) }
            })
            .collect();
        let rendered = template.render(&messages, add_generation_prompt);
        let _ = template.stop_strings();
        if rendered.len() > ENCODE_LIMIT || self.tokenizers.is_empty() {
            return Ok(());
        }
        let tok = &self.tokenizers[src.index(self.tokenizers.len())];
        let ids = tok.encode(&rendered)?;
        let _ = tok.decode(&ids, true);
        let Some(cfg) = self.configs.get(src.index(self.configs.len())) else { return Ok(()) };
        // Ids of the big tokenizer may exceed the small model's vocab: a typed rejection.
        DecodeSettings::default().validate_for(cfg, &ids)
    }
    fn allowance(&self) -> u64 {
        // Up to eight megabyte messages, copied a few times while rendering.
        64 << 20
    }
}
