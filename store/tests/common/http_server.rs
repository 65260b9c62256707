//! A small HTTP/1.1 file server for the download tests: serves real bytes under a Hugging
//! Face-style layout and injects faults per request (dropped connections, stalls, slow bodies,
//! 5xx statuses, corrupt bytes, no Range support, LFS-style redirects).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// One injected fault, used by the next request for its file.
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub enum Fault {
    /// Send the headers (full length) and `n` body bytes, then close the connection.
    DropAfter(usize),
    /// Send `n` body bytes, then go silent for `d`, then close.
    StallAfter(usize, Duration),
    /// Send the body in `chunk`-byte pieces with `delay` between them.
    Slow { chunk: usize, delay: Duration },
    /// Answer with this status and no body.
    Status(u16),
    /// Flip one byte of the body (headers stay correct).
    Corrupt,
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub struct Logged {
    pub path: String,
    pub range_start: Option<u64>,
    pub status: u16,
    pub body_bytes: usize,
}

struct Served {
    bytes: Arc<Vec<u8>>,
    /// What X-Linked-Etag claims (the sha256, or a wrong one).
    advertised_sha: Option<String>,
    etag: String,
    ranges: bool,
    /// Answer the resolve URL with a 302 to `/cdn/...` (the Hub's LFS behaviour).
    redirect: bool,
}

#[derive(Default)]
struct State {
    files: HashMap<String, Served>,
    faults: HashMap<String, VecDeque<Fault>>,
    log: Vec<Logged>,
}

/// The running server (stops when dropped).
pub struct TestServer {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[allow(dead_code)]
pub fn sha256_hex(b: &[u8]) -> String {
    Sha256::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

#[allow(dead_code)]
impl TestServer {
    pub async fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let st = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else { continue };
                let st = st.clone();
                tokio::spawn(async move {
                    let _ = handle(sock, st).await;
                });
            }
        });
        TestServer { addr, state, task }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn key(repo: &str, rev: &str, file: &str) -> String {
        format!("/{repo}/resolve/{rev}/{file}")
    }

    /// Serves `bytes` as `file` of `repo@rev`, advertising its true sha256.
    pub fn add(&self, repo: &str, rev: &str, file: &str, bytes: Vec<u8>) {
        let sha = sha256_hex(&bytes);
        self.state.lock().unwrap().files.insert(
            Self::key(repo, rev, file),
            Served {
                etag: sha.clone(),
                advertised_sha: Some(sha),
                bytes: Arc::new(bytes),
                ranges: true,
                redirect: false,
            },
        );
    }

    /// Serves every file of a local folder (top level) under `repo@rev`.
    pub fn add_dir(&self, repo: &str, rev: &str, dir: &std::path::Path, names: &[&str]) {
        for n in names {
            self.add(repo, rev, n, std::fs::read(dir.join(n)).unwrap());
        }
    }

    pub fn set_advertised_sha(&self, repo: &str, rev: &str, file: &str, sha: Option<&str>) {
        let mut s = self.state.lock().unwrap();
        let f = s.files.get_mut(&Self::key(repo, rev, file)).expect("file served");
        f.advertised_sha = sha.map(str::to_owned);
        // A plain (non-LFS) file's ETag is not a sha256.
        f.etag = "not-a-sha".into();
    }

    pub fn set_ranges(&self, repo: &str, rev: &str, file: &str, ranges: bool) {
        self.state.lock().unwrap().files.get_mut(&Self::key(repo, rev, file)).expect("file served").ranges = ranges;
    }

    pub fn set_redirect(&self, repo: &str, rev: &str, file: &str, redirect: bool) {
        self.state.lock().unwrap().files.get_mut(&Self::key(repo, rev, file)).expect("file served").redirect = redirect;
    }

    /// Replaces a file's bytes (a new upload: new ETag).
    pub fn replace(&self, repo: &str, rev: &str, file: &str, bytes: Vec<u8>) {
        self.add(repo, rev, file, bytes);
    }

    pub fn push_fault(&self, repo: &str, rev: &str, file: &str, fault: Fault) {
        self.state.lock().unwrap().faults.entry(Self::key(repo, rev, file)).or_default().push_back(fault);
    }

    /// Requests so far for `file` (by the resolve path, redirects included).
    pub fn requests(&self, repo: &str, rev: &str, file: &str) -> Vec<Logged> {
        let key = Self::key(repo, rev, file);
        let cdn = format!("/cdn{key}");
        self.state.lock().unwrap().log.iter().filter(|l| l.path == key || l.path == cdn).cloned().collect()
    }
}

async fn read_head(sock: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1024];
    loop {
        let n = sock.read(&mut byte).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&byte[..n]);
        if buf.windows(4).any(|w| w == b"\r\n\r\n") || buf.len() > 64 * 1024 {
            return Ok(Some(String::from_utf8_lossy(&buf).into_owned()));
        }
    }
}

async fn handle(mut sock: TcpStream, state: Arc<Mutex<State>>) -> std::io::Result<()> {
    let Some(head) = read_head(&mut sock).await? else { return Ok(()) };
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let path = request_line.split(' ').nth(1).unwrap_or("/").to_owned();
    let mut headers = HashMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
        }
    }
    let (key, via_cdn) = match path.strip_prefix("/cdn") {
        Some(k) => (k.to_owned(), true),
        None => (path.clone(), false),
    };
    let range_start: Option<u64> = headers
        .get("range")
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse().ok());

    enum Plan {
        Status(u16),
        Redirect { sha: Option<String>, size: usize },
        Body { bytes: Arc<Vec<u8>>, etag: String, sha: Option<String>, start: usize, fault: Option<Fault> },
    }
    let plan = {
        let mut st = state.lock().unwrap();
        match st.files.get(&key) {
            None => Plan::Status(404),
            Some(f) if f.redirect && !via_cdn => Plan::Redirect { sha: f.advertised_sha.clone(), size: f.bytes.len() },
            Some(f) => {
                let (bytes, etag, sha, ranges) = (f.bytes.clone(), f.etag.clone(), f.advertised_sha.clone(), f.ranges);
                let fault = st.faults.get_mut(&key).and_then(|q| q.pop_front());
                match fault {
                    Some(Fault::Status(s)) => Plan::Status(s),
                    fault => {
                        let if_range_ok = headers.get("if-range").is_none_or(|v| v.trim_matches('"') == etag);
                        let start = match range_start {
                            Some(s) if ranges && if_range_ok => s as usize,
                            _ => 0,
                        };
                        if start > bytes.len() {
                            Plan::Status(416)
                        } else {
                            Plan::Body { bytes, etag, sha: if via_cdn { None } else { sha }, start, fault }
                        }
                    }
                }
            }
        }
    };
    let log = |status: u16, body_bytes: usize| {
        state.lock().unwrap().log.push(Logged { path: path.clone(), range_start, status, body_bytes });
    };
    match plan {
        Plan::Status(s) => {
            log(s, 0);
            let head = format!("HTTP/1.1 {s} Status\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
            sock.write_all(head.as_bytes()).await?;
        }
        Plan::Redirect { sha, size } => {
            log(302, 0);
            let mut head = format!("HTTP/1.1 302 Found\r\nLocation: /cdn{key}\r\nX-Linked-Size: {size}\r\n");
            if let Some(s) = sha {
                head.push_str(&format!("X-Linked-Etag: \"{s}\"\r\n"));
            }
            head.push_str("Content-Length: 0\r\nConnection: close\r\n\r\n");
            sock.write_all(head.as_bytes()).await?;
        }
        Plan::Body { bytes, etag, sha, start, fault } => {
            let total = bytes.len();
            let status = if start > 0 { 206 } else { 200 };
            let mut head = format!(
                "HTTP/1.1 {status} {}\r\nContent-Length: {}\r\nETag: \"{etag}\"\r\nAccept-Ranges: bytes\r\nConnection: close\r\n",
                if status == 206 { "Partial Content" } else { "OK" },
                total - start
            );
            if status == 206 {
                head.push_str(&format!("Content-Range: bytes {start}-{}/{total}\r\n", total.saturating_sub(1)));
            }
            if let Some(s) = sha {
                head.push_str(&format!("X-Linked-Etag: \"{s}\"\r\nX-Linked-Size: {total}\r\n"));
            }
            head.push_str("\r\n");
            sock.write_all(head.as_bytes()).await?;
            let mut body: Vec<u8> = bytes[start..].to_vec();
            let planned = match &fault {
                Some(Fault::DropAfter(n)) | Some(Fault::StallAfter(n, _)) => (*n).min(body.len()),
                _ => body.len(),
            };
            // Logged before the body: a client that hangs up mid-body still shows in the log.
            log(status, planned);
            match fault {
                Some(Fault::DropAfter(n)) => {
                    let n = n.min(body.len());
                    sock.write_all(&body[..n]).await?;
                }
                Some(Fault::StallAfter(n, d)) => {
                    let n = n.min(body.len());
                    sock.write_all(&body[..n]).await?;
                    sock.flush().await?;
                    tokio::time::sleep(d).await;
                }
                Some(Fault::Slow { chunk, delay }) => {
                    for c in body.chunks(chunk.max(1)) {
                        sock.write_all(c).await?;
                        sock.flush().await?;
                        tokio::time::sleep(delay).await;
                    }
                }
                Some(Fault::Corrupt) => {
                    let mid = body.len() / 2;
                    if let Some(b) = body.get_mut(mid) {
                        *b ^= 0xff;
                    }
                    sock.write_all(&body).await?;
                }
                _ => sock.write_all(&body).await?,
            }
        }
    }
    sock.flush().await?;
    let _ = sock.shutdown().await;
    Ok(())
}
