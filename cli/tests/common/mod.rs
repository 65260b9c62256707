//! Shared helpers of the CLI's integration tests: a private data folder per test, a distinct copy
//! of the embedded model, and a local HTTP server with Range support.
#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Small decode settings so every generate finishes quickly.
pub const SMALL: [&str; 6] = ["--gen-length", "16", "--block-length", "16", "--steps", "16"];

/// The embedded default model of the checkout.
pub fn default_model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/tiny-llada")
}

/// A test's own data folder; every command it builds uses it.
pub struct Env {
    pub dir: tempfile::TempDir,
}

impl Env {
    pub fn new() -> Env {
        Env { dir: tempfile::tempdir().expect("tempdir") }
    }

    /// Path of the data folder.
    pub fn data(&self) -> &Path {
        self.dir.path()
    }

    /// `unmask ARGS` with this data folder, 2 threads and no inherited model choice.
    pub fn cmd(&self) -> Command {
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("unmask"));
        c.env("UNMASK_THREADS", "2")
            .env("UNMASK_DATA_DIR", self.dir.path())
            .env_remove("UNMASK_MODEL")
            .env_remove("UNMASK_HF_ENDPOINT")
            .env_remove("HF_TOKEN")
            .env_remove("UNMASK_BENCH_HARNESS");
        c
    }

    /// Runs `unmask ARGS` and returns its output.
    pub fn run(&self, args: &[&str]) -> Output {
        self.cmd().args(args).output().expect("unmask runs")
    }

    /// Runs `unmask ARGS`, asserts success, returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(out.status.success(), "unmask {args:?} failed ({:?}): {}", out.status, String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `unmask ARGS --json`-style commands and parses stdout.
    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        let s = self.ok(args);
        serde_json::from_str(&s).unwrap_or_else(|e| panic!("unmask {args:?}: not JSON ({e}): {s}"))
    }
}

/// The files of the embedded model a copy needs.
pub const MODEL_FILES: [&str; 6] = [
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
];

/// config.json of the embedded model with one extra key, so a copy hashes differently from the
/// (automatically registered) original and the store does not refuse it as a duplicate.
pub fn distinct_config(tag: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(default_model().join("config.json")).expect("config.json");
    let mut v: serde_json::Value = serde_json::from_str(&text).expect("config is JSON");
    v["unmask_test_copy"] = serde_json::json!(tag);
    serde_json::to_vec_pretty(&v).expect("serialise")
}

/// A copy of the embedded model in `dir` that is a different model to the store.
pub fn distinct_model_copy(dir: &Path, tag: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for f in MODEL_FILES {
        std::fs::copy(default_model().join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("config.json"), distinct_config(tag)).unwrap();
    dir.to_owned()
}

/// One request the test server answered.
#[derive(Debug, Clone)]
pub struct Seen {
    pub path: String,
    pub range_from: Option<u64>,
    pub status: u16,
}

/// A tiny HTTP/1.1 file server on 127.0.0.1: `GET /{repo}/resolve/{rev}/{file}` serves
/// `files[file]`, with `Range: bytes=N-` answered by 206. While `slow` is set, bodies go out
/// in 16 KiB pieces with a pause between them (so a test can interrupt a download).
pub struct FileServer {
    pub base_url: String,
    pub seen: Arc<Mutex<Vec<Seen>>>,
    pub slow: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl FileServer {
    pub fn start(files: Vec<(String, Vec<u8>)>) -> FileServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let base_url = format!("http://{}", listener.local_addr().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let slow = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let files = Arc::new(files);
        let (s2, sl2, st2) = (Arc::clone(&seen), Arc::clone(&slow), Arc::clone(&stop));
        listener.set_nonblocking(true).unwrap();
        std::thread::spawn(move || {
            // Bounded: the server lives at most as long as a test could (10 minutes).
            let deadline = std::time::Instant::now() + Duration::from_secs(600);
            while !st2.load(Ordering::SeqCst) && std::time::Instant::now() < deadline {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let (files, seen, slow) = (Arc::clone(&files), Arc::clone(&s2), Arc::clone(&sl2));
                        std::thread::spawn(move || {
                            let _ = serve(stream, &files, &seen, &slow);
                        });
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        FileServer { base_url, seen, slow, stop }
    }

    pub fn requests(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(stream: TcpStream, files: &[(String, Vec<u8>)], seen: &Mutex<Vec<Seen>>, slow: &AtomicBool) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    let mut range_from = None;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        let lower = h.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("range:") {
            range_from = v.trim().strip_prefix("bytes=").and_then(|r| r.trim_end_matches('-').parse::<u64>().ok());
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("").to_owned();
    let file = path.split("/resolve/").nth(1).and_then(|r| r.split_once('/')).map(|(_, f)| f.to_owned());
    let body = file.as_ref().and_then(|f| files.iter().find(|(n, _)| n == f)).map(|(_, b)| b);
    let mut out = stream;
    let Some(body) = body else {
        seen.lock().unwrap().push(Seen { path, range_from, status: 404 });
        out.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")?;
        return Ok(());
    };
    let len = body.len() as u64;
    let from = range_from.filter(|&f| f < len);
    let (status, start) = match from {
        Some(f) => (206, f),
        None => (200, 0),
    };
    seen.lock().unwrap().push(Seen { path, range_from, status });
    let mut head = format!(
        "HTTP/1.1 {} {}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nETag: \"v1-{len}\"\r\nConnection: close\r\n",
        status,
        if status == 206 { "Partial Content" } else { "OK" },
        len - start
    );
    if status == 206 {
        head.push_str(&format!("Content-Range: bytes {start}-{}/{len}\r\n", len - 1));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    let rest = &body[start as usize..];
    if slow.load(Ordering::SeqCst) {
        for chunk in rest.chunks(16 * 1024) {
            out.write_all(chunk)?;
            out.flush()?;
            std::thread::sleep(Duration::from_millis(40));
            if !slow.load(Ordering::SeqCst) {
                // Switched to fast mode mid-body: end this response early, as a dropped link would.
                return Ok(());
            }
        }
    } else {
        out.write_all(rest)?;
    }
    out.flush()?;
    Ok(())
}
