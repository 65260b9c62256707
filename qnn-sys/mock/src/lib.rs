//! Mock QNN provider for SDK-free tests.
//!
//! Exports `QnnInterface_getProviders` with the documented function table, keeps
//! strict bookkeeping of handles (wrong order, null/unknown handles and teardown
//! out of reverse order return the documented error codes), validates ops and
//! tensors, executes graphs on the CPU, and serialises contexts in its own format.
//!
//! Test controls (exported, `QnnMock_*`): API version override (or env
//! `QNN_MOCK_API_VERSION=2.10.0`), per-function failure injection, the recorded
//! call sequence, the last validation message and a live-handle count. State is
//! per loaded copy of the library, so tests isolate themselves by loading a copy.

#![allow(clippy::missing_safety_doc)]

#[path = "../../src/ffi/mod.rs"]
mod ffi;
mod model;
mod ops;
mod validate;

use ffi::*;
use model::{
    cstr, deserialize, dtype_size, is_fixed_point, read_tensor, serialize, MNode, MParam, MTensor, ParseError,
    SerialGraph,
};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void};
use std::sync::{LazyLock, Mutex, MutexGuard};

// ------------------------------------------------------------------ error codes

const E_NOT_PERMITTED: u64 = 1005;
const E_COMMON_INVALID_ARGUMENT: u64 = 1004;
const E_CONTEXT_INVALID_ARGUMENT: u64 = 5000;
const E_CONTEXT_INVALID_HANDLE: u64 = 5002;
const E_CONTEXT_NOT_FINALIZED: u64 = 5003;
const E_CONTEXT_BINARY_VERSION: u64 = 5004;
const E_CONTEXT_CREATE_FROM_BINARY: u64 = 5005;
const E_CONTEXT_GET_BINARY_FAILED: u64 = 5007;
const E_GRAPH_INVALID_ARGUMENT: u64 = 6000;
const E_GRAPH_INVALID_HANDLE: u64 = 6001;
const E_GRAPH_DOES_NOT_EXIST: u64 = 6002;
const E_GRAPH_INVALID_NAME: u64 = 6003;
const E_GRAPH_INVALID_TENSOR: u64 = 6004;
const E_GRAPH_INVALID_OP_CONFIG: u64 = 6005;
const E_GRAPH_UNCONNECTED_NODE: u64 = 6007;
const E_GRAPH_FINALIZE_FAILED: u64 = 6022;
const E_GRAPH_NOT_FINALIZED: u64 = 6023;
const E_GRAPH_FINALIZED: u64 = 6024;
const E_MEM_INVALID_ARGUMENT: u64 = 8000;
const E_MEM_INVALID_HANDLE: u64 = 8001;
const E_MEM_ALREADY_REGISTERED: u64 = 8002;
const E_MEM_MAPPING: u64 = 8003;
const E_MEM_UNSUPPORTED_MEMTYPE: u64 = 8005;
const E_DEVICE_INVALID_HANDLE: u64 = 14000;
const E_DEVICE_ASSOCIATED_TO_CONTEXT: u64 = 14003;
/// Backend range; the reference gives no specific backend codes.
const E_BACKEND_INVALID_HANDLE: u64 = 4000;

// ------------------------------------------------------------------ state

struct Graph {
    name: String,
    ctx: usize,
    tensors: Vec<MTensor>,
    nodes: Vec<MNode>,
    produced: HashSet<u32>,
    finalized: bool,
}

impl Graph {
    fn tensor(&self, id: u32) -> Option<&MTensor> {
        self.tensors.iter().find(|t| t.id == id)
    }
}

struct Mem {
    ctx: usize,
    fd: i32,
    ptr: *mut u8,
    len: usize,
}

struct State {
    next: usize,
    version: Qnn_ApiVersion_t,
    calls: Vec<String>,
    inject: HashMap<String, u64>,
    last_error: String,
    log_cbs: HashMap<usize, (QnnLog_Callback_t, u32)>,
    backends: HashMap<usize, usize>,
    devices: HashSet<usize>,
    contexts: HashMap<usize, (usize, usize)>,
    graphs: HashMap<usize, Graph>,
    mems: HashMap<usize, Mem>,
    power_ids: HashSet<u32>,
}

// SAFETY: raw pointers in `Mem` are our own mmaps, only touched under the mutex.
unsafe impl Send for State {}

fn default_version() -> Qnn_ApiVersion_t {
    let mut core = Qnn_Version_t { major: 2, minor: 32, patch: 0 };
    if let Ok(v) = std::env::var("QNN_MOCK_API_VERSION") {
        let p: Vec<u32> = v.split('.').filter_map(|s| s.parse().ok()).collect();
        if p.len() == 3 {
            core = Qnn_Version_t { major: p[0], minor: p[1], patch: p[2] };
        }
    }
    Qnn_ApiVersion_t { coreApiVersion: core, backendApiVersion: Qnn_Version_t { major: 5, minor: 43, patch: 0 } }
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(|| {
    Mutex::new(State {
        next: 0x1000,
        version: default_version(),
        calls: Vec::new(),
        inject: HashMap::new(),
        last_error: String::new(),
        log_cbs: HashMap::new(),
        backends: HashMap::new(),
        devices: HashSet::new(),
        contexts: HashMap::new(),
        graphs: HashMap::new(),
        mems: HashMap::new(),
        power_ids: HashSet::new(),
    })
});

fn state() -> MutexGuard<'static, State> {
    // A panic while holding the lock must not wedge later calls.
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

impl State {
    fn new_handle(&mut self) -> usize {
        self.next += 0x10;
        self.next
    }

    /// Records a call and returns an injected failure, if any.
    fn enter(&mut self, name: &str) -> Result<(), u64> {
        self.calls.push(name.to_string());
        match self.inject.get(name) {
            Some(&code) => {
                self.last_error = format!("{name}: injected failure {code}");
                Err(code)
            }
            None => Ok(()),
        }
    }

    fn fail(&mut self, code: u64, msg: String) -> u64 {
        self.emit(QNN_LOG_LEVEL_ERROR, &msg);
        self.last_error = msg;
        code
    }

    /// Sends a message to every registered log callback at or above its level.
    fn emit(&self, level: u32, msg: &str) {
        // `%` would be read as a conversion; our va_list carries no arguments.
        let text = format!("qnn-mock: {}\0", msg.replace('%', "%%").replace('\0', ""));
        // A zeroed stand-in va_list: no conversions in `text`, so vsnprintf reads no argument,
        // but it may still va_copy the struct, so it must be valid memory of va_list size.
        let mut dummy_va = [0u64; 4];
        for (cb, max) in self.log_cbs.values() {
            if let Some(cb) = cb {
                if level <= *max {
                    // SAFETY: the callback was registered through logCreate; text is NUL-terminated.
                    unsafe { cb(text.as_ptr().cast(), level, 0, dummy_va.as_mut_ptr().cast()) };
                }
            }
        }
    }
}

fn key(h: *mut c_void) -> usize {
    h as usize
}

fn handle(k: usize) -> *mut c_void {
    k as *mut c_void
}

/// Runs a body with the state lock and catches panics (never unwind into C).
fn guarded(name: &str, body: impl FnOnce(&mut State) -> u64) -> u64 {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut s = state();
        if let Err(code) = s.enter(name) {
            return code;
        }
        body(&mut s)
    }));
    r.unwrap_or(1003) // COMMON_ERROR_SYSTEM
}

// ------------------------------------------------------------------ core API

unsafe extern "C" fn property_has_capability(_key: u32) -> u64 {
    guarded("propertyHasCapability", |_| 0)
}

unsafe extern "C" fn log_create(cb: QnnLog_Callback_t, level: u32, out: *mut Qnn_LogHandle_t) -> u64 {
    guarded("logCreate", |s| {
        if out.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "logCreate: null out".into());
        }
        let h = s.new_handle();
        s.log_cbs.insert(h, (cb, level));
        // SAFETY: out is non-null and writable per the API contract.
        unsafe { *out = handle(h) };
        s.emit(QNN_LOG_LEVEL_INFO, "log created (100% mock)");
        0
    })
}

unsafe extern "C" fn log_set_log_level(log: Qnn_LogHandle_t, level: u32) -> u64 {
    guarded("logSetLogLevel", |s| match s.log_cbs.get_mut(&key(log)) {
        Some(e) => {
            e.1 = level;
            0
        }
        None => s.fail(E_COMMON_INVALID_ARGUMENT, "logSetLogLevel: unknown log".into()),
    })
}

unsafe extern "C" fn log_free(log: Qnn_LogHandle_t) -> u64 {
    guarded("logFree", |s| {
        let k = key(log);
        if !s.log_cbs.contains_key(&k) {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "logFree: unknown log".into());
        }
        if s.backends.values().any(|&l| l == k) {
            return s.fail(E_NOT_PERMITTED, "logFree: a backend still uses this log".into());
        }
        s.log_cbs.remove(&k);
        0
    })
}

unsafe extern "C" fn backend_create(
    log: Qnn_LogHandle_t,
    _cfg: *const *const Qnn_Config_t,
    out: *mut Qnn_BackendHandle_t,
) -> u64 {
    guarded("backendCreate", |s| {
        if out.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "backendCreate: null out".into());
        }
        let lk = key(log);
        if lk != 0 && !s.log_cbs.contains_key(&lk) {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "backendCreate: unknown log handle".into());
        }
        let h = s.new_handle();
        s.backends.insert(h, lk);
        // SAFETY: out non-null.
        unsafe { *out = handle(h) };
        s.emit(QNN_LOG_LEVEL_INFO, "backend created");
        0
    })
}

unsafe extern "C" fn backend_get_api_version(out: *mut Qnn_ApiVersion_t) -> u64 {
    guarded("backendGetApiVersion", |s| {
        if out.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "backendGetApiVersion: null out".into());
        }
        // SAFETY: out non-null.
        unsafe { *out = s.version };
        0
    })
}

static BUILD_ID: &[u8] = b"qnn-mock 0.1\0";

unsafe extern "C" fn backend_get_build_id(out: *mut *const c_char) -> u64 {
    guarded("backendGetBuildId", |s| {
        if out.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "backendGetBuildId: null out".into());
        }
        // SAFETY: out non-null; BUILD_ID is static and NUL-terminated.
        unsafe { *out = BUILD_ID.as_ptr().cast() };
        0
    })
}

unsafe extern "C" fn backend_validate_op_config(backend: Qnn_BackendHandle_t, op: Qnn_OpConfig_t) -> u64 {
    guarded("backendValidateOpConfig", |s| {
        if !s.backends.contains_key(&key(backend)) {
            return s.fail(E_BACKEND_INVALID_HANDLE, "backendValidateOpConfig: unknown backend".into());
        }
        // SAFETY: caller passes a valid op config.
        match unsafe { read_op(&op) } {
            Ok((node, _, _)) if ops::SUPPORTED_OPS.contains(&node.op.as_str()) => 0,
            Ok((node, _, _)) => s.fail(E_GRAPH_INVALID_OP_CONFIG, format!("unknown op type {:?}", node.op)),
            Err(e) => s.fail(E_GRAPH_INVALID_OP_CONFIG, e),
        }
    })
}

unsafe extern "C" fn backend_free(backend: Qnn_BackendHandle_t) -> u64 {
    guarded("backendFree", |s| {
        let k = key(backend);
        if !s.backends.contains_key(&k) {
            return s.fail(E_BACKEND_INVALID_HANDLE, "backendFree: unknown backend".into());
        }
        if s.contexts.values().any(|&(b, _)| b == k) {
            return s.fail(E_NOT_PERMITTED, "backendFree: contexts still alive (teardown out of order)".into());
        }
        if !s.devices.is_empty() {
            return s.fail(E_NOT_PERMITTED, "backendFree: devices still alive (teardown out of order)".into());
        }
        s.backends.remove(&k);
        0
    })
}

unsafe extern "C" fn device_create(
    log: Qnn_LogHandle_t,
    cfg: *const *const Qnn_Config_t,
    out: *mut Qnn_DeviceHandle_t,
) -> u64 {
    guarded("deviceCreate", |s| {
        if out.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "deviceCreate: null out".into());
        }
        if s.backends.is_empty() {
            return s.fail(E_NOT_PERMITTED, "deviceCreate before backendCreate".into());
        }
        let lk = key(log);
        if lk != 0 && !s.log_cbs.contains_key(&lk) {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "deviceCreate: unknown log".into());
        }
        // Walk the NULL-terminated config list to prove it is well formed.
        if !cfg.is_null() {
            let mut i = 0;
            // SAFETY: the list is NULL-terminated per the API contract.
            while !unsafe { *cfg.add(i) }.is_null() {
                i += 1;
                if i > 64 {
                    return s.fail(14001, "deviceCreate: config list not NULL-terminated".into());
                }
            }
        }
        let h = s.new_handle();
        s.devices.insert(h);
        // SAFETY: out non-null.
        unsafe { *out = handle(h) };
        0
    })
}

unsafe extern "C" fn device_free(device: Qnn_DeviceHandle_t) -> u64 {
    guarded("deviceFree", |s| {
        let k = key(device);
        if !s.devices.contains(&k) {
            return s.fail(E_DEVICE_INVALID_HANDLE, "deviceFree: unknown device".into());
        }
        if !s.power_ids.is_empty() {
            return s.fail(E_NOT_PERMITTED, "deviceFree: power config ids still alive".into());
        }
        if s.contexts.values().any(|&(_, d)| d == k) {
            return s.fail(E_DEVICE_ASSOCIATED_TO_CONTEXT, "deviceFree: a context still uses this device".into());
        }
        s.devices.remove(&k);
        0
    })
}

fn check_backend_device(s: &mut State, backend: usize, device: usize) -> Result<(), u64> {
    if !s.backends.contains_key(&backend) {
        return Err(s.fail(E_CONTEXT_INVALID_ARGUMENT, "context: unknown or null backend handle".into()));
    }
    if device != 0 && !s.devices.contains(&device) {
        return Err(s.fail(E_DEVICE_INVALID_HANDLE, "context: unknown device handle".into()));
    }
    Ok(())
}

unsafe extern "C" fn context_create(
    backend: Qnn_BackendHandle_t,
    device: Qnn_DeviceHandle_t,
    _cfg: *const *const Qnn_Config_t,
    out: *mut Qnn_ContextHandle_t,
) -> u64 {
    guarded("contextCreate", |s| {
        if out.is_null() {
            return s.fail(E_CONTEXT_INVALID_ARGUMENT, "contextCreate: null out".into());
        }
        if let Err(c) = check_backend_device(s, key(backend), key(device)) {
            return c;
        }
        let h = s.new_handle();
        s.contexts.insert(h, (key(backend), key(device)));
        // SAFETY: out non-null.
        unsafe { *out = handle(h) };
        0
    })
}

fn context_graphs(s: &State, ctx: usize) -> Vec<usize> {
    let mut v: Vec<usize> = s.graphs.iter().filter(|(_, g)| g.ctx == ctx).map(|(&k, _)| k).collect();
    v.sort_unstable();
    v
}

fn serialize_context(s: &State, ctx: usize) -> Result<Vec<u8>, String> {
    let gs = context_graphs(s, ctx);
    let mut out = Vec::new();
    for k in &gs {
        let g = &s.graphs[k];
        if !g.finalized {
            return Err(format!("graph {:?} not finalized", g.name));
        }
        out.push(SerialGraph { name: &g.name, tensors: &g.tensors, nodes: &g.nodes });
    }
    Ok(serialize(&out))
}

unsafe extern "C" fn context_get_binary_size(ctx: Qnn_ContextHandle_t, size: *mut u64) -> u64 {
    guarded("contextGetBinarySize", |s| {
        if !s.contexts.contains_key(&key(ctx)) {
            return s.fail(E_CONTEXT_INVALID_HANDLE, "contextGetBinarySize: unknown context".into());
        }
        if size.is_null() {
            return s.fail(E_CONTEXT_INVALID_ARGUMENT, "contextGetBinarySize: null out".into());
        }
        match serialize_context(s, key(ctx)) {
            // SAFETY: size non-null.
            Ok(b) => unsafe {
                *size = b.len() as u64;
                0
            },
            Err(e) => s.fail(E_CONTEXT_NOT_FINALIZED, e),
        }
    })
}

unsafe extern "C" fn context_get_binary(
    ctx: Qnn_ContextHandle_t,
    buf: *mut c_void,
    size: u64,
    written: *mut u64,
) -> u64 {
    guarded("contextGetBinary", |s| {
        if !s.contexts.contains_key(&key(ctx)) {
            return s.fail(E_CONTEXT_INVALID_HANDLE, "contextGetBinary: unknown context".into());
        }
        if buf.is_null() || written.is_null() {
            return s.fail(E_CONTEXT_INVALID_ARGUMENT, "contextGetBinary: null buffer".into());
        }
        let b = match serialize_context(s, key(ctx)) {
            Ok(b) => b,
            Err(e) => return s.fail(E_CONTEXT_NOT_FINALIZED, e),
        };
        if (b.len() as u64) > size {
            return s.fail(E_CONTEXT_GET_BINARY_FAILED, format!("contextGetBinary: buffer {size} < {}", b.len()));
        }
        // SAFETY: buf holds `size` >= b.len() bytes; written non-null.
        unsafe {
            std::ptr::copy_nonoverlapping(b.as_ptr(), buf.cast::<u8>(), b.len());
            *written = b.len() as u64;
        }
        0
    })
}

unsafe extern "C" fn context_create_from_binary(
    backend: Qnn_BackendHandle_t,
    device: Qnn_DeviceHandle_t,
    _cfg: *const *const Qnn_Config_t,
    buf: *const c_void,
    size: u64,
    out: *mut Qnn_ContextHandle_t,
    _profile: Qnn_ProfileHandle_t,
) -> u64 {
    guarded("contextCreateFromBinary", |s| {
        if out.is_null() || buf.is_null() || size == 0 {
            return s.fail(E_CONTEXT_INVALID_ARGUMENT, "contextCreateFromBinary: null buffer/out".into());
        }
        if let Err(c) = check_backend_device(s, key(backend), key(device)) {
            return c;
        }
        // SAFETY: buf holds `size` bytes per the API contract.
        let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size as usize) };
        let graphs = match deserialize(bytes) {
            Ok(g) => g,
            Err(ParseError::Version(v)) => {
                return s.fail(E_CONTEXT_BINARY_VERSION, format!("binary format {v} unsupported"))
            }
            Err(ParseError::Corrupt(why)) => {
                return s.fail(E_CONTEXT_CREATE_FROM_BINARY, format!("corrupt binary: {why}"))
            }
        };
        let h = s.new_handle();
        s.contexts.insert(h, (key(backend), key(device)));
        for (name, tensors, nodes) in graphs {
            let gh = s.new_handle();
            let produced = nodes.iter().flat_map(|n| n.outputs.iter().copied()).collect();
            s.graphs.insert(gh, Graph { name, ctx: h, tensors, nodes, produced, finalized: true });
        }
        // SAFETY: out non-null.
        unsafe { *out = handle(h) };
        0
    })
}

unsafe extern "C" fn context_free(ctx: Qnn_ContextHandle_t, _profile: Qnn_ProfileHandle_t) -> u64 {
    guarded("contextFree", |s| {
        let k = key(ctx);
        if !s.contexts.contains_key(&k) {
            return s.fail(E_CONTEXT_INVALID_HANDLE, "contextFree: unknown context".into());
        }
        if s.mems.values().any(|m| m.ctx == k) {
            return s.fail(E_NOT_PERMITTED, "contextFree: memory still registered (memDeRegister first)".into());
        }
        s.graphs.retain(|_, g| g.ctx != k);
        s.contexts.remove(&k);
        0
    })
}

unsafe extern "C" fn graph_create(
    ctx: Qnn_ContextHandle_t,
    name: *const c_char,
    _cfg: *const *const Qnn_Config_t,
    out: *mut Qnn_GraphHandle_t,
) -> u64 {
    guarded("graphCreate", |s| {
        let k = key(ctx);
        if !s.contexts.contains_key(&k) {
            return s.fail(E_CONTEXT_INVALID_HANDLE, "graphCreate: unknown or null context".into());
        }
        if out.is_null() {
            return s.fail(E_GRAPH_INVALID_ARGUMENT, "graphCreate: null out".into());
        }
        // SAFETY: name is null or a C string.
        let Some(name) = (unsafe { cstr(name) }).filter(|n| !n.is_empty()) else {
            return s.fail(E_GRAPH_INVALID_NAME, "graphCreate: empty name".into());
        };
        if s.graphs.values().any(|g| g.ctx == k && g.name == name) {
            return s.fail(E_GRAPH_INVALID_NAME, format!("graphCreate: duplicate graph {name:?}"));
        }
        let h = s.new_handle();
        s.graphs.insert(
            h,
            Graph { name, ctx: k, tensors: Vec::new(), nodes: Vec::new(), produced: HashSet::new(), finalized: false },
        );
        // SAFETY: out non-null.
        unsafe { *out = handle(h) };
        0
    })
}

unsafe extern "C" fn graph_retrieve(ctx: Qnn_ContextHandle_t, name: *const c_char, out: *mut Qnn_GraphHandle_t) -> u64 {
    guarded("graphRetrieve", |s| {
        let k = key(ctx);
        if !s.contexts.contains_key(&k) {
            return s.fail(E_CONTEXT_INVALID_HANDLE, "graphRetrieve: unknown context".into());
        }
        // SAFETY: name is null or a C string.
        let name = unsafe { cstr(name) }.unwrap_or_default();
        if out.is_null() {
            return s.fail(E_GRAPH_INVALID_ARGUMENT, "graphRetrieve: null out".into());
        }
        match s.graphs.iter().find(|(_, g)| g.ctx == k && g.name == name) {
            Some((&h, _)) => {
                // SAFETY: out non-null.
                unsafe { *out = handle(h) };
                0
            }
            None => s.fail(E_GRAPH_DOES_NOT_EXIST, format!("graphRetrieve: no graph {name:?}")),
        }
    })
}

/// Validates a tensor create request; returns the tensor to store.
fn check_new_tensor(g: &Graph, mut t: MTensor, mem_type: u32, mem: Qnn_TensorMemUnion_t) -> Result<MTensor, String> {
    if t.name.is_empty() {
        return Err("tensor without a name".into());
    }
    if g.tensors.iter().any(|x| x.name == t.name) {
        return Err(format!("duplicate tensor name {:?}", t.name));
    }
    let Some(esize) = dtype_size(t.dtype) else {
        return Err(format!("tensor {:?}: unsupported dtype 0x{:04x}", t.name, t.dtype));
    };
    if t.dims.is_empty() || t.dims.contains(&0) {
        return Err(format!("tensor {:?}: invalid dims {:?}", t.name, t.dims));
    }
    let scales_ok = if t.channels.is_empty() {
        t.scale.is_finite() && t.scale > 0.0
    } else {
        t.channels.iter().all(|(sc, _)| sc.is_finite() && *sc > 0.0)
    };
    if is_fixed_point(t.dtype) && !scales_ok {
        return Err(format!("tensor {:?}: quantized tensor needs a positive scale", t.name));
    }
    match t.ttype {
        QNN_TENSOR_TYPE_APP_READWRITE => {
            return Err(format!("tensor {:?}: APP_READWRITE graph tensors are not allowed", t.name))
        }
        QNN_TENSOR_TYPE_APP_WRITE | QNN_TENSOR_TYPE_APP_READ | QNN_TENSOR_TYPE_NATIVE | QNN_TENSOR_TYPE_STATIC => {}
        other => return Err(format!("tensor {:?}: tensor type {other} not supported by the mock", t.name)),
    }
    // SAFETY (reading the union): RAW is the only mem type with client data at creation.
    let client = if mem_type == QNN_TENSORMEMTYPE_RAW { Some(unsafe { mem.clientBuf }) } else { None };
    let has_data = client.is_some_and(|c| !c.data.is_null());
    if t.ttype == QNN_TENSOR_TYPE_STATIC {
        let Some(c) = client.filter(|c| !c.data.is_null()) else {
            return Err(format!("STATIC tensor {:?} without data", t.name));
        };
        let need = t.dims.iter().map(|&d| d as usize).product::<usize>() * esize;
        if c.dataSize as usize != need {
            return Err(format!(
                "STATIC tensor {:?}: {} bytes for dims {:?} (need {need})",
                t.name, c.dataSize, t.dims
            ));
        }
        // SAFETY: data holds dataSize bytes per the API contract; copied now (STATIC data is copied at creation).
        let data = unsafe { std::slice::from_raw_parts(c.data.cast::<u8>(), need) }.to_vec();
        if t.bitwidth != 0 {
            // Values must fit the declared bit width (e.g. 4-bit weights in an 8-bit container).
            let (lo, hi) = ops::value_range(&t).unwrap_or((f32::MIN, f32::MAX));
            // Without channels the tensor's own scale/offset are 1/0: decode yields the raw integers.
            let raw = MTensor { channels: Vec::new(), data: None, ..t.clone() };
            let values = ops::decode(&raw, &data)?;
            if let Some(v) = values.iter().find(|&&v| v < lo || v > hi) {
                return Err(format!("STATIC tensor {:?}: value {v} outside its {}-bit range", t.name, t.bitwidth));
            }
        }
        t.data = Some(data);
    } else if has_data {
        return Err(format!("non-STATIC tensor {:?} must have NULL data at creation", t.name));
    }
    t.id = g.tensors.len() as u32 + 1;
    Ok(t)
}

unsafe extern "C" fn tensor_create_graph_tensor(graph: Qnn_GraphHandle_t, tensor: *mut Qnn_Tensor_t) -> u64 {
    guarded("tensorCreateGraphTensor", |s| {
        let Some(g) = s.graphs.get(&key(graph)) else {
            return s.fail(E_GRAPH_INVALID_HANDLE, "tensorCreateGraphTensor: unknown or null graph".into());
        };
        if g.finalized {
            return s.fail(E_GRAPH_FINALIZED, "tensorCreateGraphTensor: graph already finalized".into());
        }
        // SAFETY: tensor is null or valid per the API contract.
        let parsed = unsafe { read_tensor(tensor) };
        let res = parsed.and_then(|(t, mt, mem)| check_new_tensor(g, t, mt, mem));
        match res {
            Ok(t) => {
                // SAFETY: tensor non-null (read_tensor succeeded); write the assigned id.
                unsafe { (*tensor).u.v1.id = t.id };
                if let Some(g) = s.graphs.get_mut(&key(graph)) {
                    g.tensors.push(t);
                }
                0
            }
            Err(e) => s.fail(E_GRAPH_INVALID_TENSOR, e),
        }
    })
}

/// Copies a raw op config: node plus the raw input/output tensors as given.
///
/// # Safety
/// `op` and all its pointers are valid per the API contract.
unsafe fn read_op(op: &Qnn_OpConfig_t) -> Result<(MNode, Vec<MTensor>, Vec<MTensor>), String> {
    if op.version != QNN_OPCONFIG_VERSION_1 {
        return Err(format!("unknown op config version {}", op.version));
    }
    // SAFETY: version 1 selects v1.
    let v = unsafe { &op.u.v1 };
    // SAFETY: strings are null or valid C strings.
    let (name, package, type_name) =
        unsafe { (cstr(v.name).unwrap_or_default(), cstr(v.packageName), cstr(v.typeName)) };
    if package.as_deref() != Some(QNN_OP_PACKAGE_NAME_QTI_AISW) {
        return Err(format!("node {name:?}: unknown op package {package:?}"));
    }
    let op_type = type_name.ok_or_else(|| format!("node {name:?}: null type name"))?;
    let read_list = |p: *mut Qnn_Tensor_t, n: u32| -> Result<Vec<MTensor>, String> {
        if n > 0 && p.is_null() {
            return Err(format!("node {name:?}: {n} tensors but null array"));
        }
        // SAFETY: array holds n tensors.
        (0..n as usize).map(|i| unsafe { read_tensor(p.add(i)) }.map(|r| r.0)).collect()
    };
    let ins = read_list(v.inputTensors, v.numOfInputs)?;
    let outs = read_list(v.outputTensors, v.numOfOutputs)?;
    let mut params = Vec::new();
    if v.numOfParams > 0 && v.params.is_null() {
        return Err(format!("node {name:?}: null params array"));
    }
    for i in 0..v.numOfParams as usize {
        // SAFETY: params holds numOfParams entries.
        let p = unsafe { &*v.params.add(i) };
        // SAFETY: name is null or a C string.
        let pname = unsafe { cstr(p.name) }.ok_or_else(|| format!("node {name:?}: param without name"))?;
        let val = match p.paramType {
            QNN_PARAMTYPE_SCALAR => {
                // SAFETY: SCALAR selects scalarParam; the value union is 8 bytes, read as raw bits.
                let sc = unsafe { p.u.scalarParam };
                // SAFETY: every union member fits in 8 bytes; reading u64 gets all bits.
                MParam::Scalar { dtype: sc.dataType, bits: unsafe { sc.value.uint64Value } }
            }
            QNN_PARAMTYPE_TENSOR => {
                // SAFETY: TENSOR selects tensorParam.
                let (t, mt, mem) = unsafe { read_tensor(&p.u.tensorParam) }?;
                let esize = dtype_size(t.dtype).ok_or_else(|| format!("param {pname:?}: bad dtype"))?;
                let need = t.numel() * esize;
                if mt != QNN_TENSORMEMTYPE_RAW {
                    return Err(format!("param {pname:?}: tensor params need RAW data"));
                }
                // SAFETY: RAW selects clientBuf.
                let c = unsafe { mem.clientBuf };
                if c.data.is_null() || (c.dataSize as usize) != need {
                    return Err(format!("param {pname:?}: data size {} != {need}", c.dataSize));
                }
                // SAFETY: data holds dataSize bytes.
                let data = unsafe { std::slice::from_raw_parts(c.data.cast::<u8>(), need) }.to_vec();
                MParam::Tensor { dtype: t.dtype, dims: t.dims, data }
            }
            other => return Err(format!("param {pname:?}: unknown param type {other}")),
        };
        params.push((pname, val));
    }
    let node = MNode {
        name,
        op: op_type,
        inputs: ins.iter().map(|t| t.id).collect(),
        outputs: outs.iter().map(|t| t.id).collect(),
        params,
    };
    Ok((node, ins, outs))
}

unsafe extern "C" fn graph_add_node(graph: Qnn_GraphHandle_t, op: Qnn_OpConfig_t) -> u64 {
    guarded("graphAddNode", |s| {
        let gk = key(graph);
        let Some(g) = s.graphs.get(&gk) else {
            return s.fail(E_GRAPH_INVALID_HANDLE, "graphAddNode: unknown or null graph".into());
        };
        if g.finalized {
            return s.fail(E_GRAPH_FINALIZED, "graphAddNode: graph already finalized".into());
        }
        // SAFETY: op is valid per the API contract.
        let (node, raw_ins, raw_outs) = match unsafe { read_op(&op) } {
            Ok(x) => x,
            Err(e) => return s.fail(E_GRAPH_INVALID_OP_CONFIG, e),
        };
        if !ops::SUPPORTED_OPS.contains(&node.op.as_str()) {
            return s.fail(E_GRAPH_INVALID_OP_CONFIG, format!("node {:?}: unknown op type {:?}", node.name, node.op));
        }
        let res = (|| -> Result<(), (u64, String)> {
            let lookup = |raw: &MTensor| -> Result<&MTensor, (u64, String)> {
                let t = g.tensor(raw.id).ok_or((
                    E_GRAPH_INVALID_TENSOR,
                    format!("node {:?}: tensor id {} ({:?}) was never created", node.name, raw.id, raw.name),
                ))?;
                if t.dims != raw.dims || t.dtype != raw.dtype {
                    return Err((
                        E_GRAPH_INVALID_TENSOR,
                        format!(
                            "node {:?}: tensor {:?} passed as {:?}/0x{:04x}, created as {:?}/0x{:04x}",
                            node.name, t.name, raw.dims, raw.dtype, t.dims, t.dtype
                        ),
                    ));
                }
                Ok(t)
            };
            let ins = raw_ins.iter().map(lookup).collect::<Result<Vec<_>, _>>()?;
            let outs = raw_outs.iter().map(lookup).collect::<Result<Vec<_>, _>>()?;
            for t in &ins {
                let ready =
                    matches!(t.ttype, QNN_TENSOR_TYPE_APP_WRITE | QNN_TENSOR_TYPE_STATIC) || g.produced.contains(&t.id);
                if !ready {
                    return Err((
                        E_GRAPH_UNCONNECTED_NODE,
                        format!("node {:?}: input {:?} is not produced by an earlier node", node.name, t.name),
                    ));
                }
            }
            for t in &outs {
                if !matches!(t.ttype, QNN_TENSOR_TYPE_APP_READ | QNN_TENSOR_TYPE_NATIVE) {
                    return Err((
                        E_GRAPH_INVALID_OP_CONFIG,
                        format!("node {:?}: output {:?} is an input/static tensor", node.name, t.name),
                    ));
                }
                if g.produced.contains(&t.id) {
                    return Err((
                        E_GRAPH_INVALID_OP_CONFIG,
                        format!("node {:?}: output {:?} already produced", node.name, t.name),
                    ));
                }
            }
            validate::validate(&node, &ins, &outs).map_err(|e| (E_GRAPH_INVALID_OP_CONFIG, e))
        })();
        if let Err((code, msg)) = res {
            return s.fail(code, msg);
        }
        if let Some(g) = s.graphs.get_mut(&gk) {
            g.produced.extend(node.outputs.iter().copied());
            g.nodes.push(node);
        }
        0
    })
}

unsafe extern "C" fn graph_finalize(
    graph: Qnn_GraphHandle_t,
    _profile: Qnn_ProfileHandle_t,
    _signal: Qnn_SignalHandle_t,
) -> u64 {
    guarded("graphFinalize", |s| {
        let gk = key(graph);
        let Some(g) = s.graphs.get(&gk) else {
            return s.fail(E_GRAPH_INVALID_HANDLE, "graphFinalize: unknown or null graph".into());
        };
        if g.finalized {
            return s.fail(E_GRAPH_FINALIZED, "graphFinalize: already finalized".into());
        }
        if g.nodes.is_empty() {
            return s.fail(E_GRAPH_FINALIZE_FAILED, format!("graphFinalize: graph {:?} has no nodes", g.name));
        }
        if let Some(t) = g.tensors.iter().find(|t| t.ttype == QNN_TENSOR_TYPE_APP_READ && !g.produced.contains(&t.id)) {
            let msg = format!("graphFinalize: output {:?} is produced by no node", t.name);
            return s.fail(E_GRAPH_UNCONNECTED_NODE, msg);
        }
        let name = g.name.clone();
        if let Some(g) = s.graphs.get_mut(&gk) {
            g.finalized = true;
        }
        s.emit(QNN_LOG_LEVEL_INFO, &format!("graph {name} finalized"));
        0
    })
}

/// Resolves an execute-time tensor to its bytes (RAW client buffer or registered mem).
fn io_slice(
    s: &State,
    ctx: usize,
    t: &MTensor,
    mem_type: u32,
    mem: Qnn_TensorMemUnion_t,
) -> Result<(*mut u8, usize), (u64, String)> {
    match mem_type {
        QNN_TENSORMEMTYPE_RAW => {
            // SAFETY: RAW selects clientBuf.
            let c = unsafe { mem.clientBuf };
            if c.data.is_null() {
                return Err((E_GRAPH_INVALID_TENSOR, format!("tensor {:?}: null client buffer", t.name)));
            }
            Ok((c.data.cast(), c.dataSize as usize))
        }
        QNN_TENSORMEMTYPE_MEMHANDLE => {
            // SAFETY: MEMHANDLE selects memHandle.
            let h = key(unsafe { mem.memHandle });
            let m = s.mems.get(&h).ok_or((E_MEM_INVALID_HANDLE, format!("tensor {:?}: unknown mem handle", t.name)))?;
            if m.ctx != ctx {
                return Err((
                    E_MEM_INVALID_HANDLE,
                    format!("tensor {:?}: mem handle registered with another context", t.name),
                ));
            }
            Ok((m.ptr, m.len))
        }
        other => Err((E_GRAPH_INVALID_TENSOR, format!("tensor {:?}: mem type {other} unsupported", t.name))),
    }
}

unsafe extern "C" fn graph_execute(
    graph: Qnn_GraphHandle_t,
    inputs: *const Qnn_Tensor_t,
    n_in: u32,
    outputs: *mut Qnn_Tensor_t,
    n_out: u32,
    _profile: Qnn_ProfileHandle_t,
    _signal: Qnn_SignalHandle_t,
) -> u64 {
    guarded("graphExecute", |s| {
        let Some(g) = s.graphs.get(&key(graph)) else {
            return s.fail(E_GRAPH_INVALID_HANDLE, "graphExecute: unknown or null graph".into());
        };
        if !g.finalized {
            return s.fail(E_GRAPH_NOT_FINALIZED, "graphExecute: graph not finalized".into());
        }
        match execute(s, g, inputs, n_in, outputs, n_out) {
            Ok(()) => 0,
            Err((code, msg)) => s.fail(code, msg),
        }
    })
}

fn execute(
    s: &State,
    g: &Graph,
    inputs: *const Qnn_Tensor_t,
    n_in: u32,
    outputs: *mut Qnn_Tensor_t,
    n_out: u32,
) -> Result<(), (u64, String)> {
    let want_in: Vec<&MTensor> = g.tensors.iter().filter(|t| t.ttype == QNN_TENSOR_TYPE_APP_WRITE).collect();
    let want_out: Vec<&MTensor> = g.tensors.iter().filter(|t| t.ttype == QNN_TENSOR_TYPE_APP_READ).collect();
    if n_in as usize != want_in.len() || n_out as usize != want_out.len() {
        return Err((
            E_GRAPH_INVALID_ARGUMENT,
            format!(
                "graphExecute: graph {:?} has {}/{} inputs/outputs, got {n_in}/{n_out}",
                g.name,
                want_in.len(),
                want_out.len()
            ),
        ));
    }
    if (n_in > 0 && inputs.is_null()) || (n_out > 0 && outputs.is_null()) {
        return Err((E_GRAPH_INVALID_ARGUMENT, "graphExecute: null tensor array".into()));
    }
    let mut values: HashMap<u32, Vec<f32>> = HashMap::new();
    for t in g.tensors.iter().filter(|t| t.ttype == QNN_TENSOR_TYPE_STATIC) {
        let data = t.data.as_deref().unwrap_or(&[]);
        values.insert(t.id, ops::decode(t, data).map_err(|e| (E_GRAPH_INVALID_TENSOR, e))?);
    }
    let bind = |p: *const Qnn_Tensor_t, ttype: u32| -> Result<(&MTensor, *mut u8), (u64, String)> {
        // SAFETY: p is within the caller's array.
        let (raw, mt, mem) = unsafe { read_tensor(p) }.map_err(|e| (E_GRAPH_INVALID_TENSOR, e))?;
        let t = g.tensor(raw.id).filter(|t| t.ttype == ttype).ok_or((
            E_GRAPH_INVALID_TENSOR,
            format!("graphExecute: tensor id {} ({:?}) is not a graph I/O of that kind", raw.id, raw.name),
        ))?;
        if raw.dtype != t.dtype || raw.dims != t.dims {
            return Err((
                E_GRAPH_INVALID_TENSOR,
                format!("graphExecute: tensor {:?} shape/dtype differ from the graph", t.name),
            ));
        }
        let (ptr, len) = io_slice(s, g.ctx, t, mt, mem)?;
        if len < t.nbytes() || (mt == QNN_TENSORMEMTYPE_RAW && len != t.nbytes()) {
            return Err((
                E_GRAPH_INVALID_TENSOR,
                format!("graphExecute: tensor {:?} buffer {len} B, need {}", t.name, t.nbytes()),
            ));
        }
        Ok((t, ptr))
    };
    let mut seen = HashSet::new();
    for i in 0..n_in as usize {
        // SAFETY: inputs holds n_in tensors.
        let (t, ptr) = bind(unsafe { inputs.add(i) }, QNN_TENSOR_TYPE_APP_WRITE)?;
        if !seen.insert(t.id) {
            return Err((E_GRAPH_INVALID_ARGUMENT, format!("graphExecute: input {:?} bound twice", t.name)));
        }
        // SAFETY: ptr holds at least nbytes (checked in bind).
        let bytes = unsafe { std::slice::from_raw_parts(ptr, t.nbytes()) };
        values.insert(t.id, ops::decode(t, bytes).map_err(|e| (E_GRAPH_INVALID_TENSOR, e))?);
    }
    let mut out_ptrs = Vec::new();
    for i in 0..n_out as usize {
        // SAFETY: outputs holds n_out tensors.
        out_ptrs.push(bind(unsafe { outputs.add(i) }, QNN_TENSOR_TYPE_APP_READ)?);
    }
    for node in &g.nodes {
        let ins: Vec<(&MTensor, &[f32])> = node
            .inputs
            .iter()
            .map(|id| {
                let t = g.tensor(*id).ok_or((E_GRAPH_INVALID_TENSOR, format!("dangling tensor id {id}")))?;
                let v =
                    values.get(id).ok_or((E_GRAPH_UNCONNECTED_NODE, format!("tensor {:?} has no value", t.name)))?;
                Ok((t, v.as_slice()))
            })
            .collect::<Result<_, (u64, String)>>()?;
        let outs = node
            .outputs
            .iter()
            .map(|id| g.tensor(*id).ok_or((E_GRAPH_INVALID_TENSOR, format!("dangling tensor id {id}"))))
            .collect::<Result<Vec<&MTensor>, _>>()?;
        let ys = if node.op == "Split" {
            ops::run_split(node, ins[0].0, ins[0].1, &outs)
        } else {
            vec![ops::run(node, &ins, outs[0])]
        };
        for (out, y) in outs.iter().zip(ys) {
            // Round-trip through the output dtype so fp16/quantized precision is modelled.
            let enc = ops::encode(out, &y).map_err(|e| (E_GRAPH_INVALID_TENSOR, e))?;
            values.insert(out.id, ops::decode(out, &enc).map_err(|e| (E_GRAPH_INVALID_TENSOR, e))?);
        }
    }
    for (t, ptr) in out_ptrs {
        let v = values.get(&t.id).ok_or((E_GRAPH_UNCONNECTED_NODE, format!("output {:?} not computed", t.name)))?;
        let enc = ops::encode(t, v).map_err(|e| (E_GRAPH_INVALID_TENSOR, e))?;
        // SAFETY: ptr holds at least nbytes == enc.len() bytes, exclusively lent for this call.
        unsafe { std::ptr::copy_nonoverlapping(enc.as_ptr(), ptr, enc.len()) };
    }
    Ok(())
}

unsafe extern "C" fn mem_register(
    ctx: Qnn_ContextHandle_t,
    descs: *const Qnn_MemDescriptor_t,
    n: u32,
    handles: *mut Qnn_MemHandle_t,
) -> u64 {
    guarded("memRegister", |s| {
        let ck = key(ctx);
        if !s.contexts.contains_key(&ck) {
            return s.fail(E_CONTEXT_INVALID_HANDLE, "memRegister: unknown context".into());
        }
        if descs.is_null() || handles.is_null() || n == 0 {
            return s.fail(E_MEM_INVALID_ARGUMENT, "memRegister: null descriptors/handles".into());
        }
        for i in 0..n as usize {
            // SAFETY: descs holds n descriptors.
            let d = unsafe { &*descs.add(i) };
            if d.memType != QNN_MEM_TYPE_ION {
                return s.fail(
                    E_MEM_UNSUPPORTED_MEMTYPE,
                    format!("memRegister: mem type {} unsupported by the mock", d.memType),
                );
            }
            if d.memShape.numDim == 0 || d.memShape.dimSize.is_null() {
                return s.fail(E_MEM_INVALID_ARGUMENT, "memRegister: empty shape".into());
            }
            // SAFETY: dimSize holds numDim entries.
            let dims = unsafe { std::slice::from_raw_parts(d.memShape.dimSize, d.memShape.numDim as usize) };
            let Some(esize) = dtype_size(d.dataType) else {
                return s.fail(E_MEM_INVALID_ARGUMENT, format!("memRegister: dtype 0x{:04x}", d.dataType));
            };
            let len = dims.iter().map(|&x| x as usize).product::<usize>() * esize;
            // SAFETY: ION selects ionInfo.
            let fd = unsafe { d.u.ionInfo.fd };
            if s.mems.values().any(|m| m.ctx == ck && m.fd == fd) {
                return s.fail(E_MEM_ALREADY_REGISTERED, format!("memRegister: fd {fd} already registered"));
            }
            // Map the fd like the DSP maps an rpcmem buffer: a second view of the same pages.
            // SAFETY: plain mmap of a caller-provided fd; failure is checked.
            let p = unsafe {
                libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
            };
            if p == libc::MAP_FAILED {
                return s.fail(
                    E_MEM_MAPPING,
                    format!("memRegister: cannot map fd {fd}: {}", std::io::Error::last_os_error()),
                );
            }
            let h = s.new_handle();
            s.mems.insert(h, Mem { ctx: ck, fd, ptr: p.cast(), len });
            // SAFETY: handles holds n entries.
            unsafe { *handles.add(i) = handle(h) };
        }
        0
    })
}

unsafe extern "C" fn mem_de_register(handles: *const Qnn_MemHandle_t, n: u32) -> u64 {
    guarded("memDeRegister", |s| {
        if handles.is_null() {
            return s.fail(E_MEM_INVALID_ARGUMENT, "memDeRegister: null handles".into());
        }
        for i in 0..n as usize {
            // SAFETY: handles holds n entries.
            let h = key(unsafe { *handles.add(i) });
            match s.mems.remove(&h) {
                // SAFETY: our own mapping of m.len bytes.
                Some(m) => unsafe {
                    libc::munmap(m.ptr.cast(), m.len);
                },
                None => return s.fail(E_MEM_INVALID_HANDLE, "memDeRegister: unknown handle".into()),
            }
        }
        0
    })
}

unsafe extern "C" fn error_get_message(_err: Qnn_ErrorHandle_t, msg: *mut *const c_char) -> u64 {
    guarded("errorGetMessage", |s| {
        if msg.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "errorGetMessage: null out".into());
        }
        // SAFETY: static NUL-terminated string.
        unsafe { *msg = c"see QnnMock_getLastError".as_ptr() };
        0
    })
}

// ------------------------------------------------------------------ perf infrastructure

unsafe extern "C" fn perf_create_power_config_id(device_id: u32, core_id: u32, out: *mut u32) -> u64 {
    guarded("perf.createPowerConfigId", |s| {
        if out.is_null() || device_id != 0 || core_id != 0 {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "createPowerConfigId: bad device/core or null out".into());
        }
        if s.devices.is_empty() {
            return s.fail(E_NOT_PERMITTED, "createPowerConfigId before deviceCreate".into());
        }
        let id = s.new_handle() as u32;
        s.power_ids.insert(id);
        // SAFETY: out non-null.
        unsafe { *out = id };
        0
    })
}

unsafe extern "C" fn perf_destroy_power_config_id(id: u32) -> u64 {
    guarded("perf.destroyPowerConfigId", |s| {
        if s.power_ids.remove(&id) {
            0
        } else {
            s.fail(E_COMMON_INVALID_ARGUMENT, format!("destroyPowerConfigId: unknown id {id}"))
        }
    })
}

unsafe extern "C" fn perf_set_power_config(id: u32, cfgs: *const *const QnnHtpPerfInfrastructure_PowerConfig_t) -> u64 {
    guarded("perf.setPowerConfig", |s| {
        if !s.power_ids.contains(&id) || cfgs.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "setPowerConfig: unknown id or null list".into());
        }
        let mut options = Vec::new();
        for i in 0..16 {
            // SAFETY: NULL-terminated list per the API contract (bounded walk).
            let c = unsafe { *cfgs.add(i) };
            if c.is_null() {
                let msg = format!("perf.options:{}", options.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
                s.calls.push(msg);
                return 0;
            }
            // SAFETY: non-null config.
            let c = unsafe { &*c };
            // SAFETY: DCVS_V3 selects the dcvs member.
            if c.option == QNN_HTP_PERF_POWER_CONFIG_OPTION_DCVS_V3 && unsafe { c.u.dcvsV3Config.contextId } != id {
                return s.fail(E_COMMON_INVALID_ARGUMENT, "setPowerConfig: DCVS contextId != power config id".into());
            }
            options.push(c.option);
        }
        s.fail(E_COMMON_INVALID_ARGUMENT, "setPowerConfig: list not NULL-terminated".into())
    })
}

static INFRA: QnnHtpDevice_Infrastructure_t = QnnHtpDevice_Infrastructure_t {
    infraType: 0,
    perfInfra: QnnHtpDevice_PerfInfrastructure_t {
        createPowerConfigId: Some(perf_create_power_config_id),
        destroyPowerConfigId: Some(perf_destroy_power_config_id),
        setPowerConfig: Some(perf_set_power_config),
        setMemoryConfig: None,
    },
};

unsafe extern "C" fn device_get_infrastructure(out: *mut *const QnnHtpDevice_Infrastructure_t) -> u64 {
    guarded("deviceGetInfrastructure", |s| {
        if out.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "deviceGetInfrastructure: null out".into());
        }
        // SAFETY: out non-null; INFRA is static.
        unsafe { *out = &INFRA };
        0
    })
}

// ------------------------------------------------------------------ provider

struct Provider(QnnInterface_t);
// SAFETY: the interface is immutable after creation; the name pointer is static.
unsafe impl Sync for Provider {}
// SAFETY: as above.
unsafe impl Send for Provider {}

static PROVIDER_NAME: &[u8] = b"MOCK_QTI_AISW\0";

fn table() -> QnnInterface_FunctionTable_t {
    let mut t = QnnInterface_FunctionTable_t::EMPTY;
    t.propertyHasCapability = Some(property_has_capability);
    t.backendCreate = Some(backend_create);
    t.backendGetApiVersion = Some(backend_get_api_version);
    t.backendGetBuildId = Some(backend_get_build_id);
    t.backendValidateOpConfig = Some(backend_validate_op_config);
    t.backendFree = Some(backend_free);
    t.contextCreate = Some(context_create);
    t.contextGetBinarySize = Some(context_get_binary_size);
    t.contextGetBinary = Some(context_get_binary);
    t.contextCreateFromBinary = Some(context_create_from_binary);
    t.contextFree = Some(context_free);
    t.graphCreate = Some(graph_create);
    t.graphAddNode = Some(graph_add_node);
    t.graphFinalize = Some(graph_finalize);
    t.graphRetrieve = Some(graph_retrieve);
    t.graphExecute = Some(graph_execute);
    t.tensorCreateGraphTensor = Some(tensor_create_graph_tensor);
    t.logCreate = Some(log_create);
    t.logSetLogLevel = Some(log_set_log_level);
    t.logFree = Some(log_free);
    t.memRegister = Some(mem_register);
    t.memDeRegister = Some(mem_de_register);
    t.deviceCreate = Some(device_create);
    t.deviceFree = Some(device_free);
    t.deviceGetInfrastructure = Some(device_get_infrastructure);
    t.errorGetMessage = Some(error_get_message);
    t
}

/// The provider query every QNN backend exports.
#[no_mangle]
pub unsafe extern "C" fn QnnInterface_getProviders(list: *mut *mut *const QnnInterface_t, n: *mut u32) -> u64 {
    let r = std::panic::catch_unwind(|| {
        let mut s = state();
        if let Err(code) = s.enter("QnnInterface_getProviders") {
            return code;
        }
        if list.is_null() || n.is_null() {
            return s.fail(E_COMMON_INVALID_ARGUMENT, "getProviders: null out".into());
        }
        // Rebuilt per call so a version override applies; leaked because the
        // array must live as long as the library (a few hundred bytes per call).
        let p: &'static Provider = Box::leak(Box::new(Provider(QnnInterface_t {
            backendId: QNN_BACKEND_ID_HTP,
            providerName: PROVIDER_NAME.as_ptr().cast(),
            apiVersion: s.version,
            functions: table(),
        })));
        let arr: &'static mut [*const QnnInterface_t; 1] = Box::leak(Box::new([&p.0 as *const QnnInterface_t]));
        // SAFETY: both out-pointers are non-null and writable.
        unsafe {
            *list = arr.as_mut_ptr();
            *n = 1;
        }
        0
    });
    r.unwrap_or(1003)
}

// ------------------------------------------------------------------ test controls

/// Overrides the core API version reported by `QnnInterface_getProviders`.
#[no_mangle]
pub extern "C" fn QnnMock_setApiVersion(major: u32, minor: u32, patch: u32) {
    state().version.coreApiVersion = Qnn_Version_t { major, minor, patch };
}

/// Makes the named API function (e.g. `"graphFinalize"`) return `code`; 0 clears it.
#[no_mangle]
pub unsafe extern "C" fn QnnMock_injectError(function: *const c_char, code: u32) {
    // SAFETY: function is null or a C string.
    let Some(name) = (unsafe { cstr(function) }) else { return };
    let mut s = state();
    if code == 0 {
        s.inject.remove(&name);
    } else {
        s.inject.insert(name, u64::from(code));
    }
}

fn copy_out(text: &str, buf: *mut c_char, cap: usize) -> usize {
    if !buf.is_null() && cap > 0 {
        let n = text.len().min(cap - 1);
        // SAFETY: buf holds cap bytes per the contract.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), buf.cast::<u8>(), n);
            *buf.add(n) = 0;
        }
    }
    text.len()
}

/// Newline-separated call log; returns its full length (call with cap 0 to size the buffer).
#[no_mangle]
pub extern "C" fn QnnMock_getCallLog(buf: *mut c_char, cap: usize) -> usize {
    let text = state().calls.join("\n");
    copy_out(&text, buf, cap)
}

/// Clears the call log.
#[no_mangle]
pub extern "C" fn QnnMock_clearCallLog() {
    state().calls.clear();
}

/// Last validation/failure message; returns its full length.
#[no_mangle]
pub extern "C" fn QnnMock_getLastError(buf: *mut c_char, cap: usize) -> usize {
    let text = state().last_error.clone();
    copy_out(&text, buf, cap)
}

/// Number of live logs, backends, devices, contexts, graphs and registrations (leak check).
#[no_mangle]
pub extern "C" fn QnnMock_liveHandles() -> u32 {
    let s = state();
    (s.log_cbs.len()
        + s.backends.len()
        + s.devices.len()
        + s.contexts.len()
        + s.graphs.len()
        + s.mems.len()
        + s.power_ids.len()) as u32
}
