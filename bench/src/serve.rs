//! Suite `serve`: `unmask serve` under load on loopback. The real server binary against an
//! embedded model (`$UNMASK_SERVE_MODEL`, else the embedded default), driven by in-process async
//! clients (reqwest) that stream chat completions: 1, 4, 16 and 64 concurrent clients for a
//! bounded time each; requests/s, time to first token (first chunk carrying answer text) and
//! total latency p50/p99, 429s and errors. Each level runs against two servers side by side,
//! level by level: the default (concurrent requests decoded together, their forwards packed into
//! one) and `--batch 1` (one request at a time). Then a fault run: clients that hang up
//! mid-stream at random and a SIGKILL of the server mid-load, a restart on the same data folder,
//! and a check of the store: every run a client learnt of is there once, in a final status that
//! matches what the client saw (completed, cancelled by its client, or interrupted by the kill);
//! no run duplicated, none stuck `running`. Last, the official `openai` Python package's tests
//! (tests/serve/openai_client_test.py) against the server.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use unmask_store::{RunStatus, Store};

/// Concurrent clients per load level.
const LEVELS: [usize; 4] = [1, 4, 16, 64];
/// Requests that may wait per model (the server's default).
const QUEUE: usize = 16;
/// Environment variable naming the embedded model to serve (default: the embedded default).
const MODEL_ENV: &str = "UNMASK_SERVE_MODEL";
/// Longest a single request may take before it counts as an error.
const REQUEST_LIMIT: Duration = Duration::from_secs(120);

/// The model every server of this run serves and every request names (read once: requests
/// name it on the load path).
fn served_model() -> &'static str {
    static MODEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MODEL.get_or_init(|| {
        std::env::var(MODEL_ENV)
            .ok()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or_else(|| unmask_engine::model::embedded::DEFAULT_MODEL.to_owned())
    })
}

pub fn run(quick: bool) -> Result<Value> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let unmask = crate::unmask_bin::build_unmask(&root)?;
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
    let level_s = if quick { 5.0 } else { 20.0 };
    let fault_s = if quick { 5.0 } else { 12.0 };

    // Load levels: for each, the batching server (default flags) then the one-at-a-time server,
    // each with its own data folder for all its levels.
    let configs: [(&str, &[&str]); 2] = [("batched", &[]), ("one_at_a_time", &["--batch", "1"])];
    let mut runs = Vec::new();
    for (name, flags) in configs {
        let dir = tempfile::tempdir()?;
        let server = Server::start(&unmask, dir.path(), flags)?;
        runs.push(LoadRun {
            name,
            dir,
            server: Some(server),
            levels: Vec::new(),
            check: None,
            exit: None,
            batch: Value::Null,
        });
    }
    let http = client()?;
    let counter = Arc::new(AtomicU64::new(0));
    for (li, &clients) in LEVELS.iter().enumerate() {
        // Which server goes first alternates level by level, so neither always runs on the
        // machine the other just warmed (or heated).
        let order: [usize; 2] = if li % 2 == 0 { [0, 1] } else { [1, 0] };
        for ri in order {
            let run = &mut runs[ri];
            let Some(server) = &run.server else { continue };
            eprintln!("load ({}): {clients} clients for {level_s:.0} s", run.name);
            let plan = Plan { clients, seconds: level_s, drop_chance: 0.0, kill_after_s: None };
            let samples = rt.block_on(drive(&http, &server.url, &plan, &counter, None));
            let level = Level::of(clients, &samples);
            eprintln!("  {}", level.summary());
            run.levels.push((level, samples));
        }
    }
    for run in &mut runs {
        let Some(server) = run.server.take() else { continue };
        run.batch = rt.block_on(batch_report(&http, &server.url)).unwrap_or(Value::Null);
        run.exit = server.terminate(Duration::from_secs(60))?.code();
        let all: Vec<Sample> = run.levels.iter().flat_map(|(_, s)| s.iter().cloned()).collect();
        let check = rt.block_on(check_store(run.dir.path(), &all, None))?;
        eprintln!("store after the {} load levels: {}", run.name, check.summary());
        for (level, samples) in &mut run.levels {
            level.engine_ms = Percentiles::of(
                samples
                    .iter()
                    .filter_map(|s| s.run_id)
                    .filter_map(|id| check.wall_s.get(&id))
                    .map(|w| w * 1e3)
                    .collect(),
            );
        }
        run.check = Some(check);
    }

    // Fault run: clients hang up at random, the server is SIGKILLed mid-load and restarted.
    eprintln!("fault run: 16 clients for {fault_s:.0} s, 30 % hang up mid-stream, SIGKILL at {:.0} s", fault_s * 0.6);
    let fault_dir = tempfile::tempdir()?;
    let server = Server::start(&unmask, fault_dir.path(), &[])?;
    let plan = Plan { clients: 16, seconds: fault_s, drop_chance: 0.3, kill_after_s: Some(fault_s * 0.6) };
    let killer = KillSwitch::new(server);
    let mut fault_samples = rt.block_on(drive(&http, &killer.url(), &plan, &counter, Some(&killer)));
    let killed = killer.was_killed();
    let fault_level = Level::of(16, &fault_samples);
    eprintln!("  {}", fault_level.summary());
    let restarted = Server::start(&unmask, fault_dir.path(), &[])?;
    let after = Plan { clients: 4, seconds: 2.0, drop_chance: 0.0, kill_after_s: None };
    let after_samples = rt.block_on(drive(&http, &restarted.url, &after, &counter, None));
    let served_after_restart = after_samples.iter().filter(|s| s.outcome == Outcome::Completed).count();
    restarted.terminate(Duration::from_secs(60))?;
    fault_samples.extend(after_samples);
    let fault_check = rt.block_on(check_store(fault_dir.path(), &fault_samples, plan.kill_after_s))?;
    eprintln!("store after the fault run: {}", fault_check.summary());

    // The official client.
    let openai = openai_client_tests(&root, &unmask)?;
    eprintln!("openai client tests: {openai}");

    let (batched, single) = (&runs[0], &runs[1]);
    let (one, sixteen) = (batched.level(1)?, batched.level(16)?);
    let (one_s, sixteen_s) = (single.level(1)?, single.level(16)?);
    let ratio = ttft_ratio(one, sixteen);
    let errors: usize =
        runs.iter().flat_map(|r| r.levels.iter()).map(|(l, _)| l.errors).sum::<usize>() + fault_level.errors;
    let (lost, duplicated) = runs
        .iter()
        .filter_map(|r| r.check.as_ref())
        .fold((fault_check.lost, fault_check.duplicated), |(l, d), c| (l + c.lost, d + c.duplicated));
    let gain = (sixteen_s.rps > 0.0).then(|| sixteen.rps / sixteen_s.rps);
    let note = ttft_note(one, sixteen, ratio, one_s, sixteen_s);
    Ok(json!({
        "headline": {
            "rps_16_clients": sixteen.rps,
            "ttft_p50_ms_1_client": one.ttft.p50,
            "ttft_p99_ms_1_client": one.ttft.p99,
            "ttft_p99_ms_16_clients": sixteen.ttft.p99,
            "ttft_p99_ratio_16_vs_1": ratio,
            "ttft_goal_met": ratio.is_some_and(|r| r <= 3.0),
            "batching_rps_gain_16_clients": gain,
            "one_at_a_time_rps_16_clients": sixteen_s.rps,
            "one_at_a_time_ttft_p99_ms_16_clients": sixteen_s.ttft.p99,
            "one_at_a_time_ttft_p99_ratio_16_vs_1": ttft_ratio(one_s, sixteen_s),
            "errors": errors,
            "lost_runs": lost,
            "duplicated_runs": duplicated,
            "openai_client_tests_passed": openai["passed"],
        },
        "setup": {
            "model": model_setup(served_model())?,
            "request": "streamed chat completion of `What is A+B?` with A, B unique per request",
            "queue_per_model": QUEUE,
            "batched": "the server's default: up to 16 requests decoded together, their forwards packed into one",
            "one_at_a_time": "--batch 1, run side by side with the batched server level by level",
            "seconds_per_level": level_s,
            "clients_and_server_share_this_machine": true,
            "ttft": "from sending the request to the first chunk carrying answer text",
        },
        "levels": batched.levels.iter().map(|(l, _)| l.to_json()).collect::<Vec<_>>(),
        "load_store_check": batched.check.as_ref().map(StoreCheck::to_json),
        "load_server_exit": batched.exit,
        "batch": batched.batch,
        "one_at_a_time": {
            "flags": "--batch 1",
            "levels": single.levels.iter().map(|(l, _)| l.to_json()).collect::<Vec<_>>(),
            "load_store_check": single.check.as_ref().map(StoreCheck::to_json),
            "load_server_exit": single.exit,
            "batch": single.batch,
        },
        "fault": {
            "seconds": fault_s,
            "drop_chance": plan.drop_chance,
            "server_killed": killed,
            "requests": fault_level.to_json(),
            "served_after_restart": served_after_restart,
            "store_check": fault_check.to_json(),
        },
        "openai_client_tests": openai,
        "note": note,
    }))
}

/// The served model and the decoding its generation_config.json gives every request.
fn model_setup(name: &str) -> Result<Value> {
    let dir = unmask_engine::model::embedded::embedded(name).with_context(|| format!("embedded model {name}"))?;
    let g = unmask_engine::model::GenerationDefaults::read_from_dir(&dir)?;
    Ok(json!({
        "name": name,
        "chosen_by": format!("${MODEL_ENV}, else the embedded default"),
        "gen_length": g.gen_length,
        "block_length": g.block_length,
        "steps": g.steps,
    }))
}

/// The 16-client p99 time to first token over the 1-client one.
fn ttft_ratio(one: &Level, sixteen: &Level) -> Option<f64> {
    match (sixteen.ttft.p99, one.ttft.p99) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// Why the 16-client TTFT is what it is, in the run's own numbers.
fn ttft_note(one: &Level, sixteen: &Level, ratio: Option<f64>, one_single: &Level, sixteen_single: &Level) -> String {
    let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0} ms"));
    let div = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    };
    let f2 = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    let f1 = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    // Alone, how far into a request its first answer text comes.
    let late = div(one.ttft.p50, one.latency.p50);
    // Sixteen closed-loop clients keep sixteen requests in the server: whatever the order, a
    // request's latency is about 16 / throughput, and its first token can only come early in
    // that time if it comes early in its own decode.
    let little_ms = (sixteen.rps > 0.0).then(|| 16.0 * 1e3 / sixteen.rps);
    let tail_note = match late {
        Some(l) if l > 0.8 => {
            ": the answer's first words are final only near the end of its decode (a short answer fits in the \
             first block, whose end-of-text ends the decode; or the model commits the first token late)"
        }
        Some(_) => ": the answer's first token is final early in its decode",
        None => "",
    };
    let advice = match (late, ratio) {
        (Some(l), Some(r)) if l > 0.8 && r > 3.0 => {
            " The ratio falls only with decodes whose first token comes early (a smaller first block), shorter \
             decodes (fewer steps per request), or a packed forward much cheaper per request than a lone one."
        }
        _ => "",
    };
    format!(
        "Batched: the running requests decode together (one packed forward per step), and a streaming request \
         goes ahead of the pack until its first token is final (packed forwards of only those requests; the \
         others are passed over at most 3 forwards in a row). {:.2} req/s with 16 clients vs {:.2} one at a \
         time in the same run. Alone, the first answer text comes {} into a {} request ({} of the way{tail_note}). \
         16 closed-loop clients keep 16 requests in the server, so a request's latency is about 16 / throughput \
         = {} whatever the order (measured p50 {}); with 16 clients the first token comes {} of the way into \
         it: TTFT p50 {} / p99 {} with 16 clients vs {} / {} alone, ratio {} at p99, {} at the medians (goal 3; \
         one at a time the p99 ratio is {}).{advice}",
        sixteen.rps,
        sixteen_single.rps,
        ms(one.ttft.p50),
        ms(one.latency.p50),
        f2(late),
        ms(little_ms),
        ms(sixteen.latency.p50),
        f2(div(sixteen.ttft.p50, sixteen.latency.p50)),
        ms(sixteen.ttft.p50),
        ms(sixteen.ttft.p99),
        ms(one.ttft.p50),
        ms(one.ttft.p99),
        f1(ratio),
        f1(div(sixteen.ttft.p50, one.ttft.p50)),
        f1(ttft_ratio(one_single, sixteen_single)),
    )
}

/// The server's batching counters (`/v1/models/MODEL`).
async fn batch_report(http: &reqwest::Client, url: &str) -> Result<Value> {
    let body = http.get(format!("{url}/v1/models/{}", served_model())).send().await?.text().await?;
    let v: Value = serde_json::from_str(&body)?;
    let mut b = v["unmask"]["batch"].clone();
    if let (Some(f), Some(p)) = (b["sequence_forwards"].as_f64(), b["packed_forwards"].as_f64()) {
        if p > 0.0 {
            b["mean_sequences_per_forward"] = json!(f / p);
            b["over"] = json!("all load levels of this server, the 1-client level included");
        }
    }
    Ok(b)
}

/// One server configuration's load levels.
struct LoadRun {
    name: &'static str,
    dir: tempfile::TempDir,
    server: Option<Server>,
    levels: Vec<(Level, Vec<Sample>)>,
    check: Option<StoreCheck>,
    exit: Option<i32>,
    batch: Value,
}

impl LoadRun {
    fn level(&self, clients: usize) -> Result<&Level> {
        self.levels
            .iter()
            .find(|(l, _)| l.clients == clients)
            .map(|(l, _)| l)
            .with_context(|| format!("{} level {clients}", self.name))
    }
}

fn client() -> Result<reqwest::Client> {
    // No proxy: a proxy from the environment must never see loopback traffic.
    Ok(reqwest::Client::builder().no_proxy().build()?)
}

/// A running `unmask serve`.
struct Server {
    child: Child,
    url: String,
    log: Arc<Mutex<Vec<String>>>,
}

impl Server {
    fn start(unmask: &Path, data: &Path, extra: &[&str]) -> Result<Server> {
        let mut child = Command::new(unmask)
            .arg("--data-dir")
            .arg(data)
            .args(["serve", "--port", "0", "--queue", &QUEUE.to_string(), "--model", served_model()])
            .args(extra)
            .env("UNMASK_LOG", "warn")
            .env_remove("UNMASK_MODEL")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting unmask serve")?;
        let stderr = child.stderr.take().context("server stderr")?;
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        {
            let log = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    if let Some(rest) = line.split("listening on ").nth(1) {
                        let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
                    }
                    if let Ok(mut l) = log.lock() {
                        l.push(line);
                    }
                }
            });
        }
        match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(url) => Ok(Server { child, url, log }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("unmask serve did not start: {}", log.lock().map(|l| l.join("\n")).unwrap_or_default())
            }
        }
    }

    /// SIGTERM, then waits for the exit (SIGKILL after `limit`).
    fn terminate(mut self, limit: Duration) -> Result<ExitStatus> {
        // SAFETY: kill(2) on our own child's pid has no memory effects.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait()? {
                if !s.success() {
                    bail!(
                        "unmask serve exited with {s}: {}",
                        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
                    );
                }
                return Ok(s);
            }
            if t0.elapsed() > limit {
                let _ = self.child.kill();
                bail!("unmask serve did not stop within {limit:?} of SIGTERM");
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

/// A server that the load SIGKILLs at a set time.
struct KillSwitch {
    server: Mutex<Option<Server>>,
    url: String,
}

impl KillSwitch {
    fn new(server: Server) -> Self {
        let url = server.url.clone();
        KillSwitch { server: Mutex::new(Some(server)), url }
    }
    fn url(&self) -> String {
        self.url.clone()
    }
    fn kill(&self) {
        if let Ok(mut s) = self.server.lock() {
            if let Some(mut server) = s.take() {
                let _ = server.child.kill();
                let _ = server.child.wait();
            }
        }
    }
    fn was_killed(&self) -> bool {
        self.server.lock().map(|s| s.is_none()).unwrap_or(false)
    }
}

/// How a load runs.
struct Plan {
    clients: usize,
    seconds: f64,
    /// Chance that a request's client hangs up at a random moment of its stream.
    drop_chance: f64,
    /// SIGKILL the server this long into the load.
    kill_after_s: Option<f64>,
}

/// How a request ended, as its client saw it.
#[derive(Debug, Clone, PartialEq)]
enum Outcome {
    Completed,
    /// 429: the queue was full.
    Rejected,
    /// The client hung up on purpose.
    Dropped,
    /// The server was killed under it (fault run).
    ServerGone,
    Error(String),
}

/// One request.
#[derive(Debug, Clone)]
struct Sample {
    prompt: String,
    outcome: Outcome,
    run_id: Option<i64>,
    text: String,
    ttft_ms: Option<f64>,
    total_ms: f64,
    /// When it ended, seconds since the load started.
    ended_s: f64,
}

/// A unique question per request number.
fn prompt_for(k: u64) -> String {
    let a = 100 + k % 900;
    let b = 100 + (k / 900 + 7 * (k % 900)) % 900;
    format!("What is {a}+{b}?")
}

/// SplitMix64: reproducible "random" drops without a dependency.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn unit(x: u64) -> f64 {
    (mix(x) >> 11) as f64 / (1u64 << 53) as f64
}

/// Runs `plan` and returns every request's sample.
async fn drive(
    http: &reqwest::Client,
    url: &str,
    plan: &Plan,
    counter: &Arc<AtomicU64>,
    killer: Option<&KillSwitch>,
) -> Vec<Sample> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(plan.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..plan.clients {
        let (http, url, counter) = (http.clone(), url.to_owned(), counter.clone());
        let drop_chance = plan.drop_chance;
        let kills = killer.is_some();
        tasks.spawn(async move {
            let mut samples = Vec::new();
            while Instant::now() < deadline {
                let k = counter.fetch_add(1, Ordering::Relaxed);
                // Half the hang-ups come while the request may still wait in the queue, half while
                // its run decodes (tiny-llada takes about 0.2 s per answer).
                let drop = (unit(k) < drop_chance).then(|| HangUp {
                    after_start: unit(k ^ 0x5EED) < 0.5,
                    delay: Duration::from_secs_f64(0.25 * unit(k ^ 0xD1B5)),
                });
                let mut s = request(&http, &url, prompt_for(k), drop, start).await;
                if s.outcome == Outcome::ServerGone && !kills {
                    // Without a planned kill, losing the server is an error like any other.
                    s.outcome = Outcome::Error("the server was unreachable or closed the stream".into());
                    s.sample.outcome = s.outcome.clone();
                }
                let (outcome, retry) = (s.outcome.clone(), s.retry_after);
                samples.push(s.sample);
                match outcome {
                    Outcome::Rejected => {
                        let wait = Duration::from_secs(retry.unwrap_or(1))
                            .min(deadline.saturating_duration_since(Instant::now()));
                        tokio::time::sleep(wait).await;
                    }
                    // The server is gone: this client is done.
                    Outcome::ServerGone => break,
                    _ => {}
                }
            }
            samples
        });
    }
    if let (Some(k), Some(after)) = (killer, plan.kill_after_s) {
        tokio::time::sleep(Duration::from_secs_f64(after)).await;
        k.kill();
    }
    let mut out = Vec::new();
    while let Some(r) = tasks.join_next().await {
        if let Ok(samples) = r {
            out.extend(samples);
        }
    }
    out
}

/// When a client hangs up: `delay` after its response headers, or after its run started.
#[derive(Debug, Clone, Copy)]
struct HangUp {
    after_start: bool,
    delay: Duration,
}

struct Requested {
    sample: Sample,
    outcome: Outcome,
    retry_after: Option<u64>,
}

/// One streamed chat completion.
async fn request(
    http: &reqwest::Client,
    url: &str,
    prompt: String,
    hang_up: Option<HangUp>,
    start: Instant,
) -> Requested {
    let t0 = Instant::now();
    let body = json!({ "model": served_model(), "stream": true, "messages": [{ "role": "user", "content": prompt }] });
    let mut sample = Sample {
        prompt,
        outcome: Outcome::Completed,
        run_id: None,
        text: String::new(),
        ttft_ms: None,
        total_ms: 0.0,
        ended_s: 0.0,
    };
    let mut retry_after = None;
    let read = async {
        let resp = http
            .post(format!("{url}/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() || e.is_request() {
                    Outcome::ServerGone
                } else {
                    Outcome::Error(e.to_string())
                }
            })?;
        if resp.status() == reqwest::StatusCode::TOO_MANY_REQUESTS {
            retry_after = resp.headers().get("retry-after").and_then(|v| v.to_str().ok()).and_then(|v| v.parse().ok());
            return Err(Outcome::Rejected);
        }
        if !resp.status().is_success() {
            let status = resp.status();
            return Err(Outcome::Error(format!("{status}: {}", resp.text().await.unwrap_or_default())));
        }
        let mut resp = resp;
        let mut buf = String::new();
        let mut drop_at = hang_up.filter(|h| !h.after_start).map(|h| tokio::time::Instant::now() + h.delay);
        loop {
            let chunk = match drop_at {
                Some(at) => match tokio::time::timeout_at(at, resp.chunk()).await {
                    Ok(c) => c,
                    // Hang up mid-stream (dropping the response closes the connection).
                    Err(_) => return Err(Outcome::Dropped),
                },
                None => resp.chunk().await,
            };
            let chunk = match chunk {
                Ok(Some(c)) => c,
                Ok(None) => return Err(Outcome::Error("the stream ended without [DONE]".into())),
                Err(_) => return Err(Outcome::ServerGone),
            };
            buf.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = buf.find("\n\n") {
                let event: String = buf.drain(..end + 2).collect();
                for data in event.lines().filter_map(|l| l.strip_prefix("data: ")) {
                    if data == "[DONE]" {
                        return Ok(());
                    }
                    let v: Value =
                        serde_json::from_str(data).map_err(|e| Outcome::Error(format!("bad chunk ({e}): {data}")))?;
                    if let Some(e) = v.get("error") {
                        return Err(Outcome::Error(e.to_string()));
                    }
                    if let Some(id) = v["unmask"]["run_id"].as_i64() {
                        if sample.run_id.is_none() {
                            drop_at = hang_up
                                .filter(|h| h.after_start)
                                .map(|h| tokio::time::Instant::now() + h.delay)
                                .or(drop_at);
                        }
                        sample.run_id = Some(id);
                    }
                    if let Some(t) = v["choices"][0]["delta"]["content"].as_str() {
                        if !t.is_empty() && sample.ttft_ms.is_none() {
                            sample.ttft_ms = Some(t0.elapsed().as_secs_f64() * 1e3);
                        }
                        sample.text.push_str(t);
                    }
                }
            }
        }
    };
    let outcome = match tokio::time::timeout(REQUEST_LIMIT, read).await {
        Ok(Ok(())) => Outcome::Completed,
        Ok(Err(o)) => o,
        Err(_) => Outcome::Error(format!("no answer within {REQUEST_LIMIT:?}")),
    };
    sample.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    sample.ended_s = start.elapsed().as_secs_f64();
    sample.outcome = outcome.clone();
    Requested { sample, outcome, retry_after }
}

/// Nearest-rank percentiles of a set of milliseconds.
#[derive(Debug, Clone, Copy, Default)]
struct Percentiles {
    p50: Option<f64>,
    p99: Option<f64>,
    mean: Option<f64>,
}

impl Percentiles {
    fn of(mut v: Vec<f64>) -> Self {
        if v.is_empty() {
            return Percentiles::default();
        }
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1];
        Percentiles { p50: Some(at(0.50)), p99: Some(at(0.99)), mean: Some(v.iter().sum::<f64>() / v.len() as f64) }
    }
    fn to_json(self) -> Value {
        json!({ "p50": self.p50, "p99": self.p99, "mean": self.mean })
    }
}

/// Figures of one load level.
struct Level {
    clients: usize,
    completed: usize,
    rejected: usize,
    dropped: usize,
    server_gone: usize,
    errors: usize,
    error_examples: Vec<String>,
    rps: f64,
    ttft: Percentiles,
    latency: Percentiles,
    /// The engine's decode time per run, from the store (is concurrency slowing the engine?).
    engine_ms: Percentiles,
}

impl Level {
    fn of(clients: usize, samples: &[Sample]) -> Level {
        let count = |o: &Outcome| samples.iter().filter(|s| &s.outcome == o).count();
        let done: Vec<&Sample> = samples.iter().filter(|s| s.outcome == Outcome::Completed).collect();
        let span = samples.iter().map(|s| s.ended_s).fold(0.0, f64::max);
        let errors: Vec<String> = samples
            .iter()
            .filter_map(|s| if let Outcome::Error(e) = &s.outcome { Some(e.clone()) } else { None })
            .collect();
        Level {
            clients,
            completed: done.len(),
            rejected: count(&Outcome::Rejected),
            dropped: count(&Outcome::Dropped),
            server_gone: count(&Outcome::ServerGone),
            errors: errors.len(),
            error_examples: errors.into_iter().take(5).collect(),
            rps: if span > 0.0 { done.len() as f64 / span } else { 0.0 },
            ttft: Percentiles::of(done.iter().filter_map(|s| s.ttft_ms).collect()),
            latency: Percentiles::of(done.iter().map(|s| s.total_ms).collect()),
            engine_ms: Percentiles::default(),
        }
    }
    fn summary(&self) -> String {
        let ms = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.0}"));
        format!(
            "{} completed ({:.2}/s), {} rejected (429), {} dropped, {} server gone, {} errors; ttft p50 {} / p99 {} ms; latency p50 {} / p99 {} ms",
            self.completed, self.rps, self.rejected, self.dropped, self.server_gone, self.errors,
            ms(self.ttft.p50), ms(self.ttft.p99), ms(self.latency.p50), ms(self.latency.p99)
        )
    }
    fn to_json(&self) -> Value {
        json!({
            "clients": self.clients,
            "completed": self.completed,
            "requests_per_s": self.rps,
            "rejected_429": self.rejected,
            "dropped_by_client": self.dropped,
            "server_gone": self.server_gone,
            "errors": self.errors,
            "error_examples": self.error_examples,
            "ttft_ms": self.ttft.to_json(),
            "latency_ms": self.latency.to_json(),
            "engine_decode_ms_per_run": self.engine_ms.to_json(),
            "ms_per_completed_request": if self.rps > 0.0 { Some(1e3 / self.rps) } else { None },
        })
    }
}

/// What the store holds against what the clients saw.
#[derive(Debug, Default)]
struct StoreCheck {
    rows: usize,
    known_to_clients: usize,
    by_status: HashMap<String, usize>,
    /// Runs a client learnt of that are missing, stuck `running`, or in a status that contradicts
    /// what the client saw (e.g. the client got its answer but the run is not completed).
    lost: usize,
    /// Requests recorded more than once (same unique prompt in several rows, or one run id
    /// reported to two clients).
    duplicated: usize,
    /// Rows no client learnt of (hung up or killed before the first chunk): allowed only as
    /// cancelled/interrupted and at most as many as such requests.
    unknown_rows: usize,
    integrity_ok: bool,
    problems: Vec<String>,
    /// Decode wall time of each run, seconds.
    wall_s: HashMap<i64, f64>,
}

impl StoreCheck {
    fn summary(&self) -> String {
        format!(
            "{} runs ({:?}), {} known to clients, {} lost, {} duplicated, {} unknown to clients, integrity {}",
            self.rows,
            self.by_status,
            self.known_to_clients,
            self.lost,
            self.duplicated,
            self.unknown_rows,
            if self.integrity_ok { "ok" } else { "FAILED" }
        )
    }
    fn to_json(&self) -> Value {
        json!({
            "rows": self.rows,
            "known_to_clients": self.known_to_clients,
            "by_status": self.by_status,
            "lost": self.lost,
            "duplicated": self.duplicated,
            "unknown_to_clients": self.unknown_rows,
            "integrity_ok": self.integrity_ok,
            "problems": self.problems.iter().take(20).collect::<Vec<_>>(),
        })
    }
}

/// Opens the data folder (after the server stopped; recovery runs here too) and checks it.
/// Checks the store against what the clients saw. `killed_at_s`: when the server was SIGKILLed
/// (seconds into the load). A client that hung up may find its run `interrupted` when the kill
/// came before the server noticed: the server learns of a hang-up only when it next writes to
/// the stream, which for this model can be the run's end (its first answer text comes late), so
/// a hang-up up to the longest time a completed request of the same load took before the kill
/// qualifies, and so does one after the kill (its timer fired before it saw the dead server).
async fn check_store(dir: &Path, samples: &[Sample], killed_at_s: Option<f64>) -> Result<StoreCheck> {
    let race_s =
        samples.iter().filter(|s| s.outcome == Outcome::Completed).map(|s| s.total_ms / 1e3).fold(0.0, f64::max);
    let store = Store::open(dir.to_owned()).await.context("opening the store")?;
    let integrity_ok = store.integrity_check().await.is_ok();
    let rows = store.recent_runs(u32::MAX, 0).await.context("reading the runs")?;
    store.close().await;
    let mut c = StoreCheck { rows: rows.len(), integrity_ok, ..Default::default() };
    c.wall_s = rows.iter().filter_map(|r| Some((r.id, r.metrics.wall_s?))).collect();
    let by_id: HashMap<i64, _> = rows.iter().map(|r| (r.id, r)).collect();
    let mut prompts: HashMap<&str, usize> = HashMap::new();
    for r in &rows {
        *c.by_status.entry(r.status.as_str().to_owned()).or_default() += 1;
        *prompts.entry(r.prompt.as_str()).or_default() += 1;
        if r.status == RunStatus::Running {
            c.lost += 1;
            c.problems.push(format!("run {} is still running", r.id));
        }
    }
    c.duplicated += prompts.values().filter(|&&n| n > 1).map(|n| n - 1).sum::<usize>();
    let mut seen = HashSet::new();
    for s in samples {
        let Some(id) = s.run_id else { continue };
        if !seen.insert(id) {
            c.duplicated += 1;
            c.problems.push(format!("run {id} was reported to two requests"));
            continue;
        }
        let Some(r) = by_id.get(&id) else {
            c.lost += 1;
            c.problems.push(format!("run {id} ({:?}) is not in the store", s.outcome));
            continue;
        };
        let fits = match &s.outcome {
            Outcome::Completed => r.status == RunStatus::Completed && r.output.as_deref() == Some(s.text.as_str()),
            Outcome::Dropped => {
                matches!(r.status, RunStatus::Cancelled | RunStatus::Completed)
                    || r.status == RunStatus::Interrupted && killed_at_s.is_some_and(|k| s.ended_s >= k - race_s)
            }
            Outcome::ServerGone => {
                matches!(r.status, RunStatus::Interrupted | RunStatus::Completed | RunStatus::Cancelled)
            }
            Outcome::Rejected | Outcome::Error(_) => r.status != RunStatus::Running,
        };
        if !fits {
            c.lost += 1;
            c.problems.push(format!(
                "run {id}: the client saw {:?} {:?}, the store has {:?} {:?}",
                s.outcome, s.text, r.status, r.output
            ));
        }
        if r.prompt != s.prompt {
            c.lost += 1;
            c.problems.push(format!("run {id} has the prompt {:?}, its request sent {:?}", r.prompt, s.prompt));
        }
    }
    c.known_to_clients = seen.len();
    // Rows nobody heard of: requests that hung up or lost the server before their first chunk.
    let unknown: Vec<_> = rows.iter().filter(|r| !seen.contains(&r.id)).collect();
    c.unknown_rows = unknown.len();
    let may_be_unknown = samples
        .iter()
        .filter(|s| s.run_id.is_none() && matches!(s.outcome, Outcome::Dropped | Outcome::ServerGone))
        .count();
    let bad_unknown =
        unknown.iter().filter(|r| !matches!(r.status, RunStatus::Cancelled | RunStatus::Interrupted)).count();
    if bad_unknown > 0 || unknown.len() > may_be_unknown {
        let extra = bad_unknown.max(unknown.len().saturating_sub(may_be_unknown));
        c.lost += extra;
        c.problems.push(format!("{} runs no client knows of ({bad_unknown} not cancelled/interrupted; {may_be_unknown} requests could explain them)", unknown.len()));
    }
    if !integrity_ok {
        c.problems.push("PRAGMA integrity_check failed".into());
    }
    Ok(c)
}

/// Runs tests/serve/openai_client_test.py with the official `openai` package against a fresh
/// server; `passed` is null when the package cannot be installed (no PyPI).
fn openai_client_tests(root: &Path, unmask: &Path) -> Result<Value> {
    let python = match openai_python(unmask) {
        Ok(p) => p,
        Err(why) => return Ok(json!({ "passed": null, "skipped": why })),
    };
    let dir = tempfile::tempdir()?;
    let server = Server::start(unmask, dir.path(), &["--api-key", "bench-key"])?;
    let out = Command::new(&python)
        .arg(root.join("tests/serve/openai_client_test.py"))
        .env("UNMASK_SERVE_URL", format!("{}/v1", server.url))
        .env("UNMASK_SERVE_KEY", "bench-key")
        .env(MODEL_ENV, served_model())
        .output()
        .context("running the openai client tests")?;
    server.terminate(Duration::from_secs(60))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = stdout
        .lines()
        .find_map(|l| l.strip_prefix("openai-client-tests: "))
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .with_context(|| {
            format!("no summary from the openai client tests: {stdout}{}", String::from_utf8_lossy(&out.stderr))
        })?;
    Ok(summary)
}

/// The virtual environment with `openai` that `cargo test -p unmask-cli --test serve` makes
/// (target/tmp/openai-venv), made here if missing.
fn openai_python(unmask: &Path) -> std::result::Result<PathBuf, String> {
    let target = unmask.parent().and_then(Path::parent).ok_or("no target folder")?;
    let venv = target.join("tmp/openai-venv");
    let python = venv.join("bin/python");
    let has = |py: &Path| {
        Command::new(py).args(["-c", "import openai"]).stderr(Stdio::null()).status().is_ok_and(|s| s.success())
    };
    if has(&python) {
        return Ok(python);
    }
    let made =
        Command::new("python3").args(["-m", "venv", "--clear"]).arg(&venv).output().map_err(|e| e.to_string())?;
    if !made.status.success() {
        return Err(format!("python3 -m venv failed: {}", String::from_utf8_lossy(&made.stderr).trim()));
    }
    let pip = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "openai>=1"])
        .output()
        .map_err(|e| e.to_string())?;
    if !pip.status.success() || !has(&python) {
        return Err(format!("pip could not install openai: {}", String::from_utf8_lossy(&pip.stderr).trim()));
    }
    Ok(python)
}
