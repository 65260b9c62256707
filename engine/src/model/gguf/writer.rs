//! A small GGUF v3 writer and an HF-checkpoint → GGUF exporter using llama.cpp's names and keys.

use crate::kernels::quant::TensorToF32;
use std::path::Path;

use serde_json::Value;

use super::ggml_id_of;
use super::metadata::GgufValue;
use super::reader::{DEFAULT_ALIGNMENT, GGUF_MAGIC};
use crate::error::{EngineError, Result};
use crate::kernels::quant::quantize_q8_0;
use crate::model::arch::gguf_names::GgufNames;
use crate::model::arch::{hf_scheme, ExpertLayout, Global, NameScheme, Part};
use crate::model::config::ModelConfig;
use crate::model::safetensors::SafetensorsSource;
use crate::tensor::{DType, TensorSource};

struct PendingTensor {
    name: String,
    dtype: DType,
    /// Row-major, outermost first (written reversed as ggml `ne`).
    shape: Vec<usize>,
    data: Vec<u8>,
}

/// Builds a GGUF v3 file in memory: metadata key/values, then tensors aligned to 32 bytes.
#[derive(Default)]
pub struct GgufWriter {
    kvs: Vec<(String, GgufValue)>,
    tensors: Vec<PendingTensor>,
}

impl GgufWriter {
    /// An empty writer.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds (or replaces) a metadata key.
    pub fn add_kv(&mut self, key: impl Into<String>, value: GgufValue) {
        let key = key.into();
        match self.kvs.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = value,
            None => self.kvs.push((key, value)),
        }
    }

    /// Adds a tensor from its already-encoded bytes (`shape` row-major, outermost first).
    pub fn add_raw_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: &[usize],
        data: Vec<u8>,
    ) -> Result<()> {
        let name = name.into();
        let n: usize = shape.iter().product();
        let row = shape.last().copied().unwrap_or(1);
        if ggml_id_of(dtype).is_none() || dtype.bytes_for(row).is_none() || dtype.bytes_for(n) != Some(data.len()) {
            return Err(EngineError::UnsupportedDType {
                name,
                dtype: format!("{dtype} for shape {shape:?} with {} bytes", data.len()),
            });
        }
        self.tensors.push(PendingTensor { name, dtype, shape: shape.to_vec(), data });
        Ok(())
    }

    /// Encodes f32 values as `dtype` (F32, F16 or Q8_0) and adds them.
    pub fn add_f32_tensor(
        &mut self,
        name: impl Into<String>,
        dtype: DType,
        shape: &[usize],
        values: &[f32],
    ) -> Result<()> {
        let name = name.into();
        let data = encode_f32(values, dtype).ok_or_else(|| EngineError::UnsupportedDType {
            name: name.clone(),
            dtype: format!("{dtype} (writer encodes F32, F16, Q8_0 with whole blocks)"),
        })?;
        self.add_raw_tensor(name, dtype, shape, data)
    }

    /// The whole file as bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&GGUF_MAGIC.to_le_bytes());
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.kvs.len() as u64).to_le_bytes());
        for (k, v) in &self.kvs {
            put_str(&mut out, k);
            out.extend_from_slice(&v.value_type().id().to_le_bytes());
            put_value(&mut out, v);
        }
        let align = DEFAULT_ALIGNMENT;
        let mut offset = 0usize;
        for t in &self.tensors {
            put_str(&mut out, &t.name);
            out.extend_from_slice(&(t.shape.len() as u32).to_le_bytes());
            for &d in t.shape.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            // `add_raw_tensor` only accepts dtypes with a ggml id.
            out.extend_from_slice(&ggml_id_of(t.dtype).unwrap_or(0).to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset = (offset + t.data.len()).div_ceil(align) * align;
        }
        out.resize(out.len().div_ceil(align) * align, 0);
        for t in &self.tensors {
            out.extend_from_slice(&t.data);
            out.resize(out.len().div_ceil(align) * align, 0);
        }
        out
    }

    /// Writes the file.
    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_bytes()).map_err(|e| EngineError::io(path, e))
    }
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_value(out: &mut Vec<u8>, v: &GgufValue) {
    match v {
        GgufValue::U8(x) => out.push(*x),
        GgufValue::I8(x) => out.push(*x as u8),
        GgufValue::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::Bool(x) => out.push(*x as u8),
        GgufValue::String(s) => put_str(out, s),
        GgufValue::Array(t, items) => {
            out.extend_from_slice(&t.id().to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for i in items {
                put_value(out, i);
            }
        }
        GgufValue::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
        GgufValue::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
    }
}

fn encode_f32(values: &[f32], dtype: DType) -> Option<Vec<u8>> {
    match dtype {
        DType::F32 => Some(values.iter().flat_map(|v| v.to_le_bytes()).collect()),
        DType::F16 => Some(values.iter().flat_map(|v| half::f16::from_f32(*v).to_le_bytes()).collect()),
        DType::Q8_0 => quantize_q8_0(values),
        _ => None,
    }
}

/// A string-array metadata value.
pub fn string_array<S: AsRef<str>>(items: &[S]) -> GgufValue {
    GgufValue::Array(super::ValueType::String, items.iter().map(|s| GgufValue::String(s.as_ref().to_owned())).collect())
}

/// Reorders the rows of each head from rotate-half to adjacent-pair order (llama.cpp `permute`):
/// new row `2i + j` of a head is old row `j·d/2 + i`.
pub fn permute_rows_for_interleaved(w: &[f32], n_heads: usize, k_in: usize) -> Vec<f32> {
    let rows = w.len() / k_in.max(1);
    let d = rows / n_heads.max(1);
    let mut out = vec![0.0f32; w.len()];
    for h in 0..n_heads {
        for i in 0..d / 2 {
            for j in 0..2 {
                let new = h * d + 2 * i + j;
                let old = h * d + j * (d / 2) + i;
                out[new * k_in..(new + 1) * k_in].copy_from_slice(&w[old * k_in..(old + 1) * k_in]);
            }
        }
    }
    out
}

/// Converts an HF-format model directory (LLaDA, Dream, LLaDA-MoE, Llama, Qwen2/3, Qwen3-MoE) to a GGUF with
/// llama.cpp's architecture names, keys and tensor names. Matrices are stored as `dtype`
/// (F32, F16 or Q8_0; rows that are not whole Q8_0 blocks stay F32); 1-D tensors stay F32.
/// Tokenizer metadata is written when the directory has a BPE `tokenizer.json`.
pub fn export_gguf(model_dir: &Path, out_path: &Path, dtype: DType) -> Result<()> {
    if !matches!(dtype, DType::F32 | DType::F16 | DType::Q8_0) {
        return Err(EngineError::UnsupportedDType { name: out_path.display().to_string(), dtype: dtype.to_string() });
    }
    let cfg = ModelConfig::from_hf_file(&model_dir.join("config.json"))?;
    let src = SafetensorsSource::open(model_dir)?;
    let hf = hf_scheme(&cfg);
    let mut w = GgufWriter::new();
    write_config_keys(&mut w, &cfg, model_dir, dtype);
    let tok = model_dir.join("tokenizer.json");
    if tok.exists() {
        write_tokenizer_keys(&mut w, &cfg, &tok)?;
    }
    let permute = cfg.arch.family().gguf().permuted_rope;
    let matrix = |w: &mut GgufWriter, name: String, shape: &[usize], v: &[f32]| -> Result<()> {
        let row = shape.last().copied().unwrap_or(1);
        let dt = if dtype.bytes_for(row).is_some() { dtype } else { DType::F32 };
        w.add_f32_tensor(name, dt, shape, v)
    };
    let gg = GgufNames;
    for g in [Global::Embedding, Global::FinalNorm, Global::LmHead] {
        let name = hf.global(g);
        if !src.contains(&name) {
            continue;
        }
        let t = src.get(&name)?;
        let v = t.to_f32_vec()?;
        if t.shape.len() == 1 {
            w.add_f32_tensor(gg.global(g), DType::F32, &t.shape, &v)?;
        } else {
            matrix(&mut w, gg.global(g), &t.shape, &v)?;
        }
    }
    let parts = [
        Part::AttnNorm,
        Part::Q,
        Part::K,
        Part::V,
        Part::O,
        Part::QBias,
        Part::KBias,
        Part::VBias,
        Part::QNorm,
        Part::KNorm,
        Part::FfnNorm,
        Part::Gate,
        Part::Up,
        Part::Down,
        Part::Router,
    ];
    for l in 0..cfg.n_layers {
        for p in parts {
            let name = hf.layer(l, p);
            if !src.contains(&name) {
                continue;
            }
            let t = src.get(&name)?;
            let mut v = t.to_f32_vec()?;
            if permute {
                let cols = if t.shape.len() == 2 { t.shape[1] } else { 1 };
                match p {
                    Part::Q | Part::QBias => v = permute_rows_for_interleaved(&v, cfg.n_heads, cols),
                    Part::K | Part::KBias => v = permute_rows_for_interleaved(&v, cfg.n_kv_heads, cols),
                    _ => {}
                }
            }
            if t.shape.len() == 1 {
                w.add_f32_tensor(gg.layer(l, p), DType::F32, &t.shape, &v)?;
            } else {
                matrix(&mut w, gg.layer(l, p), &t.shape, &v)?;
            }
        }
        if let Some(m) = &cfg.moe {
            if !matches!(hf.expert_layout(), ExpertLayout::PerExpert) {
                continue;
            }
            for p in [Part::Gate, Part::Up, Part::Down] {
                let mut all = Vec::new();
                let mut shape = Vec::new();
                for e in 0..m.n_experts {
                    let t = src.require(&hf.expert(l, e, p))?;
                    shape = t.shape.clone();
                    all.extend(t.to_f32_vec()?);
                }
                let mut stacked = vec![m.n_experts];
                stacked.extend(shape);
                matrix(&mut w, gg.expert(l, 0, p), &stacked, &all)?;
            }
        }
    }
    w.write(out_path)
}

fn write_config_keys(w: &mut GgufWriter, cfg: &ModelConfig, model_dir: &Path, dtype: DType) {
    let a = cfg.arch.gguf_name();
    let u = |x: usize| GgufValue::U32(x as u32);
    w.add_kv("general.architecture", GgufValue::String(a.into()));
    let name = model_dir.file_name().and_then(|n| n.to_str()).unwrap_or("model");
    w.add_kv("general.name", GgufValue::String(name.into()));
    let file_type = match dtype {
        DType::F16 => 1,
        DType::Q8_0 => 7,
        _ => 0,
    };
    w.add_kv("general.file_type", GgufValue::U32(file_type));
    w.add_kv(format!("{a}.context_length"), u(cfg.max_seq));
    w.add_kv(format!("{a}.embedding_length"), u(cfg.hidden));
    w.add_kv(format!("{a}.block_count"), u(cfg.n_layers));
    w.add_kv(format!("{a}.feed_forward_length"), u(cfg.ffn));
    w.add_kv(format!("{a}.attention.head_count"), u(cfg.n_heads));
    w.add_kv(format!("{a}.attention.head_count_kv"), u(cfg.n_kv_heads));
    w.add_kv(format!("{a}.attention.key_length"), u(cfg.head_dim));
    w.add_kv(format!("{a}.attention.value_length"), u(cfg.head_dim));
    w.add_kv(format!("{a}.attention.layer_norm_rms_epsilon"), GgufValue::F32(cfg.rms_eps));
    w.add_kv(format!("{a}.rope.freq_base"), GgufValue::F32(cfg.rope_theta));
    w.add_kv(format!("{a}.rope.dimension_count"), u(cfg.rotary_dim));
    w.add_kv(format!("{a}.vocab_size"), u(cfg.vocab));
    if let Some(m) = &cfg.moe {
        w.add_kv(format!("{a}.expert_count"), u(m.n_experts));
        w.add_kv(format!("{a}.expert_used_count"), u(m.top_k));
        w.add_kv(format!("{a}.expert_feed_forward_length"), u(m.expert_ffn));
        w.add_kv(format!("{a}.expert_weights_norm"), GgufValue::Bool(m.norm_topk_prob));
    }
    if cfg.arch.is_diffusion() {
        w.add_kv(format!("{a}.attention.causal"), GgufValue::Bool(false));
        // Dream writes no key (absent means shifted), as llama.cpp's converter does.
        if !cfg.shift_logits {
            w.add_kv("diffusion.shift_logits", GgufValue::Bool(false));
        }
    }
    let ids = [
        ("tokenizer.ggml.bos_token_id", cfg.bos_token_id),
        ("tokenizer.ggml.eos_token_id", cfg.eos_token_id),
        ("tokenizer.ggml.eot_token_id", cfg.eot_token_id),
        ("tokenizer.ggml.padding_token_id", cfg.pad_token_id),
        ("tokenizer.ggml.mask_token_id", cfg.mask_token_id),
    ];
    for (k, v) in ids {
        if let Some(id) = v {
            w.add_kv(k, GgufValue::U32(id));
        }
    }
    if cfg.arch.family().gguf().add_bos {
        w.add_kv("tokenizer.ggml.add_bos_token", GgufValue::Bool(true));
    }
}

/// llama.cpp token types.
const TOKEN_NORMAL: i32 = 1;
const TOKEN_CONTROL: i32 = 3;
const TOKEN_USER_DEFINED: i32 = 4;
const TOKEN_UNUSED: i32 = 5;

/// Writes `tokenizer.ggml.*` for a byte-level BPE `tokenizer.json` (llama.cpp model `gpt2`).
fn write_tokenizer_keys(w: &mut GgufWriter, cfg: &ModelConfig, path: &Path) -> Result<()> {
    let bad = |reason: String| EngineError::Tokenizer { path: path.to_owned(), reason };
    let text = std::fs::read_to_string(path).map_err(|e| EngineError::io(path, e))?;
    let json: Value = serde_json::from_str(&text).map_err(|e| bad(format!("invalid JSON: {e}")))?;
    let model = json.get("model").ok_or_else(|| bad("no `model`".into()))?;
    if model.get("type").and_then(|t| t.as_str()) != Some("BPE") {
        return Err(bad("only BPE tokenizer.json files can be exported".into()));
    }
    let vocab = model.get("vocab").and_then(|v| v.as_object()).ok_or_else(|| bad("no BPE vocab".into()))?;
    let mut tokens: Vec<Option<(String, i32)>> = Vec::new();
    let mut put = |id: usize, s: &str, ty: i32| {
        if tokens.len() <= id {
            tokens.resize(id + 1, None);
        }
        tokens[id] = Some((s.to_owned(), ty));
    };
    for (s, id) in vocab {
        let id = id.as_u64().ok_or_else(|| bad(format!("token {s} has a non-integer id")))? as usize;
        if id > 16 << 20 {
            return Err(bad(format!("token id {id} is implausibly large")));
        }
        put(id, s, TOKEN_NORMAL);
    }
    for t in json.get("added_tokens").and_then(|a| a.as_array()).map(|a| a.as_slice()).unwrap_or(&[]) {
        let (Some(id), Some(s)) = (t.get("id").and_then(|i| i.as_u64()), t.get("content").and_then(|c| c.as_str()))
        else {
            continue;
        };
        let special = t.get("special").and_then(|s| s.as_bool()).unwrap_or(false);
        put(id as usize, s, if special { TOKEN_CONTROL } else { TOKEN_USER_DEFINED });
    }
    // llama.cpp pads holes and the tail up to the embedding size with unused `[PAD{i}]` tokens.
    let n = tokens.len().max(cfg.vocab);
    let mut strs = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    for i in 0..n {
        match tokens.get(i).cloned().flatten() {
            Some((s, t)) => {
                strs.push(s);
                types.push(GgufValue::I32(t));
            }
            None => {
                strs.push(format!("[PAD{i}]"));
                types.push(GgufValue::I32(TOKEN_UNUSED));
            }
        }
    }
    let merges: Vec<String> = model
        .get("merges")
        .and_then(|m| m.as_array())
        .map(|m| {
            m.iter()
                .filter_map(|x| match x {
                    Value::String(s) => Some(s.clone()),
                    Value::Array(p) if p.len() == 2 => Some(format!("{} {}", p[0].as_str()?, p[1].as_str()?)),
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    let pre = detect_pre(json.get("pre_tokenizer")).unwrap_or(cfg.arch.family().gguf().pre_tokenizer);
    w.add_kv("tokenizer.ggml.model", GgufValue::String("gpt2".into()));
    w.add_kv("tokenizer.ggml.pre", GgufValue::String(pre.into()));
    w.add_kv("tokenizer.ggml.tokens", string_array(&strs));
    w.add_kv("tokenizer.ggml.token_type", GgufValue::Array(super::ValueType::I32, types));
    w.add_kv("tokenizer.ggml.merges", string_array(&merges));
    let cfg_path = path.with_file_name("tokenizer_config.json");
    if let Ok(text) = std::fs::read_to_string(&cfg_path) {
        if let Ok(tc) = serde_json::from_str::<Value>(&text) {
            if let Some(t) = tc.get("chat_template").and_then(|t| t.as_str()) {
                w.add_kv("tokenizer.chat_template", GgufValue::String(t.into()));
            }
        }
    }
    Ok(())
}

/// llama.cpp's `tokenizer.ggml.pre` name for an HF pre-tokenizer we recognise (by its split regex).
fn detect_pre(pre: Option<&Value>) -> Option<&'static str> {
    let text = pre?.to_string();
    // JSON-escaped regex fragments: Llama-3 groups digits by three, Qwen2 splits them singly.
    if text.contains(r"\\p{N}{1,3}") {
        Some("llama-bpe")
    } else if text.contains(r"\\p{L}+|\\p{N}|") {
        Some("qwen2")
    } else if text.contains("\"Digits\"") && text.contains("\"ByteLevel\"") {
        Some("smollm")
    } else if text.contains("\"ByteLevel\"") && text.contains("\"use_regex\":true") {
        Some("gpt-2")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_tokenizer_names_are_detected() {
        let split = |re: &str| {
            serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": re}, "behavior": "Isolated", "invert": false},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]})
        };
        let llama3 = split(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        );
        let qwen = split(
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        );
        let smol = serde_json::json!({"type": "Sequence", "pretokenizers": [
            {"type": "Digits", "individual_digits": true},
            {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true}]});
        let gpt2 = serde_json::json!({"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true});
        assert_eq!(detect_pre(Some(&llama3)), Some("llama-bpe"));
        assert_eq!(detect_pre(Some(&qwen)), Some("qwen2"));
        assert_eq!(detect_pre(Some(&smol)), Some("smollm"));
        assert_eq!(detect_pre(Some(&gpt2)), Some("gpt-2"));
        assert_eq!(detect_pre(None), None);
    }

    #[test]
    fn permutation_pairs_halves() {
        // One head of 4 rows, 1 column: [r0, r1, r2, r3] -> [r0, r2, r1, r3].
        assert_eq!(permute_rows_for_interleaved(&[0.0, 1.0, 2.0, 3.0], 1, 1), vec![0.0, 2.0, 1.0, 3.0]);
    }
}
