//! Valid seed inputs, built in code: a tiny random-weight model of every supported family
//! (hidden 32, one layer, the first 320 tokens of the embedded tiny tokenizer), their GGUF
//! exports, and the small real files the repository already ships (golden configs and GGUFs).
//! Small models keep one model-loading execution near a millisecond.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use serde_json::{json, Value};
use unmask_engine::model::arch::{hf_scheme, Global, Part};
use unmask_engine::model::gguf::export_gguf;
use unmask_engine::tensor::DType;
use unmask_engine::model::ModelConfig;

use super::gguf_format::{self, Val};
use super::rng::Rng;
use super::safetensors_format::{self, TensorSpec};
use super::FuzzError;

/// Vocabulary of the synthetic models (the toy tokenizer keeps ids below it).
pub const VOCAB: usize = 320;

/// Files of one model folder.
pub type Files = Vec<(String, Vec<u8>)>;

/// Every seed, built once per process.
#[derive(Debug)]
pub struct Seeds {
    /// `(family, folder files)` of the synthetic models.
    pub models: Vec<(&'static str, Files)>,
    /// The same models with their weights in two shards behind `model.safetensors.index.json`.
    pub sharded: Vec<Files>,
    /// GGUF exports of the synthetic models (config, tokenizer and weights).
    pub gguf_models: Vec<Vec<u8>>,
    /// Tensor-only and real GGUF files from the repository.
    pub gguf_other: Vec<Vec<u8>>,
    /// `config.json` files: synthetic, golden and embedded models.
    pub configs: Vec<Vec<u8>>,
    /// `tokenizer.json` files: the toy one, the embedded real one, and one per model type.
    pub tokenizers: Vec<Vec<u8>>,
}

static SEEDS: OnceLock<Result<Seeds, String>> = OnceLock::new();

/// The seeds (built on first use).
pub fn seeds() -> Result<&'static Seeds, FuzzError> {
    SEEDS.get_or_init(|| build().map_err(|e| e.to_string())).as_ref().map_err(|e| FuzzError::Seeds(e.clone()))
}

/// The repository root (this crate lives in `tests/robustness`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn build() -> Result<Seeds, FuzzError> {
    let toy = toy_tokenizer()?;
    let mut rng = Rng::new(0x5eed);
    let mut models = Vec::new();
    let mut sharded = Vec::new();
    for (family, config) in synthetic_configs() {
        let tensors = synthetic_tensors(&config, &mut rng)?;
        let config_bytes = serde_json::to_vec_pretty(&config).unwrap_or_default();
        let mut files: Files = vec![
            ("config.json".into(), config_bytes.clone()),
            ("model.safetensors".into(), safetensors_format::build(&tensors)),
            ("tokenizer.json".into(), toy.clone()),
            ("generation_config.json".into(), br#"{"gen_length": 32, "block_length": 8, "steps": 32}"#.to_vec()),
        ];
        if family == "qwen2" {
            files.push((
                "tokenizer_config.json".into(),
                br#"{"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"}"#.to_vec(),
            ));
        }
        sharded.push(shard(&config_bytes, &tensors, &toy));
        models.push((family, files));
    }
    let gguf_models = export_all(&models)?;
    let root = repo_root();
    let mut gguf_other = read_existing(&root.join("tests/golden/quant"), "gguf");
    gguf_other.extend(read_existing(&root.join("tests/golden/gguf"), "gguf"));
    if let Some(spm) = gguf_models.iter().find_map(|g| spm_variant(g)) {
        gguf_other.push(spm);
    }
    let mut configs: Vec<Vec<u8>> = models.iter().filter_map(|(_, f)| file(f, "config.json")).collect();
    for dir in ["llada", "dream", "llada_moe", "llama", "qwen2", "qwen3", "qwen3_moe"] {
        configs.extend(std::fs::read(root.join("tests/golden").join(dir).join("config.json")).ok());
    }
    for dir in ["tiny-llada", "tiny-ar", "tiny-draft", "tiny-llada-moe"] {
        configs.extend(std::fs::read(root.join("models").join(dir).join("config.json")).ok());
    }
    let mut tokenizers = vec![toy];
    tokenizers.extend(std::fs::read(root.join("models/tiny-llada/tokenizer.json")).ok());
    tokenizers.extend(handwritten_tokenizers().iter().map(|t| t.to_string().into_bytes()));
    Ok(Seeds { models, sharded, gguf_models, gguf_other, configs, tokenizers })
}

/// A named file of a folder.
pub fn file(files: &Files, name: &str) -> Option<Vec<u8>> {
    files.iter().find(|(n, _)| n == name).map(|(_, d)| d.clone())
}

fn synthetic_configs() -> Vec<(&'static str, Value)> {
    let ids = json!({"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": 1});
    let hf = |arch: &str, model_type: &str, extra: Value| {
        let mut c = json!({
            "architectures": [arch], "model_type": model_type, "hidden_size": 32, "num_attention_heads": 4,
            "num_key_value_heads": 2, "num_hidden_layers": 1, "intermediate_size": 64, "vocab_size": VOCAB,
            "max_position_embeddings": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "tie_word_embeddings": false
        });
        merge(&mut c, &ids);
        merge(&mut c, &extra);
        c
    };
    let mut llada = json!({
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": 32, "n_heads": 4, "n_kv_heads": 4,
        "n_layers": 1, "mlp_hidden_size": 64, "mlp_ratio": 2, "vocab_size": VOCAB, "embedding_size": VOCAB,
        "max_sequence_length": 256, "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "mask_token_id": 2,
        "eot_token_id": 5, "include_qkv_bias": false, "attention_layer_norm": false, "weight_tying": false
    });
    merge(&mut llada, &ids);
    vec![
        ("llada", llada),
        ("dream", hf("DreamModel", "Dream", json!({"mask_token_id": 2}))),
        (
            "llada-moe",
            hf(
                "LLaDAMoEModelLM",
                "llada_moe",
                json!({"mask_token_id": 2, "num_experts": 4, "num_experts_per_tok": 2,
                       "moe_intermediate_size": 16, "qk_layernorm": true, "norm_topk_prob": false}),
            ),
        ),
        ("llama", hf("LlamaForCausalLM", "llama", json!({"head_dim": 8, "attention_bias": false}))),
        ("qwen2", hf("Qwen2ForCausalLM", "qwen2", json!({}))),
        ("qwen3", hf("Qwen3ForCausalLM", "qwen3", json!({"head_dim": 8, "partial_rotary_factor": 0.5}))),
    ]
}

fn merge(into: &mut Value, from: &Value) {
    if let (Some(a), Some(b)) = (into.as_object_mut(), from.as_object()) {
        for (k, v) in b {
            a.insert(k.clone(), v.clone());
        }
    }
}

/// Every tensor the loader requires for `config`, with small random values (norms are ones).
fn synthetic_tensors(config: &Value, rng: &mut Rng) -> Result<Vec<TensorSpec>, FuzzError> {
    let cfg =
        ModelConfig::from_hf_json(config, Path::new("config.json")).map_err(|e| FuzzError::Seeds(e.to_string()))?;
    let names = hf_scheme(&cfg);
    let (h, v, q, kv, hd) = (cfg.hidden, cfg.vocab, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let mut shapes: Vec<(String, Vec<usize>, bool)> = vec![
        (names.global(Global::Embedding), vec![v, h], false),
        (names.global(Global::LmHead), vec![v, h], false),
        (names.global(Global::FinalNorm), vec![h], true),
    ];
    for l in 0..cfg.n_layers {
        let mut layer = vec![
            (Part::AttnNorm, vec![h], true),
            (Part::Q, vec![q, h], false),
            (Part::K, vec![kv, h], false),
            (Part::V, vec![kv, h], false),
            (Part::O, vec![h, q], false),
            (Part::FfnNorm, vec![h], true),
        ];
        if cfg.qkv_bias {
            layer.extend([
                (Part::QBias, vec![q], false),
                (Part::KBias, vec![kv], false),
                (Part::VBias, vec![kv], false),
            ]);
        }
        if cfg.qk_norm {
            layer.extend([(Part::QNorm, vec![hd], true), (Part::KNorm, vec![hd], true)]);
        }
        match &cfg.moe {
            None => layer.extend([
                (Part::Gate, vec![cfg.ffn, h], false),
                (Part::Up, vec![cfg.ffn, h], false),
                (Part::Down, vec![h, cfg.ffn], false),
            ]),
            Some(m) => {
                layer.push((Part::Router, vec![m.n_experts, h], false));
                for e in 0..m.n_experts {
                    shapes.push((names.expert(l, e, Part::Gate), vec![m.expert_ffn, h], false));
                    shapes.push((names.expert(l, e, Part::Up), vec![m.expert_ffn, h], false));
                    shapes.push((names.expert(l, e, Part::Down), vec![h, m.expert_ffn], false));
                }
            }
        }
        shapes.extend(layer.into_iter().map(|(p, s, norm)| (names.layer(l, p), s, norm)));
    }
    Ok(shapes
        .into_iter()
        .map(|(name, shape, norm)| {
            let n: usize = shape.iter().product();
            let data: Vec<u8> =
                (0..n).flat_map(|_| if norm { 1.0f32 } else { rng.weight() * 0.2 }.to_le_bytes()).collect();
            (name, DType::F32.name(), shape, data)
        })
        .collect())
}

/// The model with its tensors split over two shard files and an index.
fn shard(config: &[u8], tensors: &[TensorSpec], toy: &[u8]) -> Files {
    let half = tensors.len() / 2;
    let names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];
    let mut map = serde_json::Map::new();
    for (i, t) in tensors.iter().enumerate() {
        map.insert(t.0.clone(), json!(names[usize::from(i >= half)]));
    }
    let total: usize = tensors.iter().map(|t| t.3.len()).sum();
    let index = json!({"metadata": {"total_size": total}, "weight_map": map});
    vec![
        ("config.json".into(), config.to_vec()),
        ("model.safetensors.index.json".into(), serde_json::to_vec_pretty(&index).unwrap_or_default()),
        (names[0].into(), safetensors_format::build(&tensors[..half])),
        (names[1].into(), safetensors_format::build(&tensors[half..])),
        ("tokenizer.json".into(), toy.to_vec()),
    ]
}

fn export_all(models: &[(&'static str, Files)]) -> Result<Vec<Vec<u8>>, FuzzError> {
    let tmp = tempfile::tempdir().map_err(FuzzError::Io)?;
    let mut out = Vec::new();
    for (i, (family, files)) in models.iter().enumerate() {
        let dir = tmp.path().join(family);
        std::fs::create_dir_all(&dir).map_err(FuzzError::Io)?;
        for (name, data) in files {
            std::fs::write(dir.join(name), data).map_err(FuzzError::Io)?;
        }
        // One quantised and one half-precision export besides the F32 ones.
        let dtype = match i {
            3 => DType::Q8_0,
            1 => DType::F16,
            _ => DType::F32,
        };
        let path = tmp.path().join(format!("{family}.gguf"));
        export_gguf(&dir, &path, dtype).map_err(|e| FuzzError::Seeds(e.to_string()))?;
        out.push(std::fs::read(&path).map_err(FuzzError::Io)?);
    }
    Ok(out)
}

/// A llama-family export switched to a SentencePiece (`llama`) vocabulary with scores.
fn spm_variant(gguf: &[u8]) -> Option<Vec<u8>> {
    let mut doc = gguf_format::decode(gguf)?;
    if doc.arch() != "llama" {
        return None;
    }
    let n = match doc.get("tokenizer.ggml.tokens") {
        Some(Val::Array { items, .. }) => items.len(),
        _ => return None,
    };
    let mut tokens = vec![Val::str("<unk>"), Val::str("<s>"), Val::str("</s>")];
    let pieces = ["▁", "▁a", "a", "b", "ab", "▁ab", "<0x0A>", "<0x41>", "c", "▁c"];
    tokens.extend((3..n).map(|i| Val::str(&format!("{}{}", pieces[i % pieces.len()], i / pieces.len()))));
    let scores = (0..n).map(|i| Val::f32(-(i as f32))).collect();
    let types = (0..n).map(|i| Val::Scalar { ty: 5, bytes: (if i < 3 { 3i32 } else { 1 }).to_le_bytes().to_vec() });
    doc.set("tokenizer.ggml.model", Val::str("llama"));
    doc.set("tokenizer.ggml.tokens", Val::Array { elem: 8, len: None, items: tokens });
    doc.set("tokenizer.ggml.scores", Val::Array { elem: 6, len: None, items: scores });
    doc.set("tokenizer.ggml.token_type", Val::Array { elem: 5, len: None, items: types.collect() });
    doc.set("tokenizer.ggml.unknown_token_id", Val::u32(0));
    Some(gguf_format::encode(&doc))
}

fn read_existing(dir: &Path, ext: &str) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(dir).map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default();
    paths.retain(|p| p.extension().and_then(|e| e.to_str()) == Some(ext));
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// The embedded tiny tokenizer cut down to ids below [`VOCAB`] (merges kept when all three
/// strings survive), so its vocabulary fits the synthetic models.
fn toy_tokenizer() -> Result<Vec<u8>, FuzzError> {
    let path = repo_root().join("models/tiny-llada/tokenizer.json");
    let text = std::fs::read(&path).map_err(FuzzError::Io)?;
    let mut json: Value =
        serde_json::from_slice(&text).map_err(|e| FuzzError::Seeds(format!("{}: {e}", path.display())))?;
    let keep = |id: &Value| id.as_u64().is_some_and(|i| (i as usize) < VOCAB);
    if let Some(vocab) = json.pointer_mut("/model/vocab").and_then(|v| v.as_object_mut()) {
        vocab.retain(|_, id| keep(id));
    }
    let vocab = json.pointer("/model/vocab").and_then(|v| v.as_object()).cloned().unwrap_or_default();
    if let Some(merges) = json.pointer_mut("/model/merges").and_then(|m| m.as_array_mut()) {
        merges.retain(|m| {
            let pair = match m {
                Value::String(s) => s.split_once(' ').map(|(a, b)| (a.to_owned(), b.to_owned())),
                Value::Array(p) => match (p.first().and_then(|x| x.as_str()), p.get(1).and_then(|x| x.as_str())) {
                    (Some(a), Some(b)) => Some((a.to_owned(), b.to_owned())),
                    _ => None,
                },
                _ => None,
            };
            pair.is_some_and(|(a, b)| vocab.contains_key(&a) && vocab.contains_key(&b) && vocab.contains_key(&(a + &b)))
        });
    }
    if let Some(added) = json.get_mut("added_tokens").and_then(|a| a.as_array_mut()) {
        added.retain(|t| t.get("id").is_some_and(keep));
    }
    Ok(serde_json::to_vec(&json).unwrap_or_default())
}

/// Minimal `tokenizer.json` files of the other model types and pipeline parts, so mutations
/// explore their deserialisers too.
fn handwritten_tokenizers() -> Vec<Value> {
    let base = |model: Value, extra: Value| {
        let mut t = json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false,
                              "rstrip": false, "normalized": false, "special": true}],
            "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
            "decoder": null, "model": model
        });
        merge(&mut t, &extra);
        t
    };
    vec![
        base(
            json!({"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2}, "unk_token": "[UNK]"}),
            json!({}),
        ),
        base(
            json!({"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                   "max_input_chars_per_word": 100, "vocab": {"[UNK]": 0, "he": 1, "##llo": 2, "[CLS]": 3}}),
            json!({
                "normalizer": {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]},
                "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": true},
                "post_processor": {"type": "TemplateProcessing",
                    "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                    "special_tokens": {"[CLS]": {"id": "[CLS]", "ids": [3], "tokens": ["[CLS]"]}}}
            }),
        ),
        base(
            json!({"type": "Unigram", "unk_id": 0, "byte_fallback": false,
                   "vocab": [["[UNK]", 0.0], ["a", -1.0], ["b", -2.0], ["ab", -1.5], ["▁", -3.0]]}),
            json!({"pre_tokenizer": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true},
                   "decoder": {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always", "split": true}}),
        ),
        base(
            json!({"type": "BPE", "dropout": null, "unk_token": "[UNK]", "continuing_subword_prefix": null,
                   "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": true, "ignore_merges": false,
                   "vocab": {"[UNK]": 0, "a": 1, "b": 2, "ab": 3, "<0x41>": 4}, "merges": ["a b"]}),
            json!({
                "truncation": {"direction": "Right", "max_length": 8, "strategy": "LongestFirst", "stride": 2},
                "padding": {"strategy": {"Fixed": 16}, "direction": "Right", "pad_to_multiple_of": 4,
                            "pad_id": 0, "pad_type_id": 0, "pad_token": "[UNK]"},
                "pre_tokenizer": {"type": "Split", "pattern": {"Regex": "\\s+|(?=b)"}, "behavior": "Isolated", "invert": false},
                "decoder": {"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"}]}
            }),
        ),
    ]
}
