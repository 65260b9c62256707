//! Whole-model loading of an HF folder (config, weights, tokenizer, generation defaults) through
//! `load_model`, then a short chat turn: covers the weights' shape checks and the cross-file
//! consistency checks no single-file target reaches.

use unmask_engine::model::load_model;
use unmask_engine::EngineError;

use super::config::mutate_config;
use super::tokenizer::mutate_tokenizer;
use super::{exercise_model, Scratch, Target};
use crate::fuzz::rng::Rng;
use crate::fuzz::{bundle, bytes, json, safetensors_format, seeds, FuzzError};

/// `load_model` on a mutated model folder (a bundle input).
pub struct HfModel {
    scratch: Scratch,
}

impl HfModel {
    pub fn new() -> Result<Self, FuzzError> {
        Ok(HfModel { scratch: Scratch::new()? })
    }
}

impl Target for HfModel {
    fn name(&self) -> &'static str {
        "hf_model"
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        let Ok(s) = seeds::seeds() else { return Vec::new() };
        let mut out: Vec<Vec<u8>> = s.models.iter().map(|(_, f)| bundle::encode(f)).collect();
        out.extend(s.sharded.iter().take(2).map(|f| bundle::encode(f)));
        out
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        let mut files = bundle::decode(input);
        if files.is_empty() || rng.chance(1, 20) {
            bytes::mutate(input, rng, corpus);
            return;
        }
        let pick = |rng: &mut Rng, files: &[(String, Vec<u8>)], name: &str| {
            files.iter().position(|(n, _)| n.as_str() == name).unwrap_or_else(|| rng.below(files.len()))
        };
        let i = match rng.below(20) {
            0..=7 => pick(rng, &files, "config.json"),
            8..=13 => {
                let shards: Vec<usize> = (0..files.len()).filter(|&i| files[i].0.ends_with(".safetensors")).collect();
                if shards.is_empty() {
                    rng.below(files.len())
                } else {
                    *rng.pick(&shards)
                }
            }
            14..=16 => pick(rng, &files, "tokenizer.json"),
            17 => pick(rng, &files, "generation_config.json"),
            _ => {
                let i = rng.below(files.len());
                files.remove(i);
                *input = bundle::encode(&files);
                return;
            }
        };
        let (name, data) = &mut files[i];
        match name.as_str() {
            "config.json" => mutate_config(data, rng, corpus),
            "tokenizer.json" => mutate_tokenizer(data, rng, corpus),
            n if n.ends_with(".safetensors") => safetensors_format::mutate(data, rng, corpus),
            _ => match serde_json::from_slice::<serde_json::Value>(data) {
                Ok(mut v) => {
                    json::mutate(&mut v, rng, &["gen_length", "block_length", "steps", "temperature", "weight_map"]);
                    *data = json::to_bytes(&v, rng);
                }
                Err(_) => bytes::mutate(data, rng, corpus),
            },
        }
        *input = bundle::encode(&files);
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        let dir = self.scratch.path();
        bundle::unpack(input, dir).map_err(|e| EngineError::io(dir, e))?;
        exercise_model(&load_model(dir)?)
    }
}
