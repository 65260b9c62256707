//! Safetensors: a single file's header and data, and a sharded model's index.

use unmask_engine::kernels::quant::TensorToF32;
use unmask_engine::model::safetensors::SafetensorsSource;
use unmask_engine::tensor::{DType, TensorSource};
use unmask_engine::EngineError;

use super::{Scratch, Target};
use crate::fuzz::rng::Rng;
use crate::fuzz::seeds::{self, repo_root};
use crate::fuzz::{bundle, bytes, json, safetensors_format, FuzzError};

/// Tensors above this are opened but not converted (keeps executions fast).
const CONVERT_LIMIT: usize = 1 << 20;

/// Reads every tensor of an opened source the way the loader does.
fn read_all(src: &SafetensorsSource) -> Result<(), EngineError> {
    for name in src.names() {
        let t = src.get(&name)?;
        if t.data.len() > CONVERT_LIMIT {
            continue;
        }
        match t.dtype {
            DType::I64 | DType::I32 => drop(t.to_i64_vec()?),
            DType::U8 => {}
            _ => {
                drop(t.to_f32_vec()?);
                let _ = t.first_non_finite();
            }
        }
    }
    Ok(())
}

/// One `.safetensors` file: length prefix, JSON header, data.
pub struct Header {
    scratch: Scratch,
}

impl Header {
    pub fn new() -> Result<Self, FuzzError> {
        Ok(Header { scratch: Scratch::new()? })
    }
}

impl Target for Header {
    fn name(&self) -> &'static str {
        "safetensors_header"
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = match seeds::seeds() {
            Ok(s) => s.models.iter().filter_map(|(_, f)| seeds::file(f, "model.safetensors")).collect(),
            Err(_) => Vec::new(),
        };
        let root = repo_root();
        for rel in [
            "tests/golden/quant/Q8_0.safetensors",
            "tests/golden/quant/input.safetensors",
            "tests/golden/qwen3/model.safetensors",
        ] {
            out.extend(std::fs::read(root.join(rel)).ok());
        }
        out
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        safetensors_format::mutate(input, rng, corpus);
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        let path = self.scratch.write("model.safetensors", input)?;
        read_all(&SafetensorsSource::open(&path)?)
    }
}

/// A sharded checkpoint: `model.safetensors.index.json` plus its shards (a bundle input).
pub struct Index {
    scratch: Scratch,
}

impl Index {
    pub fn new() -> Result<Self, FuzzError> {
        Ok(Index { scratch: Scratch::new()? })
    }
}

const INDEX: &str = "model.safetensors.index.json";
/// Shard names worth pointing the index at: escapes, the index itself, missing files.
const HOSTILE_SHARDS: &[&str] = &[
    "../model.safetensors",
    "/etc/hostname",
    "model.safetensors.index.json",
    "missing.safetensors",
    "",
    ".",
    "config.json",
    "sub/dir.safetensors",
    "a\u{0}b",
];

impl Target for Index {
    fn name(&self) -> &'static str {
        "safetensors_index"
    }
    fn seeds(&self) -> Vec<Vec<u8>> {
        match seeds::seeds() {
            Ok(s) => s.sharded.iter().map(|f| bundle::encode(f)).collect(),
            Err(_) => Vec::new(),
        }
    }
    fn mutate(&self, input: &mut Vec<u8>, rng: &mut Rng, corpus: &[Vec<u8>]) {
        let mut files = bundle::decode(input);
        if files.is_empty() || rng.chance(1, 10) {
            bytes::mutate(input, rng, corpus);
            return;
        }
        let i = match files.iter().position(|(n, _)| n == INDEX) {
            Some(i) if rng.chance(2, 3) => i,
            _ => rng.below(files.len()),
        };
        let (name, data) = &mut files[i];
        if name == INDEX {
            match serde_json::from_slice::<serde_json::Value>(data) {
                Ok(mut v) => {
                    if rng.chance(1, 2) {
                        if let Some(map) = v.get_mut("weight_map").and_then(|m| m.as_object_mut()) {
                            let keys: Vec<String> = map.keys().cloned().collect();
                            if !keys.is_empty() {
                                let k = rng.pick(&keys).clone();
                                map.insert(k, serde_json::json!(rng.pick(HOSTILE_SHARDS)));
                            }
                        }
                    } else {
                        json::mutate(&mut v, rng, &["weight_map", "metadata", "total_size"]);
                    }
                    *data = json::to_bytes(&v, rng);
                }
                Err(_) => bytes::mutate(data, rng, corpus),
            }
        } else if rng.chance(1, 4) {
            files.remove(i);
        } else {
            safetensors_format::mutate(data, rng, corpus);
        }
        *input = bundle::encode(&files);
    }
    fn execute(&mut self, input: &[u8]) -> Result<(), EngineError> {
        let dir = self.scratch.path();
        bundle::unpack(input, dir).map_err(|e| EngineError::io(dir, e))?;
        read_all(&SafetensorsSource::open(dir)?)
    }
}
