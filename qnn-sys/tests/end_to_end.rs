//! End-to-end through the real qnn-sys code path against the mock provider:
//! load → providers → backend/device/context → graph → finalize → execute,
//! context-binary caching, shared memory, call order and teardown order.

mod common;

use common::*;
use qnn_sys::ops;
use qnn_sys::*;
use std::sync::Arc;

const EPS: f32 = 1e-6;

/// Weights of a 2-layer MLP: FC(8→16) → RmsNorm → FC(16→4) → Softmax.
struct Mlp {
    w1: Vec<f32>,
    b1: Vec<f32>,
    gamma: Vec<f32>,
    w2: Vec<f32>,
    b2: Vec<f32>,
}

const M: u32 = 2;
const D_IN: u32 = 8;
const D_H: u32 = 16;
const D_OUT: u32 = 4;

impl Mlp {
    fn new() -> Self {
        Self {
            w1: det_values((D_H * D_IN) as usize, 1),
            b1: det_values(D_H as usize, 2),
            gamma: det_values(D_H as usize, 3).iter().map(|g| 1.0 + 0.5 * g).collect(),
            w2: det_values((D_OUT * D_H) as usize, 4),
            b2: det_values(D_OUT as usize, 5),
        }
    }

    fn bytes(&self) -> [Vec<u8>; 5] {
        [f32_bytes(&self.w1), f32_bytes(&self.b1), f32_bytes(&self.gamma), f32_bytes(&self.w2), f32_bytes(&self.b2)]
    }

    fn hash(&self) -> String {
        let b = self.bytes();
        fingerprint(&[&b[0], &b[1], &b[2], &b[3], &b[4], b"mlp:2x8x16x4"])
    }

    /// Plain Rust reference.
    fn reference(&self, x: &[f32]) -> Vec<f32> {
        let fc = |x: &[f32], w: &[f32], b: &[f32], n: usize, k: usize| -> Vec<f32> {
            let m = x.len() / k;
            let mut y = vec![0f32; m * n];
            for i in 0..m {
                for j in 0..n {
                    y[i * n + j] = b[j] + (0..k).map(|p| x[i * k + p] * w[j * k + p]).sum::<f32>();
                }
            }
            y
        };
        let h = fc(x, &self.w1, &self.b1, D_H as usize, D_IN as usize);
        let mut hn = vec![0f32; h.len()];
        for (row, out) in h.chunks(D_H as usize).zip(hn.chunks_mut(D_H as usize)) {
            let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f32>() / D_H as f32 + EPS).sqrt();
            for i in 0..row.len() {
                out[i] = row[i] * inv * self.gamma[i];
            }
        }
        let logits = fc(&hn, &self.w2, &self.b2, D_OUT as usize, D_H as usize);
        let mut y = Vec::new();
        for row in logits.chunks(D_OUT as usize) {
            let mx = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
            let s: f32 = row.iter().map(|v| (v - mx).exp()).sum();
            y.extend(row.iter().map(|v| (v - mx).exp() / s));
        }
        y
    }
}

/// Builds and finalizes the MLP graph in `ctx`.
fn build_mlp(ctx: &Context, w: &[Vec<u8>; 5]) -> Result<Graph> {
    let mut g = ctx.graph_builder(
        "mlp",
        &GraphOptions { fp16_precision: false, vtcm_mb: Some(8), finalize_optimization: Some(3.0) },
    )?;
    let x = g.input(TensorSpec::new("x", DType::F32, &[M, D_IN]))?;
    let w1 = g.constant(TensorSpec::new("w1", DType::F32, &[D_H, D_IN]), &w[0])?;
    let b1 = g.constant(TensorSpec::new("b1", DType::F32, &[D_H]), &w[1])?;
    let gamma = g.constant(TensorSpec::new("gamma", DType::F32, &[D_H]), &w[2])?;
    let w2 = g.constant(TensorSpec::new("w2", DType::F32, &[D_OUT, D_H]), &w[3])?;
    let b2 = g.constant(TensorSpec::new("b2", DType::F32, &[D_OUT]), &w[4])?;
    let h = g.native(TensorSpec::new("h", DType::F32, &[M, D_H]))?;
    let hn = g.native(TensorSpec::new("hn", DType::F32, &[M, D_H]))?;
    let logits = g.native(TensorSpec::new("logits", DType::F32, &[M, D_OUT]))?;
    let y = g.output(TensorSpec::new("probs", DType::F32, &[M, D_OUT]))?;
    g.add_node(ops::fully_connected("fc1", x, w1, Some(b1), h))?;
    g.add_node(ops::rms_norm("norm", h, gamma, EPS, 1, hn))?;
    g.add_node(ops::fully_connected("fc2", hn, w2, Some(b2), logits))?;
    g.add_node(ops::softmax("softmax", logits, 1, 1.0, y))?;
    g.finalize()
}

fn run_mlp(graph: &mut Graph, x: &[f32]) -> Vec<f32> {
    let mut out = vec![0u8; (M * D_OUT * 4) as usize];
    graph.execute(&[&f32_bytes(x)], &mut [&mut out]).expect("execute");
    bytes_f32(&out)
}

#[test]
fn mlp_matches_reference_and_calls_are_ordered() {
    let mock = Mock::new();
    let mlp = Mlp::new();
    let weights = mlp.bytes();
    let x = det_values((M * D_IN) as usize, 42);
    {
        let lib = QnnLibrary::load(mock.path()).expect("load mock");
        assert_eq!(lib.provider_name(), "MOCK_QTI_AISW");
        assert_eq!(lib.backend_id(), qnn_sys::ffi::QNN_BACKEND_ID_HTP);
        let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
        assert_eq!(backend.build_id().expect("build id"), "qnn-mock 0.1");
        let device = backend.create_device(&DeviceConfig { soc_model: Some(57), arch: Some(75) }).expect("device");
        let vote = device.set_power_profile(PowerProfile::Burst).expect("burst");
        let ctx = Context::new(&backend, Some(&device)).expect("context");
        let mut graph = build_mlp(&ctx, &weights).expect("build");
        assert_eq!(graph.input_specs()[0].dims, vec![M, D_IN]);
        let got = run_mlp(&mut graph, &x);
        assert_close(&got, &mlp.reference(&x), 1e-5);
        for row in got.chunks(D_OUT as usize) {
            assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-5);
        }
        // Wrapper-side check: a wrong-sized buffer never reaches QNN.
        let mut small = vec![0u8; 4];
        let err = graph.execute(&[&f32_bytes(&x)], &mut [&mut small]).unwrap_err();
        assert!(matches!(err, QnnError::InvalidArgument(_)), "{err}");
        assert!(mock.live_handles() > 0);
        // Drop in the "wrong" order on purpose: the Arc chain must still free in reverse.
        drop(backend);
        drop(device);
        drop(ctx);
        drop(graph);
        drop(vote);
    }
    assert_eq!(mock.live_handles(), 0, "everything freed; last error: {}", mock.last_error());
    let calls = mock.calls();
    assert_subsequence(
        &calls,
        &[
            "QnnInterface_getProviders",
            "logCreate",
            "backendCreate",
            "backendGetApiVersion",
            "deviceCreate",
            "deviceGetInfrastructure",
            "perf.createPowerConfigId",
            "perf.setPowerConfig",
            "perf.options:1,2,3",
            "contextCreate",
            "graphCreate",
            "tensorCreateGraphTensor",
            "graphAddNode",
            "graphFinalize",
            "graphExecute",
            "contextFree",
            "deviceFree",
            "backendFree",
            "logFree",
        ],
    );
    assert_eq!(calls.iter().filter(|c| *c == "graphAddNode").count(), 4);
    // 10 graph tensors + 1 `axes` param tensor for RmsNorm.
    assert_eq!(calls.iter().filter(|c| *c == "tensorCreateGraphTensor").count(), 11);
    // Teardown is exactly the reverse of creation.
    let tail: Vec<&str> = calls.iter().rev().take(5).rev().map(String::as_str).collect();
    assert_eq!(tail, ["contextFree", "perf.destroyPowerConfigId", "deviceFree", "backendFree", "logFree"]);
}

#[test]
fn context_binary_cache_roundtrip() {
    let mock = Mock::new();
    let mlp = Mlp::new();
    let weights = mlp.bytes();
    let x = det_values((M * D_IN) as usize, 7);
    let dir = tempfile::tempdir().expect("tempdir");
    let cache = ContextCache::new(dir.path(), "mlp");
    let lib = QnnLibrary::load(mock.path()).expect("load");

    // First run: nothing cached → build, save binary + sidecar.
    let first = {
        let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
        let mut cached =
            cache.load_or_build(&backend, None, &mlp.hash(), |ctx| Ok(vec![build_mlp(ctx, &weights)?])).expect("build");
        assert!(matches!(&cached.outcome, CacheOutcome::Built { reason } if reason.contains("no cached context")));
        run_mlp(&mut cached.graphs[0], &x)
    };
    assert!(cache.binary_path().exists() && cache.sidecar_path().exists());
    let side: Sidecar = serde_json::from_slice(&std::fs::read(cache.sidecar_path()).expect("read")).expect("json");
    assert_eq!(side.graphs[0].name, "mlp");
    assert_eq!(side.graphs[0].inputs[0].spec.name, "x");
    assert_eq!(side.graphs[0].outputs[0].spec.dims, vec![M, D_OUT]);
    assert_eq!(side.core_api, "2.32.0");
    assert_eq!(side.source_hash, mlp.hash());

    // Second run: reload from binary, no recompilation.
    mock.clear_calls();
    let second = {
        let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
        let mut cached =
            cache.load_or_build(&backend, None, &mlp.hash(), |_| panic!("must not rebuild")).expect("load");
        assert_eq!(cached.outcome, CacheOutcome::Loaded);
        run_mlp(&mut cached.graphs[0], &x)
    };
    assert_eq!(first, second, "reloaded binary gives identical results");
    assert_close(&second, &mlp.reference(&x), 1e-5);
    let calls = mock.calls();
    assert_subsequence(
        &calls,
        &["backendCreate", "contextCreateFromBinary", "graphRetrieve", "graphExecute", "contextFree", "backendFree"],
    );
    for forbidden in ["graphCreate", "graphAddNode", "graphFinalize", "contextCreate"] {
        assert!(!calls.iter().any(|c| c == forbidden), "{forbidden} called on cache hit: {calls:?}");
    }

    // Different source weights → rebuild with a logged reason.
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let r =
        cache.load_or_build(&backend, None, "other-hash", |ctx| Ok(vec![build_mlp(ctx, &weights)?])).expect("rebuild");
    assert!(matches!(&r.outcome, CacheOutcome::Built { reason } if reason.contains("source hash")), "{:?}", r.outcome);
    drop(r);

    // Garbage sidecar → rebuild.
    std::fs::write(cache.sidecar_path(), b"{not json").expect("write");
    let r =
        cache.load_or_build(&backend, None, &mlp.hash(), |ctx| Ok(vec![build_mlp(ctx, &weights)?])).expect("rebuild");
    assert!(
        matches!(&r.outcome, CacheOutcome::Built { reason } if reason.contains("invalid sidecar")),
        "{:?}",
        r.outcome
    );
    drop(r);

    // Binary edited behind the sidecar's back → rebuild.
    let mut bin = std::fs::read(cache.binary_path()).expect("read");
    let last = bin.len() - 1;
    bin[last] ^= 0xff;
    std::fs::write(cache.binary_path(), &bin).expect("write");
    let r =
        cache.load_or_build(&backend, None, &mlp.hash(), |ctx| Ok(vec![build_mlp(ctx, &weights)?])).expect("rebuild");
    assert!(
        matches!(&r.outcome, CacheOutcome::Built { reason } if reason.contains("does not match")),
        "{:?}",
        r.outcome
    );
    drop(r);

    // A sidecar from another API version → rebuild.
    let mut side: Sidecar = serde_json::from_slice(&std::fs::read(cache.sidecar_path()).expect("read")).expect("json");
    side.core_api = "2.30.0".into();
    std::fs::write(cache.sidecar_path(), serde_json::to_vec(&side).expect("json")).expect("write");
    let r =
        cache.load_or_build(&backend, None, &mlp.hash(), |ctx| Ok(vec![build_mlp(ctx, &weights)?])).expect("rebuild");
    assert!(matches!(&r.outcome, CacheOutcome::Built { reason } if reason.contains("API version")), "{:?}", r.outcome);
    drop(r);
    drop(backend);
    assert_eq!(mock.live_handles(), 0);
}

#[test]
fn quantized_uint8_and_int8_weights() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    // x: uint8, scale 1/64, offset -128 (zero point 128); w: int8 symmetric scale 1/100; y: uint8.
    let (xs, xo) = (1.0f32 / 64.0, -128);
    let (ws, wo) = (1.0f32 / 100.0, 0);
    let (ys, yo) = (1.0f32 / 16.0, -128);
    let xq: Vec<u8> = (0..8u32).map(|i| (100 + 7 * i) as u8).collect();
    let wq: Vec<u8> = (0..24i32).map(|i| ((i * 13) % 61 - 30) as i8 as u8).collect();
    let mut g = ctx.graph_builder("q", &GraphOptions::default()).expect("graph");
    let x = g.input(TensorSpec::new("x", DType::QU8, &[2, 4]).quantized(xs, xo)).expect("x");
    let w = g.constant(TensorSpec::new("w", DType::QI8, &[6, 4]).quantized(ws, wo), &wq).expect("w");
    let y = g.output(TensorSpec::new("y", DType::QU8, &[2, 6]).quantized(ys, yo)).expect("y");
    g.add_node(ops::fully_connected("fc", x, w, None, y)).expect("node");
    let mut graph = g.finalize().expect("finalize");
    let mut out = vec![0u8; 12];
    graph.execute(&[&xq], &mut [&mut out]).expect("execute");
    // Reference: dequantize, matmul in f32, requantize.
    let xf: Vec<f32> = xq.iter().map(|&q| (q as f32 + xo as f32) * xs).collect();
    let wf: Vec<f32> = wq.iter().map(|&q| (q as i8 as f32 + wo as f32) * ws).collect();
    let want: Vec<u8> = (0..2)
        .flat_map(|i| {
            let (xf, wf) = (&xf, &wf);
            (0..6).map(move |j| {
                let v: f32 = (0..4).map(|p| xf[i * 4 + p] * wf[j * 4 + p]).sum();
                ((v / ys).round() - yo as f32).clamp(0.0, 255.0) as u8
            })
        })
        .collect();
    assert_eq!(out, want);
}

#[test]
fn per_channel_int8_weights_under_fp32_activations() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let (n, k) = (3u32, 5u32);
    let scales: Vec<(f32, i32)> = (0..n).map(|j| (0.01 * (j + 1) as f32, 0)).collect();
    let wq: Vec<u8> = (0..(n * k) as i32).map(|i| ((i * 37) % 255 - 127) as i8 as u8).collect();
    let xv = det_values(2 * k as usize, 77);
    let wspec = TensorSpec {
        name: "w".into(),
        dtype: DType::QI8,
        dims: vec![n, k],
        quant: Quant::PerAxis { axis: 0, scale_offsets: scales.clone() },
    };
    let mut g = ctx.graph_builder("pc", &GraphOptions::default()).expect("graph");
    let x = g.input(TensorSpec::new("x", DType::F32, &[2, k])).expect("x");
    let w = g.constant(wspec, &wq).expect("w");
    let y = g.output(TensorSpec::new("y", DType::F32, &[2, n])).expect("y");
    g.add_node(ops::fully_connected("fc", x, w, None, y)).expect("node");
    let mut graph = g.finalize().expect("finalize");
    let mut out = vec![0u8; (2 * n * 4) as usize];
    graph.execute(&[&f32_bytes(&xv)], &mut [&mut out]).expect("execute");
    let (nu, ku) = (n as usize, k as usize);
    let want: Vec<f32> = (0..2 * nu)
        .map(|o| {
            let (i, j) = (o / nu, o % nu);
            (0..ku).map(|p| xv[i * ku + p] * (wq[j * ku + p] as i8 as f32) * scales[j].0).sum()
        })
        .collect();
    assert_close(&bytes_f32(&out), &want, 1e-5);
    // Per-channel params survive the context binary round trip.
    let bin = ctx.binary().expect("binary");
    let ctx2 = Context::from_binary(&backend, None, &bin).expect("reload");
    let mut g2 = ctx2.retrieve_graph(&graph.meta()).expect("retrieve");
    let mut out2 = vec![0u8; out.len()];
    g2.execute(&[&f32_bytes(&xv)], &mut [&mut out2]).expect("execute");
    assert_eq!(out, out2);
}

#[test]
fn fp16_graph_matches_reference() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let xs = det_values(8, 11);
    let ws = det_values(12, 12);
    let to16 = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|&f| f32_to_f16_bits(f).to_le_bytes()).collect() };
    let wb = to16(&ws);
    let mut g = ctx.graph_builder("h", &GraphOptions { fp16_precision: true, ..Default::default() }).expect("graph");
    let x = g.input(TensorSpec::new("x", DType::F16, &[2, 4])).expect("x");
    let w = g.constant(TensorSpec::new("w", DType::F16, &[4, 3]), &wb).expect("w");
    let y = g.output(TensorSpec::new("y", DType::F16, &[2, 3])).expect("y");
    g.add_node(ops::mat_mul("mm", x, w, false, false, y)).expect("node");
    let mut graph = g.finalize().expect("finalize");
    let mut out = vec![0u8; 12];
    graph.execute(&[&to16(&xs)], &mut [&mut out]).expect("execute");
    let got: Vec<f32> = out.chunks_exact(2).map(|c| f16_bits_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect();
    let mut want = vec![0f32; 6];
    for i in 0..2 {
        for j in 0..3 {
            want[i * 3 + j] = (0..4).map(|p| xs[i * 4 + p] * ws[p * 3 + j]).sum();
        }
    }
    assert_close(&got, &want, 5e-3);
}

/// Minimal f16 helpers for the test (round-to-nearest is not needed for inputs).
fn f32_to_f16_bits(v: f32) -> u16 {
    let b = v.to_bits();
    let sign = ((b >> 16) & 0x8000) as u16;
    let e = ((b >> 23) & 0xff) as i32 - 127 + 15;
    if e <= 0 {
        return sign;
    }
    sign | ((e as u16) << 10) | ((b >> 13) & 0x3ff) as u16
}

fn f16_bits_to_f32(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let e = ((h >> 10) & 0x1f) as u32;
    let m = (h & 0x3ff) as u32;
    if e == 0 {
        return f32::from_bits(sign);
    }
    f32::from_bits(sign | ((e + 112) << 23) | (m << 13))
}

#[test]
fn rope_transpose_concat_reshape() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let (s, d) = (4u32, 8u32);
    // Rotate-half as a matrix: rot(x)[i] = -x[i+d/2] for i < d/2, x[i-d/2] otherwise.
    let mut r = vec![0f32; (d * d) as usize];
    for i in 0..(d / 2) as usize {
        r[(i + d as usize / 2) * d as usize + i] = -1.0;
        r[i * d as usize + i + d as usize / 2] = 1.0;
    }
    let rb = f32_bytes(&r);
    let xv = det_values((s * d) as usize, 21);
    let theta: Vec<f32> = (0..s * d).map(|i| (i / d) as f32 * 0.1 * ((i % d) + 1) as f32).collect();
    let mut g = ctx.graph_builder("rope", &GraphOptions::default()).expect("graph");
    let f = |n: &str, dims: &[u32]| TensorSpec::new(n, DType::F32, dims);
    let x = g.input(f("x", &[s, d])).expect("x");
    let th = g.input(f("theta", &[s, d])).expect("theta");
    let rm = g.constant(f("rot", &[d, d]), &rb).expect("rot");
    let cos = g.native(f("cos", &[s, d])).expect("t");
    let sin = g.native(f("sin", &[s, d])).expect("t");
    let xr = g.native(f("xr", &[s, d])).expect("t");
    let a = g.native(f("a", &[s, d])).expect("t");
    let b = g.native(f("b", &[s, d])).expect("t");
    let yv = g.native(f("y", &[s, d])).expect("t");
    let yt = g.output(f("yt", &[d, s])).expect("t");
    let cat = g.native(f("cat", &[2 * s, d])).expect("t");
    let flat = g.output(f("flat", &[2 * s * d])).expect("t");
    g.add_node(ops::unary("cos", ops::ELEMENT_WISE_COS, th, cos)).expect("n");
    g.add_node(ops::unary("sin", ops::ELEMENT_WISE_SIN, th, sin)).expect("n");
    g.add_node(ops::mat_mul("rot", x, rm, false, false, xr)).expect("n");
    g.add_node(ops::binary("mc", ops::ELEMENT_WISE_MULTIPLY, x, cos, a)).expect("n");
    g.add_node(ops::binary("ms", ops::ELEMENT_WISE_MULTIPLY, xr, sin, b)).expect("n");
    g.add_node(ops::binary("add", ops::ELEMENT_WISE_ADD, a, b, yv)).expect("n");
    g.add_node(ops::transpose("tr", yv, &[1, 0], yt)).expect("n");
    g.add_node(ops::concat("cat", &[yv, x], 0, cat)).expect("n");
    g.add_node(ops::reshape("flat", cat, flat)).expect("n");
    let mut graph = g.finalize().expect("finalize");
    let mut o1 = vec![0u8; (s * d * 4) as usize];
    let mut o2 = vec![0u8; (2 * s * d * 4) as usize];
    graph.execute(&[&f32_bytes(&xv), &f32_bytes(&theta)], &mut [&mut o1, &mut o2]).expect("execute");
    let (su, du) = (s as usize, d as usize);
    let mut y = vec![0f32; su * du];
    for i in 0..su {
        for j in 0..du {
            let rot = if j < du / 2 { -xv[i * du + j + du / 2] } else { xv[i * du + j - du / 2] };
            y[i * du + j] = xv[i * du + j] * theta[i * du + j].cos() + rot * theta[i * du + j].sin();
        }
    }
    let yt_want: Vec<f32> = (0..du * su).map(|k| y[(k % su) * du + k / su]).collect();
    assert_close(&bytes_f32(&o1), &yt_want, 1e-5);
    let cat_want: Vec<f32> = y.iter().chain(xv.iter()).cloned().collect();
    assert_close(&bytes_f32(&o2), &cat_want, 1e-5);
}

#[test]
fn shared_memory_registration_zero_copy() {
    let mock = Mock::new();
    let mlp = Mlp::new();
    let weights = mlp.bytes();
    let x = det_values((M * D_IN) as usize, 99);
    {
        let lib = QnnLibrary::load(mock.path()).expect("load");
        let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
        let ctx = Context::new(&backend, None).expect("ctx");
        let mut graph = build_mlp(&ctx, &weights).expect("build");
        let alloc: Arc<dyn SharedMemoryAllocator> = Arc::new(MemfdAllocator);
        let in_spec = graph.input_specs()[0].clone();
        let out_spec = graph.output_specs()[0].clone();
        let mut in_buf = ctx
            .register(SharedBuffer::new(alloc.clone(), in_spec.num_bytes()).expect("alloc"), &in_spec)
            .expect("register in");
        let out_buf = ctx
            .register(SharedBuffer::new(alloc.clone(), out_spec.num_bytes()).expect("alloc"), &out_spec)
            .expect("register out");
        in_buf.as_mut_slice().copy_from_slice(&f32_bytes(&x));
        graph.execute_bound(&[Binding::Shared(&in_buf)], &mut [BindingMut::Shared(&out_buf)]).expect("execute");
        assert_close(&bytes_f32(out_buf.as_slice()), &mlp.reference(&x), 1e-5);
        // A registration for a different shape is refused before QNN sees it.
        let err = graph.execute_bound(&[Binding::Shared(&out_buf)], &mut [BindingMut::Shared(&out_buf)]).unwrap_err();
        assert!(matches!(err, QnnError::InvalidArgument(_)), "{err}");
        // Registering the same fd twice is a documented QNN error.
        drop(graph);
        drop(ctx);
        // in_buf/out_buf keep the context alive; they deregister first, then contextFree runs.
    }
    assert_eq!(mock.live_handles(), 0, "{}", mock.last_error());
    let calls = mock.calls();
    assert_subsequence(
        &calls,
        &["memRegister", "memRegister", "graphExecute", "memDeRegister", "memDeRegister", "contextFree", "backendFree"],
    );
}

#[test]
fn log_callback_is_routed_to_tracing() {
    use std::sync::Mutex;
    use tracing::field::{Field, Visit};
    use tracing::span::{Attributes, Id, Record};
    use tracing::{Event, Metadata, Subscriber};

    /// Captures event messages with target "qnn".
    struct Capture(Arc<Mutex<Vec<String>>>);
    struct Msg<'a>(&'a mut String);
    impl Visit for Msg<'_> {
        fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
            if field.name() == "message" {
                *self.0 = format!("{value:?}");
            }
        }
    }
    impl Subscriber for Capture {
        fn enabled(&self, _: &Metadata<'_>) -> bool {
            true
        }
        fn new_span(&self, _: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _: &Id, _: &Record<'_>) {}
        fn record_follows_from(&self, _: &Id, _: &Id) {}
        fn event(&self, e: &Event<'_>) {
            if e.metadata().target() == "qnn" {
                let mut s = String::new();
                e.record(&mut Msg(&mut s));
                self.0.lock().expect("lock").push(s);
            }
        }
        fn enter(&self, _: &Id) {}
        fn exit(&self, _: &Id) {}
    }

    let mock = Mock::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    tracing::subscriber::with_default(Capture(seen.clone()), || {
        let lib = QnnLibrary::load(mock.path()).expect("load");
        let _backend = Backend::new(&lib, LogLevel::Info).expect("backend");
    });
    let seen = seen.lock().expect("lock");
    // The mock's message contains "%%", which only a real vsnprintf turns into "%".
    assert!(seen.iter().any(|m| m.contains("log created (100% mock)")), "{seen:?}");
    assert!(seen.iter().any(|m| m.contains("backend created")), "{seen:?}");
}

#[test]
fn four_bit_axis_weights_and_sigmoid_execute_and_survive_the_binary() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let (n, k) = (3u32, 4u32);
    let scales = vec![0.5f32, 0.25, 0.125];
    // 4-bit codes in an int8 container, -8..=7.
    let codes: Vec<i8> = vec![-8, -3, 0, 7, 1, 2, 3, 4, -1, -2, -5, 6];
    let wq: Vec<u8> = codes.iter().map(|&c| c as u8).collect();
    let wspec = TensorSpec::new("w", DType::QI8, &[n, k]).with_quant(Quant::PerAxisBitwidth {
        bitwidth: 4,
        axis: 0,
        scales: scales.clone(),
        offsets: vec![0; 3],
    });
    let xv = det_values(2 * k as usize, 5);
    let mut g = ctx.graph_builder("w4", &GraphOptions::default()).expect("graph");
    let x = g.input(TensorSpec::new("x", DType::F32, &[2, k])).expect("x");
    let w = g.constant(wspec, &wq).expect("w");
    let h = g.native(TensorSpec::new("h", DType::F32, &[2, n])).expect("h");
    let y = g.output(TensorSpec::new("y", DType::F32, &[2, n])).expect("y");
    g.add_node(ops::fully_connected("fc", x, w, None, h)).expect("fc");
    g.add_node(ops::unary("sig", ops::SIGMOID, h, y)).expect("sigmoid");
    let mut graph = g.finalize().expect("finalize");
    let mut out = vec![0u8; (2 * n * 4) as usize];
    graph.execute(&[&f32_bytes(&xv)], &mut [&mut out]).expect("execute");
    let (nu, ku) = (n as usize, k as usize);
    let want: Vec<f32> = (0..2 * nu)
        .map(|o| {
            let (i, j) = (o / nu, o % nu);
            let z: f32 = (0..ku).map(|p| xv[i * ku + p] * codes[j * ku + p] as f32 * scales[j]).sum();
            1.0 / (1.0 + (-z).exp())
        })
        .collect();
    assert_close(&bytes_f32(&out), &want, 1e-6);
    let bin = ctx.binary().expect("binary");
    let ctx2 = Context::from_binary(&backend, None, &bin).expect("reload");
    let mut g2 = ctx2.retrieve_graph(&graph.meta()).expect("retrieve");
    let mut out2 = vec![0u8; out.len()];
    g2.execute(&[&f32_bytes(&xv)], &mut [&mut out2]).expect("execute");
    assert_eq!(out, out2);
}

#[test]
fn split_pieces_feed_ops_and_concat_back() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let f = |n: &str, dims: &[u32]| TensorSpec::new(n, DType::F32, dims);
    let mut g = ctx.graph_builder("split", &GraphOptions::default()).expect("graph");
    // Rows 0..2, 2..3 and 3..6 of a [6, 2] buffer; the middle piece is negated, then all rejoin.
    let x = g.input(f("x", &[6, 2])).expect("x");
    let pieces: Vec<TensorId> =
        [2u32, 1, 3].iter().enumerate().map(|(i, &r)| g.native(f(&format!("p{i}"), &[r, 2])).expect("p")).collect();
    let neg = g.native(f("neg", &[1, 2])).expect("neg");
    let y = g.output(f("y", &[6, 2])).expect("y");
    g.add_node(ops::split("sp", x, 0, &[2, 3], &pieces)).expect("split");
    g.add_node(ops::unary("ng", ops::ELEMENT_WISE_NEG, pieces[1], neg)).expect("neg");
    g.add_node(ops::concat("cat", &[pieces[0], neg, pieces[2]], 0, y)).expect("concat");
    let mut graph = g.finalize().expect("finalize");
    let xv: Vec<f32> = (0..12).map(|i| i as f32).collect();
    let mut out = vec![0u8; 12 * 4];
    graph.execute(&[&f32_bytes(&xv)], &mut [&mut out]).expect("execute");
    let mut want = xv.clone();
    want[4] = -4.0;
    want[5] = -5.0;
    assert_close(&bytes_f32(&out), &want, 0.0);
}
