//! Suite `forward`: one denoising step — a block of 64 tokens over a 512-token cached
//! prefix — on a model with LLaDA-8B layer shapes and 2 layers (random weights), in f32 (mmap'd)
//! and Q8_0 (requantised at load), as GFLOP/s and as a fraction of this machine's measured peak.
//! Also peak RSS after loading and after one step against the weight bytes.

use std::sync::Arc;

use anyhow::Result;
use serde_json::{json, Value};
use crate::peak::{measure, rss_bytes, PeakKind};
use unmask_engine::model::{load_transformer, ForwardRequest, KernelChoice, KvMode, Transformer};

use crate::synth::{write_llada, LladaShape, Rng};

/// One denoising step timed `samples` times with peak samples of `kind` interleaved in the same
/// loop: (step seconds, peak ops/s, FLOPs of one step, KV cache bytes).
fn step(t: &Transformer, prefix: usize, block: usize, samples: usize, kind: PeakKind) -> Result<(Vec<f64>, Vec<f64>, f64, usize)> {
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
    let flops = t.forward(&req, Some(&mut cache))?.flops;
    let (secs, peak) = crate::kernels::interleaved(samples, kind, 8_000_000, || {
        let _ = t.forward(&req, Some(&mut cache));
    });
    Ok((secs, peak, flops, cache.bytes()))
}

/// The attention kernel alone at decoding's shapes, interleaved with FMA peak samples.
fn attention_kernel(quick: bool) -> Result<Value> {
    use unmask_engine::kernels::attention::{attention_with, flops, AttnArgs, HeadShape};
    use unmask_engine::kernels::simd::Simd;
    let fma = if PeakKind::Avx512Fma.available() { PeakKind::Avx512Fma } else { PeakKind::Avx2Fma };
    let mut rows = Vec::new();
    let mut best = (0.0f64, 0.0f64);
    let samples = if quick { 7 } else { 15 };
    for (name, shape, nq, nctx) in [
        ("8b_no_cache", HeadShape { n_heads: 32, n_kv_heads: 32, head_dim: 128 }, 256usize, 256usize),
        ("8b_block32_ctx256", HeadShape { n_heads: 32, n_kv_heads: 32, head_dim: 128 }, 32, 256),
        ("tiny_no_cache", HeadShape { n_heads: 4, n_kv_heads: 4, head_dim: 48 }, 256, 256),
    ] {
        let mut rng = Rng::new(nq as u64 + nctx as u64);
        let (qw, kw) = (shape.n_heads * shape.head_dim, shape.n_kv_heads * shape.head_dim);
        let q: Vec<f32> = (0..nq * qw).map(|_| rng.next_f32(1.0)).collect();
        let k: Vec<f32> = (0..nctx * kw).map(|_| rng.next_f32(1.0)).collect();
        let v: Vec<f32> = (0..nctx * kw).map(|_| rng.next_f32(1.0)).collect();
        let k_pos: Vec<usize> = (0..nctx).collect();
        let q_pos: Vec<usize> = (nctx - nq..nctx).collect();
        let mut out = vec![0.0f32; nq * qw];
        let mut kt = Vec::new();
        let simd = Simd::detect();
        let a = AttnArgs { q: &q, q_pos: &q_pos, k: &k, v: &v, k_pos: &k_pos, shape, causal: false };
        let fl = flops(nq, nctx, shape);
        // Peak samples of about the kernel's duration.
        let (ks, ps) = crate::kernels::interleaved(samples, fma, 2_000_000, || attention_with(simd, &mut out, a, &mut kt));
        let r = crate::kernels::peak_fraction(&format!("attention {name}"), fl, &ks, &ps)?;
        if name == "8b_no_cache" {
            best = (r["ops_per_s"].as_f64().unwrap_or(0.0), r["peak_fraction"].as_f64().unwrap_or(0.0));
        }
        eprintln!("[forward] attention {name}: {:.1} GFLOP/s, {:.2} of FMA peak", r["ops_per_s"].as_f64().unwrap_or(0.0) / 1e9, r["peak_fraction"].as_f64().unwrap_or(0.0));
        rows.push(json!({"case": name, "nq": nq, "nctx": nctx, "heads": shape.n_heads, "head_dim": shape.head_dim,
                         "flops": fl, "simd": simd, "result": r}));
    }
    Ok(json!({"attention_gflops": best.0 / 1e9, "attention_peak_fraction": best.1, "cases": rows}))
}

pub fn run(quick: bool) -> Result<Value> {
    let shape = if quick {
        LladaShape { hidden: 4096, layers: 1, heads: 32, ffn: 12288, vocab: 32768 }
    } else {
        LladaShape { hidden: 4096, layers: 2, heads: 32, ffn: 12288, vocab: 126464 }
    };
    let (prefix, block, reps) = if quick { (256, 64, 3) } else { (512, 64, 5) };
    let threads = unmask_engine::threads::count();
    eprintln!("[forward] attention kernel ({threads} threads)");
    let attn = attention_kernel(quick)?;
    let fma_kind = if PeakKind::Avx512Fma.available() { PeakKind::Avx512Fma } else { PeakKind::Avx2Fma };
    let fma = measure(fma_kind, threads, 20_000_000, 3).map(|p| p.ops_per_s).unwrap_or(f64::NAN);
    let vnni = measure(PeakKind::int8(), threads, 20_000_000, 3).map(|p| p.ops_per_s);
    let dir = std::env::temp_dir().join(format!("unmask-bench/llada8b-{}l-v{}", shape.layers, shape.vocab));
    eprintln!("[forward] writing synthetic checkpoint to {} (once)", dir.display());
    let file_bytes = write_llada(&dir, &shape)?;
    let rss0 = rss_bytes().map(|r| r.0).unwrap_or(0);
    let (t, _) = load_transformer(&dir)?;
    let rss_load = rss_bytes().map(|r| r.0).unwrap_or(0);
    eprintln!("[forward] f32 step: block {block}, prefix {prefix}");
    let (fs, fp, flops, kv_bytes) = step(&t, prefix, block, reps, fma_kind)?;
    let f32_r = crate::kernels::peak_fraction("forward f32", flops, &fs, &fp)?;
    let secs = crate::kernels::median(&fs);
    let (rss_step, hwm_step) = rss_bytes().unwrap_or((0, 0));
    let touched_weights = t.weights.matrix_bytes() as u64 - (t.weights.embedding.bytes() as u64)
        + (block as u64 * shape.hidden as u64 * 4);
    let f32_gflops = flops / secs / 1e9;
    let int8_kind = if vnni.is_some() { PeakKind::int8() } else { fma_kind };

    eprintln!("[forward] requantising to int8 per row (f32 → int8 kernels)");
    let i8w = t.weights.clone().repack(KernelChoice::Int8PerRow)?;
    let ti = Transformer::new(t.config.clone(), i8w);
    let (is_, ip, iflops, _) = step(&ti, prefix, block, reps, int8_kind)?;
    let int8_r = crate::kernels::peak_fraction("forward int8/row", iflops, &is_, &ip)?;
    let isecs = crate::kernels::median(&is_);
    let int8_gflops = iflops / isecs / 1e9;
    drop(ti);

    eprintln!("[forward] requantising to Q8_0 (repacked for the int8 kernels, as at load)");
    let q8 = t.weights.map_matrices(&|l| l.to_q8_0())?.repack(KernelChoice::Auto)?;
    let q8_bytes = q8.matrix_bytes();
    let tq = Transformer::new(t.config.clone(), q8);
    drop(t);
    let tq = Arc::new(tq);
    let (qs, qp, qflops, _) = step(&tq, prefix, block, reps, int8_kind)?;
    let q8_r = crate::kernels::peak_fraction("forward q8_0", qflops, &qs, &qp)?;
    let qsecs = crate::kernels::median(&qs);
    let q8_gflops = qflops / qsecs / 1e9;

    let headline = json!({
        "forward_gflops": f32_gflops,
        "forward_peak_fraction": f32_r["peak_fraction"],
        "forward_gflops_f32": f32_gflops,
        "forward_peak_fraction_f32": f32_r["peak_fraction"],
        "forward_gflops_q8_0": q8_gflops,
        "forward_peak_fraction_q8_0": q8_r["peak_fraction"],
        "forward_over_fma_peak_q8_0": q8_gflops * 1e9 / fma,
        "forward_gflops_int8": int8_gflops,
        "forward_peak_fraction_int8": int8_r["peak_fraction"],
        "forward_peak_fraction_q8_0_vs_vnni": q8_r["peak_fraction"],
        "attention_gflops": attn["attention_gflops"],
        "attention_peak_fraction": attn["attention_peak_fraction"],
        "rss_after_step_over_touched_weights": (rss_step.saturating_sub(rss0)) as f64 / touched_weights as f64,
    });
    Ok(json!({
        "headline": headline,
        "shape": {"hidden": shape.hidden, "layers": shape.layers, "heads": shape.heads, "ffn": shape.ffn, "vocab": shape.vocab,
                  "block": block, "prefix": prefix},
        "peaks": {"fma_f32_flops": fma, "vnni_int8_ops": vnni, "threads": threads,
                  "note": "standalone peaks (context only); every peak_fraction uses peak samples interleaved with its kernel's samples"},
        "attention": attn,
        "same_run": {"f32": f32_r, "int8_per_row": int8_r, "q8_0": q8_r},
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
