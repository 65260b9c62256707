//! `unmask models list|import|download|rm` against a private data folder.

mod common;

use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::{default_model, distinct_config, distinct_model_copy, Env, FileServer, MODEL_FILES};

#[test]
fn default_model_is_registered_and_listed() {
    let env = Env::new();
    let v = env.json(&["models", "list", "--json"]);
    let models = v.as_array().expect("array");
    let def = models.iter().find(|m| m["name"] == "tiny-llada").expect("default registered");
    assert_eq!(def["default"], true);
    assert_eq!(def["registered"], true);
    assert_eq!(def["in_place"], true);
    assert_eq!(def["architecture"], "llada");
    // The other embedded models are offered, not registered.
    assert!(models.iter().any(|m| m["name"] == "tiny-ar" && m["registered"] == false), "{v}");
    let text = env.ok(&["models", "list"]);
    assert!(text.contains("tiny-llada (default)"), "{text}");
    // The default cannot be removed (it would come straight back).
    let out = env.run(&["models", "rm", "tiny-llada"]);
    assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn import_list_generate_rm() {
    let env = Env::new();
    let src = distinct_model_copy(&env.data().join("src-model"), "import");
    let out = env.ok(&["models", "import", src.to_str().unwrap(), "--name", "my-llada"]);
    assert!(out.contains("imported my-llada"), "{out}");
    let v = env.json(&["models", "list", "--json"]);
    let m = v.as_array().unwrap().iter().find(|m| m["name"] == "my-llada").expect("listed").clone();
    assert_eq!(m["in_place"], false);
    assert_eq!(m["format"], "hf");
    let copied = std::path::PathBuf::from(m["path"].as_str().unwrap());
    assert!(copied.starts_with(env.data()) && copied.join("model.safetensors").exists(), "{copied:?}");
    // The name resolves for generate.
    let g = env.json(&["generate", "hi", "--model", "my-llada", "--json", "--gen-length", "8", "--block-length", "8", "--steps", "8"]);
    assert_eq!(g["tokens"].as_array().unwrap().len(), 8);
    // Importing the same content again is refused (name taken, then content duplicate).
    let again = env.run(&["models", "import", src.to_str().unwrap(), "--name", "my-llada"]);
    assert_eq!(again.status.code(), Some(4));
    let dup = env.run(&["models", "import", src.to_str().unwrap(), "--name", "other"]);
    assert_eq!(dup.status.code(), Some(4));
    assert!(String::from_utf8_lossy(&dup.stderr).contains("already registered as `my-llada`"));
    let rm = env.ok(&["models", "rm", "my-llada"]);
    assert!(rm.contains("removed my-llada"), "{rm}");
    assert!(!copied.exists(), "managed files deleted");
    let v = env.json(&["models", "list", "--json"]);
    assert!(!v.as_array().unwrap().iter().any(|m| m["name"] == "my-llada"));
    // Removing it again: no such model.
    let out = env.run(&["models", "rm", "my-llada"]);
    assert_eq!(out.status.code(), Some(3));
}

#[test]
fn import_errors_have_exit_codes() {
    let env = Env::new();
    let out = env.run(&["models", "import", "/nonexistent/dir"]);
    assert_eq!(out.status.code(), Some(3));
    // Truncated weights: corrupt file, named in the message.
    let dir = env.data().join("broken");
    distinct_model_copy(&dir, "broken");
    let w = std::fs::read(dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors"), &w[..w.len() / 3]).unwrap();
    let out = env.run(&["models", "import", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("model.safetensors"));
    // Unsafe name.
    let good = distinct_model_copy(&env.data().join("good"), "good");
    let out = env.run(&["models", "import", good.to_str().unwrap(), "--name", "../escape"]);
    assert_eq!(out.status.code(), Some(4));
    // A GGUF file (our export of the embedded model) imports too, and runs by name.
    let gguf = env.data().join("tiny-llada-q8.gguf");
    env.ok(&["models", "export", gguf.to_str().unwrap(), "--dtype", "q8_0"]);
    let out = env.ok(&["models", "import", gguf.to_str().unwrap(), "--name", "llada-gguf"]);
    assert!(out.contains("imported llada-gguf (llada gguf Q8_0"), "{out}");
    let g = env.json(&["generate", "hi", "--model", "llada-gguf", "--json", "--gen-length", "8", "--block-length", "8", "--steps", "8"]);
    assert_eq!(g["tokens"].as_array().unwrap().len(), 8);
}

fn served_files(tag: &str) -> Vec<(String, Vec<u8>)> {
    MODEL_FILES
        .iter()
        .map(|f| {
            let body = if *f == "config.json" { distinct_config(tag) } else { std::fs::read(default_model().join(f)).unwrap() };
            (f.to_string(), body)
        })
        .collect()
}

#[test]
fn download_from_local_server() {
    let env = Env::new();
    let server = FileServer::start(served_files("download"));
    let out = env.run(&["models", "download", "--base-url", &server.base_url, "acme/tiny-copy", "--name", "dl"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("downloaded dl"), "{stdout}");
    // Not a terminal: no progress-bar escape sequences on stderr.
    assert!(!String::from_utf8_lossy(&out.stderr).contains('\x1b'));
    let v = env.json(&["models", "list", "--json"]);
    let m = v.as_array().unwrap().iter().find(|m| m["name"] == "dl").expect("registered").clone();
    assert_eq!(m["size_bytes"].as_u64(), Some(served_files("download").iter().map(|(_, b)| b.len() as u64).sum()));
    assert!(server.requests().iter().any(|r| r.path == "/acme/tiny-copy/resolve/main/model.safetensors" && r.status == 200));
    // A missing repo file: HTTP 404 on a required file is a store/download failure.
    let server2 = FileServer::start(Vec::new());
    let out = env.run(&["models", "download", "--base-url", &server2.base_url, "acme/empty"]);
    assert_eq!(out.status.code(), Some(6), "{}", String::from_utf8_lossy(&out.stderr));
    // Bad repo id.
    let out = env.run(&["models", "download", "--base-url", &server.base_url, "../etc"]);
    assert_eq!(out.status.code(), Some(4));
}

/// Kill a download mid-file, then run the same command: it resumes with a Range request.
#[test]
fn interrupted_download_resumes() {
    let env = Env::new();
    let server = FileServer::start(served_files("resume"));
    server.slow.store(true, Ordering::SeqCst);
    let args = ["models", "download", "--base-url", server.base_url.as_str(), "acme/resumable", "--name", "rs"];
    let mut child = env.cmd().args(args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let part_dir = env.data().join("models/.downloads/acme--resumable@main");
    let part = part_dir.join("model.safetensors.part");
    let deadline = Instant::now() + Duration::from_secs(300);
    while std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0) < 64 * 1024 {
        assert!(Instant::now() < deadline, "no partial file appeared");
        assert!(child.try_wait().unwrap().is_none(), "download ended before it could be interrupted");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let have = std::fs::metadata(&part).unwrap().len();
    server.slow.store(false, Ordering::SeqCst);
    let out = env.run(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("resuming model.safetensors from byte"), "{err}");
    let resumed = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/model.safetensors") && r.status == 206)
        .expect("a 206 range request");
    let from = resumed.range_from.unwrap();
    assert!((64 * 1024..=have).contains(&from), "{resumed:?} vs {have} bytes on disk");
    assert!(!part_dir.exists(), "staging folder cleaned up");
    // The resumed model works.
    let g = env.json(&["generate", "hi", "--model", "rs", "--json", "--gen-length", "8", "--block-length", "8", "--steps", "8"]);
    assert!(g["text"].is_string());
}
