//! `--backend qnn`: a missing library is a clear error (exit 3); with the mock provider the
//! embedded model generates, and a second process reloads the cached context binaries.

#[path = "../../qnn-sys/tests/common/mod.rs"]
mod mock;

use std::process::Command;

use assert_cmd::prelude::*;

/// `unmask` with its runs recorded in a private data folder (never the user's).
fn unmask(data: &std::path::Path) -> Command {
    let mut c = Command::cargo_bin("unmask").expect("binary built");
    c.env("UNMASK_THREADS", "2").env("UNMASK_DATA_DIR", data).env_remove("UNMASK_MODEL");
    c
}

const SMALL: [&str; 6] = ["--gen-length", "16", "--block-length", "16", "--steps", "8"];

#[test]
fn missing_qnn_library_is_exit_3_naming_it() {
    let data = tempfile::tempdir().unwrap();
    let out = unmask(data.path())
        .args(["generate", "hi", "--backend", "qnn", "--qnn-lib", "/nonexistent/libQnnHtp.so"])
        .args(SMALL)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot load QNN library /nonexistent/libQnnHtp.so"), "{err}");
}

#[test]
fn generates_on_the_mock_and_a_second_run_reloads_the_cache() {
    let m = mock::Mock::new();
    let cache = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let run = || {
        let out = unmask(data.path())
            .args(["generate", "What is 12+7?", "--json", "--backend", "qnn", "--qnn-lib"])
            .arg(m.path())
            .arg("--qnn-cache")
            .arg(cache.path())
            .args(SMALL)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        assert!(v["backend"].as_str().unwrap().starts_with("qnn:"), "{v}");
        assert!(v["executor"].as_str().unwrap().starts_with("qnn:MOCK_QTI_AISW:w8a16"), "{v}");
        v["tokens"].clone()
    };
    let first = run();
    assert_eq!(first.as_array().unwrap().len(), 16);
    let stamps = |dir: &std::path::Path| -> Vec<(std::ffi::OsString, std::time::SystemTime)> {
        let mut v: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.file_name(), e.metadata().unwrap().modified().unwrap())
            })
            .collect();
        v.sort();
        v
    };
    let before = stamps(cache.path());
    assert!(before.iter().any(|(n, _)| n.to_string_lossy().ends_with(".bin")), "{before:?}");
    // A new process: same tokens, and no cache file was rewritten (a rebuild would save again).
    assert_eq!(run(), first);
    assert_eq!(stamps(cache.path()), before);
}
