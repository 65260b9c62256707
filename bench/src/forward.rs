//! Suite `forward`: one denoising step — a block of 64 tokens over a 512-token cached
//! prefix — on a model with LLaDA-8B layer shapes and 2 layers (random weights), in f32 (mmap'd)
//! and Q8_0 (requantised at load), as GFLOP/s and as a fraction of this machine's measured peak.
//! Also peak RSS after loading and after one step against the weight bytes.

use std::sync::Arc;
use std::time::Instant;

use anyhow::Result;
use serde_json::{json, Value};
use unmask_engine::kernels::peak::{measure, rss_bytes, PeakKind};
use unmask_engine::model::{load_transformer, ForwardRequest, KernelChoice, KvMode, Transformer};

use crate::synth::{write_llada, LladaShape, Rng};

fn step(t: &Transformer, prefix: usize, block: usize, reps: usize) -> Result<(f64, f64, usize)> {
    let mut cache = t.new_cache(prefix + block);
    // A synthetic cached prefix: the step's cost does not depend on the cached values.
    let mut rng = Rng::new(7);
    let kvd = cache.kv_dim();
    let row: Vec<f32> = (0..kvd).map(|_| rng.next_f32(1.0)).collect();
    for l in 0..cache.n_layers() {
        for p in 0..prefix {
            cache.write(l, p, &row, &row);
        }
    }
    cache.mark_valid(0..prefix);
    let mask = t.config.mask_token_id.unwrap_or(0);
    let tokens: Vec<u32> = (0..block as u32).map(|i| if i % 2 == 0 { mask } else { 100 + i }).collect();
    let positions: Vec<usize> = (prefix..prefix + block).collect();
    let rows: Vec<usize> = (0..block).collect();
    let req = ForwardRequest { tokens: &tokens, positions: &positions, logits_rows: &rows, kv: KvMode::Read };
    let mut best = f64::MAX;
    let mut flops = 0.0;
    for _ in 0..reps {
        let t0 = Instant::now();
        let out = t.forward(&req, Some(&mut cache))?;
        best = best.min(t0.elapsed().as_secs_f64());
        flops = out.flops;
    }
    Ok((best, flops, cache.bytes()))
}

pub fn run(quick: bool) -> Result<Value> {
    let shape = if quick {
        LladaShape { hidden: 4096, layers: 1, heads: 32, ffn: 12288, vocab: 32768 }
    } else {
        LladaShape { hidden: 4096, layers: 2, heads: 32, ffn: 12288, vocab: 126464 }
    };
    let (prefix, block, reps) = if quick { (256, 64, 2) } else { (512, 64, 3) };
    let threads = unmask_engine::threads::count();
    eprintln!("[forward] measuring peaks ({threads} threads)");
    let fma = measure(PeakKind::Avx512Fma, threads, 20_000_000, 3)
        .or_else(|| measure(PeakKind::Avx2Fma, threads, 20_000_000, 3))
        .map(|p| p.ops_per_s)
        .unwrap_or(f64::NAN);
    let vnni = measure(PeakKind::Avx512Vnni, threads, 20_000_000, 3).map(|p| p.ops_per_s);
    let dir = std::env::temp_dir().join(format!("unmask-bench/llada8b-{}l-v{}", shape.layers, shape.vocab));
    eprintln!("[forward] writing synthetic checkpoint to {} (once)", dir.display());
    let file_bytes = write_llada(&dir, &shape)?;
    let rss0 = rss_bytes().map(|r| r.0).unwrap_or(0);
    let (t, _) = load_transformer(&dir)?;
    let rss_load = rss_bytes().map(|r| r.0).unwrap_or(0);
    eprintln!("[forward] f32 step: block {block}, prefix {prefix}");
    let (secs, flops, kv_bytes) = step(&t, prefix, block, reps)?;
    let (rss_step, hwm_step) = rss_bytes().unwrap_or((0, 0));
    let touched_weights = t.weights.matrix_bytes() as u64 - (t.weights.embedding.bytes() as u64)
        + (block as u64 * shape.hidden as u64 * 4);
    let f32_gflops = flops / secs / 1e9;

    eprintln!("[forward] requantising to int8 per row (f32 → int8 kernels)");
    let i8w = t.weights.clone().repack(KernelChoice::Int8PerRow)?;
    let ti = Transformer::new(t.config.clone(), i8w);
    let (isecs, iflops, _) = step(&ti, prefix, block, reps)?;
    let int8_gflops = iflops / isecs / 1e9;
    drop(ti);

    eprintln!("[forward] requantising to Q8_0 (repacked for the int8 kernels, as at load)");
    let q8 = t.weights.map_matrices(&|l| l.to_q8_0())?.repack(KernelChoice::Auto)?;
    let q8_bytes = q8.matrix_bytes();
    let tq = Transformer::new(t.config.clone(), q8);
    drop(t);
    let tq = Arc::new(tq);
    let (qsecs, qflops, _) = step(&tq, prefix, block, reps)?;
    let q8_gflops = qflops / qsecs / 1e9;

    let headline = json!({
        "forward_gflops": f32_gflops,
        "forward_peak_fraction": f32_gflops * 1e9 / fma,
        "forward_gflops_f32": f32_gflops,
        "forward_peak_fraction_f32": f32_gflops * 1e9 / fma,
        "forward_gflops_q8_0": q8_gflops,
        "forward_peak_fraction_q8_0": vnni.map(|v| q8_gflops * 1e9 / v),
        "forward_over_fma_peak_q8_0": q8_gflops * 1e9 / fma,
        "forward_gflops_int8": int8_gflops,
        "forward_peak_fraction_q8_0_vs_vnni": vnni.map(|v| q8_gflops * 1e9 / v),
        "rss_after_step_over_touched_weights": (rss_step.saturating_sub(rss0)) as f64 / touched_weights as f64,
    });
    Ok(json!({
        "headline": headline,
        "shape": {"hidden": shape.hidden, "layers": shape.layers, "heads": shape.heads, "ffn": shape.ffn, "vocab": shape.vocab,
                  "block": block, "prefix": prefix},
        "peaks": {"fma_f32_flops": fma, "vnni_int8_ops": vnni, "threads": threads},
        "f32": {"step_s": secs, "flops": flops, "gflops": f32_gflops, "weights": "f32 from mmap'd safetensors, packed at load into 16-column panels for the own AVX-512 kernel (mapped pages released)"},
        "q8_0": {"step_s": qsecs, "gflops": q8_gflops, "matrix_bytes": q8_bytes,
                  "note": "Q8_0 repacked at load into int8 panels (block-32 scales), int8 activations, VNNI/AVX2 kernel; forward_peak_fraction_q8_0 (and _vs_vnni) is against the VNNI int8 peak, forward_over_fma_peak_q8_0 against the f32 FMA peak"},
        "int8_per_row": {"step_s": isecs, "gflops": int8_gflops, "note": "f32 weights requantised to int8 with per-row scales"},
        "memory": {
            "file_bytes": file_bytes, "rss_before_load": rss0, "rss_after_load": rss_load, "rss_after_step": rss_step,
            "peak_rss_after_step": hwm_step, "kv_cache_bytes": kv_bytes, "weights_touched_by_step": touched_weights,
            "note": "the embedding table is only row-gathered, so its pages are mostly never faulted in"
        },
    }))
}
