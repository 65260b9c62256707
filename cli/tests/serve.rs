//! `unmask serve` from the outside: the real binary on a free loopback port (`--port 0`, the
//! address read from its first line), driven by clients nobody here wrote — curl for raw SSE and
//! the official `openai` Python package (tests/serve/openai_client_test.py, in a virtual
//! environment this test creates under target/) — plus a raw socket for disconnects and real
//! signals for shutdown. The store is checked through `unmask runs`.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::Env;
use serde_json::{json, Value};

/// Settings of a long generation (one block, no early stop): still running when a test acts.
fn long_unmask(steps: usize) -> Value {
    json!({ "steps": steps, "block_length": steps, "early_stop_eos": false })
}

fn question(extra: Value) -> Value {
    let mut body = json!({ "model": "tiny-llada", "messages": [{ "role": "user", "content": "What is 347+586?" }] });
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    body
}

/// A running `unmask serve`.
struct Server {
    child: Child,
    url: String,
    log: Arc<Mutex<String>>,
}

impl Server {
    fn start(env: &Env, args: &[&str]) -> Server {
        let mut child = env
            .cmd()
            .args(["serve", "--port", "0"])
            .args(args)
            .env("UNMASK_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start unmask serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    // The log holds the line before the URL is handed over, so a test reading
                    // the log once the server is up sees the "listening" line.
                    let url = line
                        .split("listening on ")
                        .nth(1)
                        .map(|r| r.split_whitespace().next().unwrap_or("").to_owned());
                    log.lock().unwrap().push_str(&format!("{line}\n"));
                    if let Some(url) = url {
                        let _ = tx.send(url);
                    }
                }
            });
        }
        let url = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(u) => u,
            Err(_) => {
                let _ = child.kill();
                panic!("unmask serve did not start:\n{}", log.lock().unwrap());
            }
        };
        Server { child, url, log }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn signal(&self, sig: rustix::process::Signal) {
        let pid = rustix::process::Pid::from_raw(self.child.id() as i32).expect("pid");
        rustix::process::kill_process(pid, sig).expect("signal the server");
    }

    /// Waits for the process to exit (panics after `limit`).
    fn wait(&mut self, limit: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().expect("try_wait") {
                return s;
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                panic!("unmask serve did not exit within {limit:?}:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A response as curl saw it.
struct Http {
    status: u16,
    headers: String,
    body: String,
}

impl Http {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
    /// The `data:` payloads of an event stream.
    fn events(&self) -> Vec<String> {
        self.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_owned).collect()
    }
    fn header(&self, name: &str) -> Option<String> {
        self.headers.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim().eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

fn parse_http(out: &[u8]) -> Http {
    let text = String::from_utf8_lossy(out).into_owned();
    let (headers, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = headers.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Http { status, headers: headers.to_owned(), body: body.to_owned() }
}

/// `curl` with the headers on stdout before the body; `-N` so streams are not buffered.
fn curl(args: &[&str]) -> Http {
    let out = Command::new("curl")
        .args(["-sS", "-N", "-D", "-", "--max-time", "120"])
        .args(args)
        .output()
        .expect("curl runs");
    parse_http(&out.stdout)
}

fn post(url: &str, body: &Value) -> Http {
    curl(&["-H", "Content-Type: application/json", "--data-binary", &body.to_string(), url])
}

/// A curl whose output is read while it runs (for requests a test acts on mid-stream).
struct LiveCurl {
    child: Child,
    lines: Receiver<String>,
}

impl LiveCurl {
    fn post(url: &str, body: &Value) -> LiveCurl {
        let mut child = Command::new("curl")
            .args([
                "-sS",
                "-N",
                "-D",
                "-",
                "--max-time",
                "120",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
            ])
            .arg(body.to_string())
            .arg(url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("curl runs");
        let out = child.stdout.take().expect("stdout");
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        LiveCurl { child, lines }
    }

    /// Reads lines until one satisfies `pred`; returns everything read.
    fn until(&self, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let mut seen = Vec::new();
        loop {
            match self.lines.recv_timeout(Duration::from_secs(60)) {
                Ok(l) => {
                    let hit = pred(&l);
                    seen.push(l);
                    if hit {
                        return seen;
                    }
                }
                Err(_) => panic!("curl output ended without the expected line; read: {seen:?}"),
            }
        }
    }

    /// Waits for curl to end and returns the rest of its output.
    fn finish(mut self) -> Vec<String> {
        let _ = self.child.wait();
        self.lines.iter().collect()
    }
}

impl Drop for LiveCurl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The run id of a stream's first chunk.
fn run_id_in(line: &str) -> i64 {
    let v: Value = serde_json::from_str(line.trim_start_matches("data: ")).expect("chunk JSON");
    v["unmask"]["run_id"].as_i64().unwrap_or_else(|| panic!("no run id in {line}"))
}

fn runs(env: &Env) -> Vec<Value> {
    match env.json(&["runs", "list", "--json", "--limit", "1000"]) {
        Value::Array(a) => a,
        other => panic!("runs list: {other}"),
    }
}

fn run_record(env: &Env, id: i64) -> Value {
    env.json(&["runs", "show", &id.to_string(), "--json"])["run"].clone()
}

/// Waits until run `id` is in a final status; returns its record.
fn settled_run(env: &Env, id: i64) -> Value {
    let t0 = Instant::now();
    loop {
        let r = run_record(env, id);
        if r["status"] != "running" {
            return r;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "run {id} still running: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `n` requests wait in the default model's queue.
fn wait_for_waiting(s: &Server, n: u64) {
    let t0 = Instant::now();
    loop {
        let m = curl(&[&format!("{}/v1/models/tiny-llada", s.url)]).json();
        if m["unmask"]["queue"]["waiting"].as_u64() == Some(n) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the queue never held {n}: {m}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn concatenated_content(events: &[String]) -> String {
    events
        .iter()
        .filter(|e| *e != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|c| {
            c["choices"][0]["delta"]["content"].as_str().or(c["choices"][0]["text"].as_str()).map(str::to_owned)
        })
        .collect()
}

#[test]
fn serves_models_chat_and_completions_with_raw_sse() {
    let env = Env::new();
    let s = Server::start(&env, &[]);
    let models = curl(&[&format!("{}/v1/models", s.url)]);
    assert_eq!(models.status, 200);
    assert_eq!(models.json()["data"][0]["id"], "tiny-llada");

    let whole = post(&format!("{}/v1/chat/completions", s.url), &question(json!({})));
    assert_eq!(whole.status, 200, "{}", whole.body);
    let w = whole.json();
    let answer = w["choices"][0]["message"]["content"].as_str().expect("content").to_owned();
    assert!(!answer.is_empty());
    assert_eq!(
        w["usage"]["total_tokens"],
        w["usage"]["prompt_tokens"].as_u64().unwrap() + w["usage"]["completion_tokens"].as_u64().unwrap()
    );
    assert!(whole.header("content-type").is_some_and(|c| c.starts_with("application/json")));

    // Raw server-sent events: OpenAI chunks, text as the stable prefix, `[DONE]` last.
    let streamed = post(
        &format!("{}/v1/chat/completions", s.url),
        &question(json!({ "stream": true, "stream_options": { "include_usage": true } })),
    );
    assert_eq!(streamed.status, 200);
    assert!(streamed.header("content-type").is_some_and(|c| c.starts_with("text/event-stream")));
    let events = streamed.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{}", streamed.body);
    assert_eq!(concatenated_content(&events), answer);
    let chunks: Vec<Value> =
        events.iter().filter(|e| *e != "[DONE]").map(|e| serde_json::from_str(e).expect("chunk")).collect();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks.iter().any(|c| c["choices"][0]["finish_reason"] == "stop"));
    assert!(chunks.last().expect("usage chunk")["usage"]["completion_tokens"].as_u64() > Some(0));

    // The diffusion extension: every step's changes, positions within the answer's canvas.
    let steps = post(
        &format!("{}/v1/chat/completions", s.url),
        &question(json!({ "stream": true, "unmask": { "stream_steps": true } })),
    );
    let step_chunks: Vec<Value> = steps
        .events()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter(|c| c["unmask"]["step"].is_object())
        .collect();
    // One chunk per step the run took (the model's default: 32 tokens in blocks of 4, decoding
    // stopped after the block that ends the answer), as its last chunk reports.
    let end = steps
        .events()
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .find_map(|c| c["unmask"]["steps"].as_u64())
        .expect("the last chunk reports the run's steps");
    assert!((1..=32).contains(&end), "{end} steps");
    assert_eq!(step_chunks.len() as u64, end, "one chunk per step");
    for c in &step_chunks {
        for ch in c["unmask"]["step"]["changes"].as_array().expect("changes") {
            assert!(ch["pos"].as_u64() < Some(32) && ch["confidence"].is_number() && ch["state"].is_string(), "{ch}");
        }
    }
    assert_eq!(concatenated_content(&steps.events()), answer);

    // Text completions, whole and streamed.
    let body = json!({ "model": "tiny-llada", "prompt": "What is 12+34?" });
    let text = post(&format!("{}/v1/completions", s.url), &body).json()["choices"][0]["text"]
        .as_str()
        .expect("text")
        .to_owned();
    let mut sbody = body.clone();
    sbody["stream"] = json!(true);
    let text_events = post(&format!("{}/v1/completions", s.url), &sbody).events();
    assert_eq!(concatenated_content(&text_events), text);

    // Every generation is a completed run in the store, with the answer it returned.
    let recorded = runs(&env);
    assert_eq!(recorded.len(), 5, "{recorded:?}");
    assert!(recorded.iter().all(|r| r["status"] == "completed"));
    assert!(recorded.iter().any(|r| r["output"] == answer.as_str()));
}

#[test]
fn bad_requests_get_openai_errors_and_the_server_stays_up() {
    let env = Env::new();
    let s = Server::start(&env, &["--max-request-bytes", "4096"]);
    let chat = format!("{}/v1/chat/completions", s.url);
    let raw = |body: &str| curl(&["-H", "Content-Type: application/json", "--data-binary", body, &chat]);
    let cases: Vec<(&str, Http, u16)> = vec![
        ("malformed JSON", raw("{\"model\": \"tiny-llada\", \"messages\": ["), 400),
        ("not JSON at all", raw("\u{1}\u{2}garbage"), 400),
        ("missing messages", raw("{\"model\": \"tiny-llada\"}"), 400),
        ("wrong type", raw("{\"model\": \"tiny-llada\", \"messages\": 5}"), 400),
        ("empty messages", post(&chat, &json!({ "model": "tiny-llada", "messages": [] })), 400),
        (
            "unknown role",
            post(&chat, &json!({ "model": "tiny-llada", "messages": [{ "role": "tool", "content": "x" }] })),
            400,
        ),
        ("unknown model", post(&chat, &question(json!({ "model": "gpt-4" }))), 404),
        (
            "oversized body",
            raw(&format!(
                "{{\"model\": \"tiny-llada\", \"messages\": [{{\"role\": \"user\", \"content\": \"{}\"}}]}}",
                "x".repeat(8000)
            )),
            413,
        ),
        ("too many tokens", post(&chat, &question(json!({ "max_tokens": 1_000_000 }))), 400),
        ("negative max_tokens", post(&chat, &question(json!({ "max_tokens": -3 }))), 400),
        ("bad temperature", post(&chat, &question(json!({ "temperature": 9.5 }))), 400),
        ("invalid steps", post(&chat, &question(json!({ "unmask": { "steps": 0 } }))), 400),
        ("draft model", post(&chat, &question(json!({ "unmask": { "draft_model": "tiny-ar" } }))), 400),
        ("unknown extension key", post(&chat, &question(json!({ "unmask": { "stepz": 3 } }))), 400),
        ("stream_steps without stream", post(&chat, &question(json!({ "unmask": { "stream_steps": true } }))), 400),
        ("unknown path", curl(&[&format!("{}/v1/engines", s.url)]), 404),
        ("wrong method", curl(&["-X", "DELETE", &format!("{}/v1/models", s.url)]), 405),
        (
            "prompt as token ids",
            post(&format!("{}/v1/completions", s.url), &json!({ "model": "tiny-llada", "prompt": [1, 2, 3] })),
            400,
        ),
    ];
    for (what, r, status) in &cases {
        assert_eq!(r.status, *status, "{what}: {}", r.body);
        let e = r.json();
        assert!(e["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{what}: {}", r.body);
        assert!(e["error"]["type"].is_string(), "{what}: {}", r.body);
    }
    let draft = &cases.iter().find(|c| c.0 == "draft model").expect("case").1;
    assert!(draft.body.contains("without a draft model"), "{}", draft.body);
    // Still serving, and nothing of the refused requests was recorded.
    assert_eq!(post(&chat, &question(json!({}))).status, 200);
    assert_eq!(runs(&env).len(), 1);
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

#[test]
fn a_full_queue_answers_429_with_retry_after() {
    let env = Env::new();
    let s = Server::start(&env, &["--queue", "1", "--batch", "2"]);
    let chat = format!("{}/v1/chat/completions", s.url);
    let long = question(json!({ "stream": true, "max_tokens": 128, "unmask": long_unmask(128) }));
    // Two requests fill the two decoding slots.
    let running = [LiveCurl::post(&chat, &long), LiveCurl::post(&chat, &long)];
    for r in &running {
        r.until(|l| l.starts_with("data: "));
    }
    // Decoding has started in both; the next request waits in the queue (headers go out at once).
    let queued = LiveCurl::post(&chat, &long);
    queued.until(|l| l.starts_with("HTTP/1.1 200"));
    wait_for_waiting(&s, 1);
    let refused = post(&chat, &question(json!({})));
    assert_eq!(refused.status, 429, "{}", refused.body);
    let retry: u64 = refused.header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After in seconds");
    assert!((1..=60).contains(&retry));
    assert_eq!(refused.json()["error"]["code"], "queue_full");
}

#[test]
fn a_client_that_disconnects_cancels_its_run_within_a_step() {
    let env = Env::new();
    let s = Server::start(&env, &[]);
    let addr = s.url.trim_start_matches("http://").to_owned();
    let body = question(json!({ "stream": true, "max_tokens": 128, "unmask": { "stream_steps": true, "steps": 128, "block_length": 128, "early_stop_eos": false } }))
        .to_string();
    let mut sock = TcpStream::connect(&addr).expect("connect");
    write!(sock, "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}", body.len())
        .expect("send");
    let mut seen = String::new();
    let mut buf = [0u8; 16384];
    let step_marker = "\"unmask\":{\"step\":";
    while seen.matches(step_marker).count() < 5 {
        let n = sock.read(&mut buf).expect("read");
        assert!(n > 0, "stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let steps_seen = seen.matches(step_marker).count() as u64;
    let first = seen.lines().find(|l| l.starts_with("data: ")).expect("first chunk");
    let id = run_id_in(first);
    drop(sock);
    let run = settled_run(&env, id);
    assert_eq!(run["status"], "cancelled", "{run}");
    // The server stops at its next step once it notices; the slack covers steps that were
    // already sent but not yet read when the socket closed (a busy machine reads late).
    let frames = run["trace_frames"].as_u64().expect("trace_frames");
    assert!(frames <= steps_seen + 8 && frames < 128, "{frames} steps recorded, {steps_seen} seen by the client");
    // A non-streaming client that gives up cancels its run too.
    let chat = format!("{}/v1/chat/completions", s.url);
    let gave_up = curl(&[
        "--max-time",
        "0.5",
        "-H",
        "Content-Type: application/json",
        "--data-binary",
        &question(json!({ "max_tokens": 128, "unmask": long_unmask(128) })).to_string(),
        &chat,
    ]);
    assert_eq!(gave_up.status, 0, "curl should have timed out: {}", gave_up.body);
    let t0 = Instant::now();
    let last = loop {
        let r = runs(&env).into_iter().find(|r| r["id"] != id).filter(|r| r["status"] != "running");
        if let Some(r) = r {
            break r;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "the abandoned run never ended");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(last["status"], "cancelled", "{last}");
    // The server goes on serving.
    assert_eq!(post(&chat, &question(json!({}))).status, 200);
}

#[test]
fn sigterm_finishes_running_requests_refuses_queued_ones_and_leaves_the_store_consistent() {
    let env = Env::new();
    // One decoding slot, so that the second request waits in the queue.
    let mut s = Server::start(&env, &["--batch", "1"]);
    let chat = format!("{}/v1/chat/completions", s.url);
    let running =
        LiveCurl::post(&chat, &question(json!({ "stream": true, "max_tokens": 96, "unmask": long_unmask(96) })));
    let first = running.until(|l| l.starts_with("data: "));
    let id = run_id_in(first.last().expect("first chunk"));
    let queued = LiveCurl::post(&chat, &question(json!({})));
    wait_for_waiting(&s, 1);
    s.signal(rustix::process::Signal::TERM);
    let status = s.wait(Duration::from_secs(60));
    assert!(status.success(), "exit {status:?}:\n{}", s.log());
    let rest = running.finish();
    assert_eq!(rest.iter().rev().find(|l| l.starts_with("data: ")).map(String::as_str), Some("data: [DONE]"));
    assert!(
        rest.iter().any(|l| l.contains("\"finish_reason\":\"stop\"") || l.contains("\"finish_reason\":\"length\"")),
        "{rest:?}"
    );
    let refused = parse_http(queued.finish().join("\r\n").as_bytes());
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(refused.body.contains("shutting_down"));
    let recorded = runs(&env);
    assert_eq!(recorded.len(), 1, "the refused request never ran: {recorded:?}");
    assert_eq!(run_record(&env, id)["status"], "completed");
}

#[test]
fn after_the_grace_period_running_requests_are_cancelled_and_recorded() {
    let env = Env::new();
    let mut s = Server::start(&env, &["--shutdown-grace", "0.2"]);
    let chat = format!("{}/v1/chat/completions", s.url);
    let running =
        LiveCurl::post(&chat, &question(json!({ "stream": true, "max_tokens": 128, "unmask": long_unmask(128) })));
    let first = running.until(|l| l.starts_with("data: "));
    let id = run_id_in(first.last().expect("first chunk"));
    s.signal(rustix::process::Signal::TERM);
    assert!(s.wait(Duration::from_secs(60)).success(), "{}", s.log());
    let rest = running.finish();
    assert!(rest.iter().any(|l| l.contains("\"code\":\"cancelled\"")), "{rest:?}");
    assert_eq!(rest.iter().rev().find(|l| l.starts_with("data: ")).map(String::as_str), Some("data: [DONE]"));
    let run = run_record(&env, id);
    assert_eq!(run["status"], "cancelled", "{run}");
}

#[test]
fn concurrent_requests_are_decoded_together_and_answer_what_they_answer_alone() {
    let env = Env::new();
    let s = Server::start(&env, &["--batch", "4", "--no-record"]);
    let chat = format!("{}/v1/chat/completions", s.url);
    let asks: Vec<Value> = ["What is 12+30?", "Sort: pear fig apple", "What is 7+8?", "Reverse: stone"]
        .iter()
        .enumerate()
        .map(|(i, q)| {
            // Different lengths: runs leave the batch at different steps.
            let n = [16, 8, 16, 32][i];
            json!({ "model": "tiny-llada", "max_tokens": n, "messages": [{ "role": "user", "content": q }],
                    "unmask": { "steps": n, "block_length": n } })
        })
        .collect();
    let content = |h: &Http| -> String {
        assert_eq!(h.status, 200, "{}", h.body);
        h.json()["choices"][0]["message"]["content"].as_str().expect("content").to_owned()
    };
    // One at a time: each decodes alone.
    let alone: Vec<String> = asks.iter().map(|a| content(&post(&chat, a))).collect();
    let model = format!("{}/v1/models/tiny-llada", s.url);
    let before = curl(&[&model]).json()["unmask"]["batch"].clone();
    assert_eq!(before["slots"], 4, "{before}");
    assert_eq!(before["largest"], 1, "{before}");
    // All at once, several times: they share packed forwards and answer the same.
    for _ in 0..3 {
        let together: Vec<String> = std::thread::scope(|sc| {
            let handles: Vec<_> = asks.iter().map(|a| sc.spawn(|| content(&post(&chat, a)))).collect();
            handles.into_iter().map(|h| h.join().expect("client thread")).collect()
        });
        assert_eq!(together, alone, "batching changed an answer");
    }
    let after = curl(&[&model]).json()["unmask"]["batch"].clone();
    let largest = after["largest"].as_u64().expect("largest");
    assert!(largest >= 2, "concurrent requests were never packed into one forward: {after}");
    let (packed, seq) = (after["packed_forwards"].as_u64().unwrap(), after["sequence_forwards"].as_u64().unwrap());
    assert!(seq > packed, "{after}");
    assert!(!s.log().contains("panicked"), "{}", s.log());
}

#[test]
fn batching_is_refused_by_name_where_it_cannot_run() {
    let env = Env::new();
    let out = env.run(&["serve", "--port", "0", "--no-record", "--backend", "vnpu", "--batch", "4"]);
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cpu backend only"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn keys_and_addresses() {
    let env = Env::new();
    // Beyond loopback only with a key; refused before anything is bound.
    let out = env.run(&["serve", "--host", "0.0.0.0", "--port", "0", "--no-record"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--api-key"));
    // With a key, every request must carry it.
    let s = Server::start(&env, &["--api-key", "s3cret", "--no-record"]);
    let models = format!("{}/v1/models", s.url);
    let none = curl(&[&models]);
    assert_eq!(none.status, 401);
    assert_eq!(none.json()["error"]["code"], "invalid_api_key");
    assert_eq!(curl(&["-H", "Authorization: Bearer wrong", &models]).status, 401);
    assert_eq!(curl(&["-H", "Authorization: Bearer s3cret", &models]).status, 200);
    assert_eq!(curl(&[&format!("{}/health", s.url)]).status, 200);
}

#[test]
fn several_models_are_served_by_name() {
    let env = Env::new();
    let s = Server::start(&env, &["--model", "tiny-llada", "--model", "tiny-ar", "--no-record"]);
    let ids: Vec<String> = curl(&[&format!("{}/v1/models", s.url)]).json()["data"]
        .as_array()
        .expect("data")
        .iter()
        .filter_map(|m| m["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids, ["tiny-llada", "tiny-ar"]);
    let chat = format!("{}/v1/chat/completions", s.url);
    let ar = question(json!({ "model": "tiny-ar", "max_tokens": 16 }));
    let whole = post(&chat, &ar);
    assert_eq!(whole.status, 200, "{}", whole.body);
    assert_eq!(whole.json()["unmask"]["run_id"], Value::Null);
    let mut streamed = ar.clone();
    streamed["stream"] = json!(true);
    let events = post(&chat, &streamed).events();
    assert_eq!(
        concatenated_content(&events),
        whole.json()["choices"][0]["message"]["content"].as_str().expect("content")
    );
}

#[test]
fn a_draft_model_answers_what_the_target_answers_and_is_recorded() {
    let env = Env::new();
    let ask = |url: &str, extra: Value| {
        let mut body = json!({
            "model": "tiny-ar", "max_tokens": 24,
            "messages": [{ "role": "user", "content": "Reverse: candle harbor moss" }]
        });
        body.as_object_mut().expect("object").extend(extra.as_object().expect("object").clone());
        post(&format!("{url}/chat/completions"), &body)
    };
    let plain = {
        let s = Server::start(&env, &["--model", "tiny-ar", "--no-record"]);
        let r = ask(&format!("{}/v1", s.url), json!({}));
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.json()["unmask"]["speculation"], Value::Null);
        // Without --draft, naming a draft is refused with how to start the server for it.
        let refused = ask(&format!("{}/v1", s.url), json!({ "unmask": { "draft_model": "tiny-draft" } }));
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains("--draft tiny-draft"), "{}", refused.body);
        r.json()["choices"][0]["message"]["content"].clone()
    };
    for schedule in ["sync", "async"] {
        let s = Server::start(
            &env,
            &["--model", "tiny-ar", "--model", "tiny-llada", "--draft", "tiny-draft", "--spec-schedule", schedule],
        );
        assert!(s.log().contains("tiny-ar (draft tiny-draft)"), "{}", s.log());
        let url = format!("{}/v1", s.url);
        let r = ask(&url, json!({ "unmask": { "draft_model": "tiny-draft" } }));
        assert_eq!(r.status, 200, "{}", r.body);
        let v = r.json();
        // Greedy speculative decoding answers exactly what the target answers alone.
        assert_eq!(v["choices"][0]["message"]["content"], plain, "{schedule}");
        let sp = &v["unmask"]["speculation"];
        assert_eq!(sp["draft_model"], "tiny-draft", "{v}");
        assert!(sp["stats"]["drafted"].as_u64().is_some_and(|n| n > 0), "{v}");
        // The draft is the server's: another one is refused, and the diffusion model has none.
        assert_eq!(ask(&url, json!({ "unmask": { "draft_model": "tiny-ar" } })).status, 400);
        let llada = post(
            &format!("{url}/chat/completions"),
            &question(json!({ "max_tokens": 16, "unmask": { "draft_model": "tiny-draft" } })),
        );
        assert_eq!(llada.status, 400, "{}", llada.body);
        let dllm = post(&format!("{url}/chat/completions"), &question(json!({ "max_tokens": 16 })));
        assert_eq!(dllm.status, 200, "{}", dllm.body);
        assert_eq!(dllm.json()["unmask"]["speculation"], Value::Null);
        // The recorded run keeps the draft and its counters, as a `generate --draft` run does.
        let id = v["unmask"]["run_id"].as_i64().expect("recorded");
        settled_run(&env, id);
        let shown = env.json(&["runs", "show", &id.to_string(), "--json"]);
        assert_eq!(shown["speculation"]["draft_model"], "tiny-draft", "{shown}");
        assert_eq!(shown["speculation"]["stats"], sp["stats"], "{shown}");
    }
    // A draft that pairs with nothing served, or with another vocabulary, stops the server at once.
    for (args, says) in [
        (&["--draft", "tiny-draft"][..], "no served model is autoregressive"),
        (&["--model", "tiny-ar", "--draft", "tiny-llada"][..], "must be autoregressive"),
    ] {
        let out = env.run(&[&["serve", "--port", "0", "--no-record"][..], args].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

#[test]
fn the_example_canvas_client_draws_the_canvas() {
    let env = Env::new();
    let s = Server::start(&env, &["--no-record"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/serve_canvas.py");
    let out = Command::new("python3")
        .arg(&script)
        .args(["--url", &s.url, "--plain", "What is 347+586?"])
        .output()
        .expect("python3 runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    // One line per step the run took, as the client's closing line reports.
    let steps = stdout
        .lines()
        .find_map(|l| {
            l.strip_prefix("run ").and_then(|r| r.split(": ").nth(1)?.split(' ').next()?.parse::<usize>().ok())
        })
        .expect("the closing line names the run's steps");
    assert!((1..=32).contains(&steps), "{stdout}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("step ")).count(), steps, "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("answer: ") && l.len() > "answer: ".len()), "{stdout}");
}

/// A virtual environment with the `openai` package, made once under target/; `Err` says why
/// it could not be made (no `venv` module, no access to PyPI).
fn openai_python() -> Result<PathBuf, String> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openai-venv");
    let python = venv.join("bin/python");
    let has_openai = |py: &Path| {
        Command::new(py).args(["-c", "import openai"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if has_openai(&python) {
        return Ok(python);
    }
    let made = Command::new("python3")
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .output()
        .map_err(|e| format!("python3: {e}"))?;
    if !made.status.success() {
        return Err(format!(
            "`python3 -m venv` failed (Debian: apt-get install python3-venv): {}",
            String::from_utf8_lossy(&made.stderr).trim()
        ));
    }
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openai>=1"])
        .output()
        .map_err(|e| format!("pip: {e}"))?;
    if !pip.status.success() || !has_openai(&python) {
        return Err(format!(
            "pip could not install openai (is PyPI reachable?): {}",
            String::from_utf8_lossy(&pip.stderr).trim()
        ));
    }
    Ok(python)
}

#[test]
fn the_official_openai_python_client_works() {
    let python = match openai_python() {
        Ok(p) => p,
        Err(why) => {
            eprintln!("SKIPPED the openai client test: {why}");
            return;
        }
    };
    let env = Env::new();
    let s = Server::start(&env, &["--api-key", "test-key"]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/serve/openai_client_test.py");
    let out = Command::new(&python)
        .arg(&script)
        .env("UNMASK_SERVE_URL", format!("{}/v1", s.url))
        .env("UNMASK_SERVE_KEY", "test-key")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}\n{}\nserver log:\n{}", String::from_utf8_lossy(&out.stderr), s.log());
    let summary = stdout.lines().find_map(|l| l.strip_prefix("openai-client-tests: ")).expect("summary line");
    let summary: Value = serde_json::from_str(summary).expect("summary JSON");
    assert_eq!(summary["failed"], 0);
    assert!(summary["passed"].as_u64() >= Some(15), "{summary}");
}
