//! Benchmark harness. Each suite prints progress to stderr and writes `bench/results/SUITE.json`
//! with a top-level `headline` object holding its key figures.

mod ablation;
mod ablation_search;
mod ablation_wall;
mod decoding;
mod forward;
mod npu;
mod npu_comparison;
mod prose;
mod docs_examples;
mod quality;
mod robustness;
mod serve;
mod specar;
mod kernels;
mod moe;
mod moe_measured;
mod peak;
mod store;
mod synth;
mod tasks;
mod unmask_bin;
mod versus;

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};

const SUITES: &[(&str, &str)] = &[
    ("forward", "forward throughput and memory on LLaDA-8B layer shapes"),
    ("quality", "embedded models' exact-match accuracy on the held-out tasks"),
    ("decoding", "reference vs prefix/dual cache vs threshold: time, forwards, accuracy"),
    ("npu", "virtual NPU: cost-model calibration and simulated LLaDA-8B on SM8750"),
    ("ablation", "NPU-aware decoding: prefix cache vs speculative vs revision vs both"),
    ("kernels", "GEMM kernels per weight format on LLaDA-8B projection shapes"),
    ("store", "step-trace persistence: batched vs unbatched writes, recording overhead"),
    ("robustness", "hostile inputs: fuzzer, bad-input corpus vs the unmask binary, RSS soaks"),
    ("serve", "unmask serve under load: requests/s, time to first token, faults, no lost runs"),
    ("specar", "speculative AR decoding: plain AR vs sync vs adaptive vs async, measured, lossless check"),
    ("moe", "MoE prefill on NPUs: CPU only vs naive per-expert dispatch vs static tiers + groups + residency (simulated)"),
    ("versus", "side by side with llama.cpp's llama-diffusion-cli on the same GGUFs (speed, parity)"),
];

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let quick = args.iter().any(|a| a == "--quick");
    let names: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    if args.iter().any(|a| a == "--list") || names.is_empty() {
        eprintln!("usage: bench/run SUITE [--quick]\nsuites:");
        for (n, d) in SUITES {
            eprintln!("  {n:10} {d}");
        }
        if names.is_empty() && !args.iter().any(|a| a == "--list") {
            bail!("no suite given");
        }
        return Ok(());
    }
    unmask_engine::threads::init(0);
    for name in names {
        let started = std::time::Instant::now();
        let mut result = match name.as_str() {
            "forward" => forward::run(quick)?,
            "quality" => quality::run(quick)?,
            "decoding" => decoding::run(quick)?,
            "npu" => npu::run(quick)?,
            "ablation" => ablation::run(quick)?,
            "kernels" => kernels::run(quick)?,
            "store" => store::run(quick)?,
            "robustness" => robustness::run(quick)?,
            "serve" => serve::run(quick)?,
            "versus" => versus::run(quick)?,
            "specar" => specar::run(quick)?,
            "moe" => moe::run(quick)?,
            other => bail!("unknown suite `{other}` (try --list)"),
        };
        if let Value::Object(m) = &mut result {
            m.insert("suite".into(), json!(name));
            m.insert("quick".into(), json!(quick));
            m.insert("machine".into(), machine_info());
            m.insert("elapsed_s".into(), json!(started.elapsed().as_secs_f64()));
        }
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("results");
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, serde_json::to_string_pretty(&result)? + "\n").with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        println!("{}", serde_json::to_string_pretty(&result["headline"])?);
    }
    Ok(())
}

fn machine_info() -> Value {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned()))
        .unwrap_or_default();
    json!({
        "cpu": cpu,
        // The kernels follow the instruction set: results from an AVX2-only CPU and an AVX-512
        // VNNI one are not comparable even when the model names match.
        "int8_isa": format!("{:?}", unmask_engine::kernels::int8::Isa::detect()),
        "threads": unmask_engine::threads::count(),
        "load_avg": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
    })
}
