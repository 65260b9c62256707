//! A tiny HTTP/1.1 file server for download tests: serves `root/<file>` at
//! `/<repo>/resolve/<revision>/<file>` (any revision) with `Range: bytes=N-` support, optionally
//! throttled, and records the paths and `Range` headers it saw.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A running server.
pub struct FileServer {
    pub base_url: String,
    pub ranges: Arc<Mutex<Vec<String>>>,
    requested: Arc<Mutex<Vec<String>>>,
}

impl FileServer {
    /// Request paths so far.
    pub fn paths(&self) -> Vec<String> {
        self.requested.lock().expect("paths").clone()
    }
}

/// Starts serving `root`; `throttle` = (chunk bytes, pause per chunk) for large bodies.
pub async fn serve(root: PathBuf, throttle: Option<(usize, Duration)>) -> FileServer {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let ranges = Arc::new(Mutex::new(Vec::new()));
    let requested = Arc::new(Mutex::new(Vec::new()));
    let (seen, asked) = (ranges.clone(), requested.clone());
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else { return };
            let root = root.clone();
            let (seen, asked) = (seen.clone(), asked.clone());
            tokio::spawn(async move {
                let _ = handle(sock, root, throttle, seen, asked).await;
            });
        }
    });
    FileServer { base_url: format!("http://{addr}"), ranges, requested }
}

async fn handle(
    mut sock: TcpStream,
    root: PathBuf,
    throttle: Option<(usize, Duration)>,
    seen: Arc<Mutex<Vec<String>>>,
    asked: Arc<Mutex<Vec<String>>>,
) -> std::io::Result<()> {
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = sock.read(&mut tmp).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&tmp[..n]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let mut lines = head.lines();
    let target = lines.next().and_then(|l| l.split_whitespace().nth(1)).unwrap_or("/").to_owned();
    asked.lock().expect("paths").push(target.clone());
    let mut from = 0usize;
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            if k.eq_ignore_ascii_case("range") {
                seen.lock().expect("ranges").push(v.trim().to_owned());
                from = v.trim().trim_start_matches("bytes=").trim_end_matches('-').parse().unwrap_or(0);
            }
        }
    }
    let file = target.split("/resolve/").nth(1).and_then(|rest| rest.split_once('/')).map_or("", |(_, f)| f);
    let body = if file.is_empty() || file.contains("..") { None } else { std::fs::read(root.join(file)).ok() };
    let Some(body) = body else {
        sock.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").await?;
        return Ok(());
    };
    let total = body.len();
    let from = from.min(total);
    let header = if from > 0 {
        format!(
            "HTTP/1.1 206 Partial Content\r\nContent-Length: {}\r\nContent-Range: bytes {from}-{}/{total}\r\nConnection: close\r\n\r\n",
            total - from,
            total.saturating_sub(1)
        )
    } else {
        format!("HTTP/1.1 200 OK\r\nContent-Length: {total}\r\nConnection: close\r\n\r\n")
    };
    sock.write_all(header.as_bytes()).await?;
    match throttle {
        Some((chunk, pause)) if total > chunk => {
            for part in body[from..].chunks(chunk) {
                sock.write_all(part).await?;
                tokio::time::sleep(pause).await;
            }
        }
        _ => sock.write_all(&body[from..]).await?,
    }
    sock.flush().await
}
