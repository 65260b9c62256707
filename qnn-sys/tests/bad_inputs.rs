//! Bad inputs and provider failures surface as typed errors, never crashes.

mod common;

use common::*;
use qnn_sys::ffi::*;
use qnn_sys::ops;
use qnn_sys::*;
use std::ptr::null_mut;

fn api_code(e: &QnnError) -> (&'static str, u16) {
    match e {
        QnnError::Api { function, code } => (function, code.0),
        other => panic!("expected an Api error, got {other:?}"),
    }
}

#[test]
fn missing_library_path() {
    let err = QnnLibrary::load("/nonexistent/libQnnHtp.so").unwrap_err();
    assert!(matches!(err, QnnError::LibraryLoad { .. }), "{err:?}");
    assert!(err.to_string().contains("/nonexistent/libQnnHtp.so"));
}

#[cfg(target_os = "linux")]
#[test]
fn library_without_the_provider_symbol() {
    // libm is always present and certainly exports no QNN symbol.
    let err = QnnLibrary::load("libm.so.6").unwrap_err();
    match &err {
        QnnError::MissingSymbol { symbol, .. } => assert_eq!(*symbol, "QnnInterface_getProviders"),
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
}

#[test]
fn too_old_api_version_is_refused_naming_both_versions() {
    let mock = Mock::new();
    mock.set_api_version(2, 10, 3);
    let err = QnnLibrary::load(mock.path()).unwrap_err();
    assert!(matches!(err, QnnError::ApiVersionTooOld { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(msg.contains("2.10.3") && msg.contains("2.18.0"), "{msg}");
}

#[test]
fn other_major_version_is_refused() {
    let mock = Mock::new();
    mock.set_api_version(3, 0, 0);
    let err = QnnLibrary::load(mock.path()).unwrap_err();
    assert!(matches!(err, QnnError::ApiMajorMismatch { .. }), "{err:?}");
}

#[test]
fn oldest_supported_version_loads_with_62_slots() {
    let mock = Mock::new();
    mock.set_api_version(2, 18, 0);
    let lib = QnnLibrary::load(mock.path()).expect("2.18 is the floor");
    // Slots past the provider's minor are never read: the table prefix stops at 62.
    assert!(lib.table().contextApplyBinarySection.is_none());
    assert!(lib.table().graphExecute.is_some());
}

#[test]
fn provider_query_error_is_typed() {
    let mock = Mock::new();
    mock.inject_error("QnnInterface_getProviders", 1003);
    let err = QnnLibrary::load(mock.path()).unwrap_err();
    assert!(matches!(err, QnnError::ProviderQuery(StatusCode(1003))), "{err:?}");
}

#[test]
fn backend_create_failure_is_typed_and_leaks_nothing() {
    let mock = Mock::new();
    mock.inject_error("backendCreate", 1010);
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let err = Backend::new(&lib, LogLevel::Warn).err().expect("must fail");
    assert_eq!(api_code(&err), ("backendCreate", 1010));
    assert_eq!(mock.live_handles(), 0, "log handle freed on failure");
}

fn tiny_graph(ctx: &Context) -> GraphBuilder<'static> {
    let mut g = ctx.graph_builder("g", &GraphOptions::default()).expect("graph");
    let x = g.input(TensorSpec::new("x", DType::F32, &[1, 4])).expect("x");
    let y = g.output(TensorSpec::new("y", DType::F32, &[1, 4])).expect("y");
    g.add_node(ops::softmax("sm", x, 1, 1.0, y)).expect("node");
    g
}

#[test]
fn graph_finalize_failure_injection() {
    let mock = Mock::new();
    {
        let lib = QnnLibrary::load(mock.path()).expect("load");
        let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
        let ctx = Context::new(&backend, None).expect("ctx");
        mock.inject_error("graphFinalize", 6022);
        let err = tiny_graph(&ctx).finalize().err().expect("finalize must fail");
        assert_eq!(api_code(&err), ("graphFinalize", 6022));
        assert_eq!(err.status().map(|c| c.component()), Some(Component::Graph));
        assert!(err.to_string().contains("GRAPH_ERROR_FINALIZE_FAILED"), "{err}");
        // Clearing the fault lets a fresh graph finalize in the same context.
        mock.inject_error("graphFinalize", 0);
        let mut g = ctx.graph_builder("g2", &GraphOptions::default()).expect("graph");
        let x = g.input(TensorSpec::new("x", DType::F32, &[1, 4])).expect("x");
        let y = g.output(TensorSpec::new("y", DType::F32, &[1, 4])).expect("y");
        g.add_node(ops::softmax("sm", x, 1, 1.0, y)).expect("node");
        g.finalize().expect("finalize after clearing the fault");
    }
    assert_eq!(mock.live_handles(), 0, "{}", mock.last_error());
}

#[test]
fn execute_before_finalize_and_injected_execute_failure() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let mut graph = tiny_graph(&ctx).finalize().expect("finalize");
    mock.inject_error("graphExecute", 1007);
    let x = f32_bytes(&[1.0, 2.0, 3.0, 4.0]);
    let mut y = vec![0u8; 16];
    let err = graph.execute(&[&x], &mut [&mut y]).unwrap_err();
    assert_eq!(api_code(&err), ("graphExecute", 1007));
    assert!(err.status().is_some_and(|c| c.is_recoverable_ssr()));
    mock.inject_error("graphExecute", 0);
    graph.execute(&[&x], &mut [&mut y]).expect("execute after clearing");
}

#[test]
fn unknown_op_and_shape_dtype_mismatches() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let w = f32_bytes(&[0.5; 12]);
    let mut g = ctx.graph_builder("bad", &GraphOptions::default()).expect("graph");
    let x = g.input(TensorSpec::new("x", DType::F32, &[2, 4])).expect("x");
    let xh = g.input(TensorSpec::new("xh", DType::F16, &[2, 4])).expect("xh");
    let wt = g.constant(TensorSpec::new("w", DType::F32, &[3, 4]), &w).expect("w");
    let y = g.output(TensorSpec::new("y", DType::F32, &[2, 3])).expect("y");
    let wrong = g.native(TensorSpec::new("wrong", DType::F32, &[2, 5])).expect("n");
    let orphan = g.native(TensorSpec::new("orphan", DType::F32, &[2, 4])).expect("n");

    let err = g.add_node(Op::new("gelu", "NotARealOp").inputs(&[x]).outputs(&[y])).unwrap_err();
    assert_eq!(api_code(&err), ("graphAddNode", 6005));
    assert!(mock.last_error().contains("unknown op type"), "{}", mock.last_error());

    let mut custom = Op::new("pkg", "Softmax").inputs(&[x]).outputs(&[wrong]);
    custom.package = "com.example.ops".into();
    assert_eq!(api_code(&g.add_node(custom).unwrap_err()), ("graphAddNode", 6005));

    // FC output dims disagree with [M, N].
    let err = g.add_node(ops::fully_connected("fc", x, wt, None, wrong)).unwrap_err();
    assert_eq!(api_code(&err), ("graphAddNode", 6005));
    assert!(mock.last_error().contains("expected [2, 3]"), "{}", mock.last_error());

    // fp16 activation into an fp32 output.
    let err = g.add_node(ops::fully_connected("fc16", xh, wt, None, y)).unwrap_err();
    assert_eq!(api_code(&err), ("graphAddNode", 6005));

    // Element-wise shapes that do not broadcast.
    let err = g.add_node(ops::binary("add", ops::ELEMENT_WISE_ADD, x, wt, orphan)).unwrap_err();
    assert_eq!(api_code(&err), ("graphAddNode", 6005));

    // Consuming a NATIVE tensor nobody produced.
    let err = g.add_node(ops::softmax("sm", orphan, 1, 1.0, wrong)).unwrap_err();
    assert_eq!(api_code(&err), ("graphAddNode", 6007));

    // The output y is never produced → finalize refuses (after one valid node).
    let ok = g.native(TensorSpec::new("ok", DType::F32, &[2, 4])).expect("n");
    g.add_node(ops::softmax("ok", x, 1, 1.0, ok)).expect("valid node");
    let err = g.finalize().err().expect("unconnected output");
    assert_eq!(api_code(&err), ("graphFinalize", 6007));
}

#[test]
fn wrapper_rejects_bad_specs_before_qnn() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let mut g = ctx.graph_builder("g", &GraphOptions::default()).expect("graph");
    let short = [0u8; 3];
    assert!(matches!(g.constant(TensorSpec::new("w", DType::F32, &[2]), &short), Err(QnnError::InvalidArgument(_))));
    assert!(matches!(g.input(TensorSpec::new("q", DType::QU8, &[2])), Err(QnnError::InvalidArgument(_))));
    assert!(matches!(g.input(TensorSpec::new("z", DType::F32, &[0, 2])), Err(QnnError::InvalidArgument(_))));
    assert!(matches!(g.input(TensorSpec::new("nul\0", DType::F32, &[2])), Err(QnnError::InvalidArgument(_))));
    g.input(TensorSpec::new("dup", DType::F32, &[2])).expect("first");
    assert!(matches!(g.input(TensorSpec::new("dup", DType::F32, &[2])), Err(QnnError::InvalidArgument(_))));
}

#[test]
fn corrupt_context_binary_is_typed() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let err = Context::from_binary(&backend, None, b"definitely not a context").err().expect("fail");
    assert_eq!(api_code(&err), ("contextCreateFromBinary", 5005));
    let mut v = b"QMCKCTX1".to_vec();
    v.extend(99u32.to_le_bytes());
    let err = Context::from_binary(&backend, None, &v).err().expect("fail");
    assert_eq!(api_code(&err), ("contextCreateFromBinary", 5004));
    // Retrieving a graph name the binary lacks.
    let ctx = Context::new(&backend, None).expect("ctx");
    let _g = tiny_graph(&ctx).finalize().expect("finalize");
    let bin = ctx.binary().expect("binary");
    let loaded = Context::from_binary(&backend, None, &bin).expect("load");
    let meta = GraphMeta { name: "nope".into(), inputs: vec![], outputs: vec![] };
    let err = loaded.retrieve_graph(&meta).err().expect("fail");
    assert_eq!(api_code(&err), ("graphRetrieve", 6002));
}

#[test]
fn raw_table_null_handles_and_wrong_order() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let t = *lib.table();
    let (
        Some(ctx_create),
        Some(graph_create),
        Some(backend_create),
        Some(backend_free),
        Some(device_create),
        Some(device_free),
        Some(ctx_free),
    ) = (t.contextCreate, t.graphCreate, t.backendCreate, t.backendFree, t.deviceCreate, t.deviceFree, t.contextFree)
    else {
        panic!("mock implements these slots");
    };
    let mut h: Qnn_Handle_t = null_mut();
    // SAFETY: calling the mock's entry points with deliberately bad handles; out-pointers are valid.
    unsafe {
        assert_eq!(ctx_create(null_mut(), null_mut(), std::ptr::null(), &mut h) & 0xFFFF, 5000, "null backend");
        assert_eq!(graph_create(null_mut(), c"g".as_ptr(), std::ptr::null(), &mut h) & 0xFFFF, 5002, "null context");
        assert_eq!(device_create(null_mut(), std::ptr::null(), &mut h) & 0xFFFF, 1005, "device before backend");
        let mut be: Qnn_Handle_t = null_mut();
        assert_eq!(backend_create(null_mut(), std::ptr::null(), &mut be), 0);
        let mut dev: Qnn_Handle_t = null_mut();
        assert_eq!(device_create(null_mut(), std::ptr::null(), &mut dev), 0);
        let mut ctx: Qnn_Handle_t = null_mut();
        assert_eq!(ctx_create(be, dev, std::ptr::null(), &mut ctx), 0);
        // Out-of-order teardown is refused with documented codes.
        assert_eq!(backend_free(be) & 0xFFFF, 1005, "backend before its context");
        assert_eq!(device_free(dev) & 0xFFFF, 14003, "device still associated to a context");
        assert_eq!(ctx_free(ctx, null_mut()), 0);
        assert_eq!(device_free(dev), 0);
        assert_eq!(backend_free(be), 0);
        assert_eq!(backend_free(be) & 0xFFFF, 4000, "double free");
    }
    assert_eq!(mock.live_handles(), 0);
}

#[test]
fn op_params_ranks_and_weight_dtypes_are_validated() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let gamma = f32_bytes(&[1.0; 4]);
    let w16 = vec![0u8; 3 * 4 * 2];
    let b16 = vec![0u8; 3 * 2];
    let mut g = ctx.graph_builder("params", &GraphOptions::default()).expect("graph");
    let x = g.input(TensorSpec::new("x", DType::F32, &[2, 4])).expect("x");
    let gm = g.constant(TensorSpec::new("gamma", DType::F32, &[4]), &gamma).expect("gamma");
    let wh = g.constant(TensorSpec::new("w16", DType::F16, &[3, 4]), &w16).expect("w16");
    let bh = g.constant(TensorSpec::new("b16", DType::F16, &[3]), &b16).expect("b16");
    let y = g.native(TensorSpec::new("y", DType::F32, &[2, 4])).expect("y");
    let y3 = g.native(TensorSpec::new("y3", DType::F32, &[2, 3])).expect("y3");
    let big = g.native(TensorSpec::new("big", DType::F32, &[1, 1, 1, 2, 4])).expect("big");
    let bad = |g: &mut GraphBuilder<'_>, op: Op, needle: &str| {
        let err = g.add_node(op).unwrap_err();
        assert_eq!(api_code(&err), ("graphAddNode", 6005));
        assert!(mock.last_error().contains(needle), "want {needle:?} in {:?}", mock.last_error());
    };
    // RmsNorm needs `epsilon` (FLOAT_32, > 0) and `axes`.
    bad(
        &mut g,
        Op::new("n1", ops::RMS_NORM).inputs(&[x, gm]).outputs(&[y]).param("axes", ParamValue::U32Tensor(vec![1])),
        "missing required param \"epsilon\"",
    );
    bad(&mut g, ops::rms_norm("n2", x, gm, -1.0, 1, y), "epsilon must be positive");
    bad(&mut g, ops::rms_norm("n3", x, gm, 1e-6, 1, y).param("epsilon", ParamValue::F32(1e-6)), "given twice");
    // Params of the wrong kind or unknown names.
    bad(
        &mut g,
        Op::new("s1", ops::SOFTMAX).inputs(&[x]).outputs(&[y]).param("axis", ParamValue::F32(1.0)),
        "wrong kind",
    );
    bad(&mut g, ops::softmax("s2", x, 1, 1.0, y).param("temperature", ParamValue::F32(2.0)), "unknown param");
    bad(&mut g, ops::softmax("s3", x, 1, 0.0, y), "beta must be positive");
    bad(&mut g, Op::new("c1", ops::CONCAT).inputs(&[x]).outputs(&[y]), "missing required param \"axis\"");
    // HTP rank limit.
    bad(&mut g, ops::reshape("r5", x, big), "rank 5");
    // fp16 weights and bias under fp32 activations.
    bad(&mut g, ops::fully_connected("fc16w", x, wh, None, y3), "not usable");
    let w32 = f32_bytes(&[0.1; 12]);
    let wf = g.constant(TensorSpec::new("w32", DType::F32, &[3, 4]), &w32).expect("w32");
    bad(&mut g, ops::fully_connected("fc16b", x, wf, Some(bh), y3), "bias dtype");
    g.add_node(ops::fully_connected("fc_ok", x, wf, None, y3)).expect("valid FC");
    // Split: ascending indices inside the axis, one output per piece, each of the piece's shape.
    let p1 = g.native(TensorSpec::new("p1", DType::F32, &[1, 4])).expect("p1");
    let p2 = g.native(TensorSpec::new("p2", DType::F32, &[1, 4])).expect("p2");
    bad(&mut g, ops::split("sp1", x, 0, &[2], &[p1, p2]), "not ascending inside");
    bad(&mut g, ops::split("sp2", x, 0, &[1], &[p1, p2, p2]), "3 outputs for 2 pieces");
    bad(&mut g, ops::split("sp3", x, 1, &[2], &[p1, p2]), "expected [2, 2]");
    g.add_node(ops::split("sp_ok", x, 0, &[1], &[p1, p2])).expect("valid Split");
}

#[test]
fn four_bit_weights_are_range_checked() {
    let mock = Mock::new();
    let lib = QnnLibrary::load(mock.path()).expect("load");
    let backend = Backend::new(&lib, LogLevel::Warn).expect("backend");
    let ctx = Context::new(&backend, None).expect("ctx");
    let mut g = ctx.graph_builder("w4", &GraphOptions::default()).expect("graph");
    let quant = |bitwidth| Quant::PerAxisBitwidth { bitwidth, axis: 0, scales: vec![0.5, 0.25], offsets: vec![0, 0] };
    let spec = |name: &str, bitwidth| TensorSpec::new(name, DType::QI8, &[2, 2]).with_quant(quant(bitwidth));
    // 9 does not fit 4 signed bits: the provider refuses the static tensor.
    let over = [1u8, 9, 0xF8, 7];
    let err = g.constant(spec("over", 4), &over).expect_err("out of range");
    assert_eq!(api_code(&err), ("tensorCreateGraphTensor", 6004));
    assert!(mock.last_error().contains("4-bit range"), "{}", mock.last_error());
    g.constant(spec("ok", 4), &[1u8, 0xF8, 0, 7]).expect("-8..7 fits");
    // The wrapper rejects impossible encodings before QNN sees them.
    for bad in [
        spec("wide", 9),
        TensorSpec::new("axis", DType::QI8, &[2, 2]).with_quant(Quant::PerAxisBitwidth {
            bitwidth: 4,
            axis: 1,
            scales: vec![1.0; 3],
            offsets: vec![0; 3],
        }),
    ] {
        assert!(matches!(g.constant(bad, &[0u8; 4]), Err(QnnError::InvalidArgument(_))));
    }
}
