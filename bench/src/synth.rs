//! Synthetic checkpoints with real model shapes and random weights, streamed to disk.

use std::io::{BufWriter, Write};
use std::path::Path;

use anyhow::Result;
use serde_json::json;

/// Deterministic fast random numbers (xorshift64*), uniform in [-scale, scale).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E3779B97F4A7C15) | 1)
    }
    pub fn next_f32(&mut self, scale: f32) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let r = self.0.wrapping_mul(0x2545F4914F6CDD1D);
        ((r >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
    }
}

/// Shapes of a LLaDA-style checkpoint.
pub struct LladaShape {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
}

/// Writes an f32 LLaDA-format model directory (config.json + model.safetensors) without holding
/// the weights in memory. Skips the work when a matching directory exists.
pub fn write_llada(dir: &Path, s: &LladaShape) -> Result<u64> {
    let cfg = json!({
        "architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": s.hidden, "n_heads": s.heads,
        "n_kv_heads": s.heads, "n_layers": s.layers, "mlp_hidden_size": s.ffn, "vocab_size": s.vocab,
        "embedding_size": s.vocab, "max_sequence_length": 4096, "rope_theta": 500000.0, "rms_norm_eps": 1e-5,
        "mask_token_id": s.vocab - 1, "eos_token_id": 1, "weight_tying": false
    });
    let mut tensors: Vec<(String, Vec<usize>, f32)> = vec![("model.transformer.wte.weight".into(), vec![s.vocab, s.hidden], 1.0)];
    let (h, f) = (s.hidden, s.ffn);
    let ws = 1.0 / (h as f32).sqrt();
    for l in 0..s.layers {
        let p = format!("model.transformer.blocks.{l}.");
        tensors.push((p.clone() + "attn_norm.weight", vec![h], 0.0));
        for n in ["q_proj", "k_proj", "v_proj", "attn_out"] {
            tensors.push((format!("{p}{n}.weight"), vec![h, h], ws));
        }
        tensors.push((p.clone() + "ff_norm.weight", vec![h], 0.0));
        tensors.push((p.clone() + "ff_proj.weight", vec![f, h], ws));
        tensors.push((p.clone() + "up_proj.weight", vec![f, h], ws));
        tensors.push((p.clone() + "ff_out.weight", vec![h, f], 1.0 / (f as f32).sqrt()));
    }
    tensors.push(("model.transformer.ln_f.weight".into(), vec![h], 0.0));
    tensors.push(("model.transformer.ff_out.weight".into(), vec![s.vocab, h], ws));

    let mut header = serde_json::Map::new();
    let mut off = 0usize;
    for (name, shape, _) in &tensors {
        let n: usize = shape.iter().product::<usize>() * 4;
        header.insert(name.clone(), json!({"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}));
        off += n;
    }
    let total = off as u64;
    let st = dir.join("model.safetensors");
    let cfg_path = dir.join("config.json");
    let cfg_text = serde_json::to_string_pretty(&cfg)?;
    if st.exists() && std::fs::read_to_string(&cfg_path).ok().as_deref() == Some(cfg_text.as_str()) {
        return Ok(total);
    }
    std::fs::create_dir_all(dir)?;
    let mut h_bytes = serde_json::to_vec(&serde_json::Value::Object(header))?;
    while (8 + h_bytes.len()) % 8 != 0 {
        h_bytes.push(b' ');
    }
    let mut w = BufWriter::with_capacity(1 << 22, std::fs::File::create(&st)?);
    w.write_all(&(h_bytes.len() as u64).to_le_bytes())?;
    w.write_all(&h_bytes)?;
    let mut rng = Rng::new(42);
    let mut buf: Vec<u8> = Vec::with_capacity(1 << 22);
    for (_, shape, scale) in &tensors {
        let n: usize = shape.iter().product();
        for i in 0..n {
            // Norm weights are ones (scale 0 marks them); matrices uniform random.
            let v = if *scale == 0.0 { 1.0 } else { rng.next_f32(*scale) };
            buf.extend_from_slice(&v.to_le_bytes());
            if buf.len() >= (1 << 22) || i + 1 == n {
                w.write_all(&buf)?;
                buf.clear();
            }
        }
    }
    w.flush()?;
    std::fs::write(&cfg_path, cfg_text)?;
    Ok(total)
}
