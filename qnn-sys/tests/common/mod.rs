//! Shared test support: builds the `qnn-mock` cdylib once per test binary and gives
//! each test its own copy of it (a distinct file is a distinct dlopen instance, so
//! mock state — call log, injected failures, version — never leaks between tests).
#![allow(dead_code)]

use std::ffi::{c_char, CString};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Path of the built mock library (built on first use).
pub fn mock_library() -> &'static Path {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(build_mock)
}

fn build_mock() -> PathBuf {
    if let Ok(p) = std::env::var("QNN_MOCK_LIB") {
        return PathBuf::from(p);
    }
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let workspace = manifest_dir.parent().expect("qnn-sys sits inside the workspace");
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| workspace.join("target"));
    // A separate target dir: the outer `cargo test` may hold the main one's lock.
    let target_dir = target.join("qnn-mock-for-tests");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "-p", "qnn-mock", "--manifest-path"])
        .arg(workspace.join("Cargo.toml"))
        .arg("--target-dir")
        .arg(&target_dir)
        .status()
        .expect("run cargo to build qnn-mock");
    assert!(status.success(), "building qnn-mock failed");
    let name = format!("{}qnn_mock{}", std::env::consts::DLL_PREFIX, std::env::consts::DLL_SUFFIX);
    let path = target_dir.join("debug").join(name);
    assert!(path.exists(), "mock library not found at {}", path.display());
    path
}

/// One private copy of the mock plus handles to its `QnnMock_*` controls.
pub struct Mock {
    _dir: tempfile::TempDir,
    path: PathBuf,
    lib: libloading::Library,
}

impl Mock {
    /// Copies the mock to a fresh temp dir and opens its control functions.
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(mock_library().file_name().expect("file name"));
        std::fs::copy(mock_library(), &path).expect("copy mock");
        // SAFETY: our own mock library; its initialisers have no side effects.
        let lib = unsafe { libloading::Library::new(&path) }.expect("open mock copy");
        Self { _dir: dir, path, lib }
    }

    /// Path to hand to `QnnLibrary::load` (same dlopen instance as the controls).
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn set_api_version(&self, major: u32, minor: u32, patch: u32) {
        // SAFETY: exported by the mock with this signature.
        unsafe {
            let f = self.lib.get::<unsafe extern "C" fn(u32, u32, u32)>(b"QnnMock_setApiVersion\0").expect("symbol");
            f(major, minor, patch)
        }
    }

    pub fn inject_error(&self, function: &str, code: u32) {
        let name = CString::new(function).expect("name");
        // SAFETY: exported by the mock with this signature; name outlives the call.
        unsafe {
            let f = self.lib.get::<unsafe extern "C" fn(*const c_char, u32)>(b"QnnMock_injectError\0").expect("symbol");
            f(name.as_ptr(), code)
        }
    }

    fn read_text(&self, symbol: &[u8]) -> String {
        // SAFETY: exported by the mock with this signature; buffer sized from the first call.
        unsafe {
            let f = self.lib.get::<unsafe extern "C" fn(*mut c_char, usize) -> usize>(symbol).expect("symbol");
            let n = f(std::ptr::null_mut(), 0);
            let mut buf = vec![0u8; n + 1];
            f(buf.as_mut_ptr().cast(), buf.len());
            buf.truncate(n);
            String::from_utf8(buf).expect("utf8")
        }
    }

    /// Recorded call names, in order.
    pub fn calls(&self) -> Vec<String> {
        self.read_text(b"QnnMock_getCallLog\0").lines().map(str::to_string).collect()
    }

    pub fn clear_calls(&self) {
        // SAFETY: exported by the mock with this signature.
        unsafe { self.lib.get::<unsafe extern "C" fn()>(b"QnnMock_clearCallLog\0").expect("symbol")() }
    }

    pub fn last_error(&self) -> String {
        self.read_text(b"QnnMock_getLastError\0")
    }

    pub fn live_handles(&self) -> u32 {
        // SAFETY: exported by the mock with this signature.
        unsafe { self.lib.get::<unsafe extern "C" fn() -> u32>(b"QnnMock_liveHandles\0").expect("symbol")() }
    }
}

/// Asserts `needle` appears in `calls` in order (not necessarily adjacent).
pub fn assert_subsequence(calls: &[String], needle: &[&str]) {
    let mut it = calls.iter();
    for want in needle {
        assert!(it.any(|c| c == want), "expected {want:?} (in order {needle:?}) in call log {calls:?}");
    }
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub fn bytes_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Deterministic pseudo-random values in [-1, 1) (no rand dependency needed).
pub fn det_values(n: usize, seed: u32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            (s as f32 / u32::MAX as f32) * 2.0 - 1.0
        })
        .collect()
}

pub fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol, "element {i}: got {g}, want {w} (tol {tol})\n got {got:?}\nwant {want:?}");
    }
}
