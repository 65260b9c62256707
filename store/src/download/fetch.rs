//! Downloading one file: `.part` file plus a JSON sidecar (URL, ETag, size) so a later call
//! resumes only the same file; `Range: bytes=N-` with a 206 check (a 200 restarts from zero);
//! retries with capped exponential backoff; stall detection; cancellation; size and SHA-256
//! checked before an atomic rename into place.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, ETAG, IF_RANGE, LOCATION, RANGE};
use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::{DownloadConfig, DownloadEvent};
use crate::error::{Result, StoreError};
use crate::hashing;

/// What the caller knows about a file before downloading it.
#[derive(Debug, Clone, Default)]
pub(crate) struct Expected {
    pub size: Option<u64>,
    pub sha256: Option<String>,
}

/// A verified file in place.
#[derive(Debug, Clone)]
pub(crate) struct Fetched {
    pub size: u64,
    pub sha256: String,
}

/// How a fetch of a file ended, when it did not succeed.
#[derive(Debug)]
pub(crate) enum FetchError {
    /// 404: the file does not exist (optional files are skipped).
    NotFound,
    Other(StoreError),
}

impl From<StoreError> for FetchError {
    fn from(e: StoreError) -> Self {
        FetchError::Other(e)
    }
}

/// Sidecar of a `.part` file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
struct PartMeta {
    url: String,
    etag: Option<String>,
    total: Option<u64>,
}

/// Progress context shared by the files of one download.
pub(crate) struct Progress<'a> {
    pub emit: &'a mut (dyn FnMut(DownloadEvent) + Send),
    /// Bytes of earlier files of this download.
    pub done_before: u64,
    /// Total of all files, if every size is known up front.
    pub total: Option<u64>,
}

enum AttemptError {
    /// Worth retrying (network error, 5xx, early EOF, stall).
    Retry {
        reason: String,
        stalled: bool,
    },
    /// Bytes arrived but do not hash to the expected value.
    Checksum {
        expected: String,
        actual: String,
    },
    Fatal(FetchError),
}

impl From<StoreError> for AttemptError {
    fn from(e: StoreError) -> Self {
        AttemptError::Fatal(FetchError::Other(e))
    }
}

/// The partial file being written.
struct Part {
    path: PathBuf,
    meta_path: PathBuf,
    meta: Option<PartMeta>,
    have: u64,
    hasher: Sha256,
}

impl Part {
    /// Opens the `.part` of `dest` for `url`: resumes it when its sidecar names the same URL,
    /// otherwise discards it.
    async fn open(dest: &Path, url: &str) -> Result<Part> {
        let path = with_suffix(dest, ".part");
        let meta_path = with_suffix(dest, ".part.json");
        let meta: Option<PartMeta> = std::fs::read(&meta_path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .filter(|m: &PartMeta| m.url == url);
        let mut part = Part { path, meta_path, meta, have: 0, hasher: Sha256::new() };
        if part.meta.is_some() && part.path.exists() {
            // Hash what is already there so the final checksum covers the whole file.
            let p = part.path.clone();
            let (have, hasher) = tokio::task::spawn_blocking(move || -> Result<(u64, Sha256)> {
                let mut f = std::fs::File::open(&p).map_err(|e| StoreError::io(&p, e))?;
                let mut h = Sha256::new();
                let mut buf = vec![0u8; 1 << 20];
                let mut n = 0u64;
                loop {
                    let k = f.read(&mut buf).map_err(|e| StoreError::io(&p, e))?;
                    if k == 0 {
                        break;
                    }
                    h.update(&buf[..k]);
                    n += k as u64;
                }
                Ok((n, h))
            })
            .await
            .map_err(|e| StoreError::Internal(format!("hash task: {e}")))??;
            part.have = have;
            part.hasher = hasher;
        } else {
            part.discard()?;
        }
        Ok(part)
    }

    fn discard(&mut self) -> Result<()> {
        for p in [&self.path, &self.meta_path] {
            match std::fs::remove_file(p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(StoreError::io(p, e)),
            }
        }
        self.meta = None;
        self.have = 0;
        self.hasher = Sha256::new();
        Ok(())
    }

    fn save_meta(&mut self, meta: PartMeta) -> Result<()> {
        if self.meta.as_ref() != Some(&meta) {
            let bytes = serde_json::to_vec(&meta).map_err(|e| StoreError::Internal(e.to_string()))?;
            std::fs::write(&self.meta_path, bytes).map_err(|e| StoreError::io(&self.meta_path, e))?;
            self.meta = Some(meta);
        }
        Ok(())
    }
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    PathBuf::from(s)
}

/// An ETag or `X-Linked-Etag` value without quotes and weak marker.
fn clean_etag(v: &str) -> String {
    v.trim().trim_start_matches("W/").trim_matches('"').to_owned()
}

fn header_str(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
}

/// Response headers and the final response after following redirects by hand (so the
/// `X-Linked-*` headers of the first hop, where the Hub puts the LFS sha256 and size, are kept).
struct Opened {
    resp: reqwest::Response,
    linked_sha256: Option<String>,
    linked_size: Option<u64>,
}

async fn send(
    client: &reqwest::Client,
    cfg: &DownloadConfig,
    url: &str,
    range_from: u64,
    if_range: Option<&str>,
) -> std::result::Result<Opened, AttemptError> {
    let endpoint_host = reqwest::Url::parse(&cfg.endpoint).ok().and_then(|u| u.host_str().map(str::to_owned));
    let mut current = reqwest::Url::parse(url)
        .map_err(|e| AttemptError::Fatal(StoreError::InvalidRequest(format!("bad URL {url}: {e}")).into()))?;
    let (mut linked_sha256, mut linked_size) = (None, None);
    for _hop in 0..6 {
        let mut req = client.get(current.clone());
        if range_from > 0 {
            req = req.header(RANGE, format!("bytes={range_from}-"));
            if let Some(tag) = if_range {
                req = req.header(IF_RANGE, format!("\"{tag}\""));
            }
        }
        // The token goes only to the endpoint's host, never to a CDN it redirects to.
        if let (Some(token), Some(host)) = (&cfg.token, &endpoint_host) {
            if current.host_str() == Some(host.as_str()) {
                req = req.header(AUTHORIZATION, format!("Bearer {token}"));
            }
        }
        let resp = match tokio::time::timeout(cfg.stall_timeout, req.send()).await {
            Err(_) => return Err(AttemptError::Retry { reason: "no response headers in time".into(), stalled: true }),
            Ok(Err(e)) => return Err(AttemptError::Retry { reason: format!("request failed: {e}"), stalled: false }),
            Ok(Ok(r)) => r,
        };
        let h = resp.headers();
        if let Some(s) = header_str(h, "x-linked-etag").map(|v| clean_etag(&v)).filter(|s| hashing::is_sha256_hex(s)) {
            linked_sha256 = Some(s.to_ascii_lowercase());
        }
        if let Some(n) = header_str(h, "x-linked-size").and_then(|v| v.trim().parse().ok()) {
            linked_size = Some(n);
        }
        if resp.status().is_redirection() {
            let loc = header_str(resp.headers(), LOCATION.as_str()).ok_or_else(|| AttemptError::Retry {
                reason: format!("HTTP {} without Location", resp.status().as_u16()),
                stalled: false,
            })?;
            current = current.join(&loc).map_err(|e| {
                AttemptError::Fatal(
                    StoreError::Download { url: url.into(), reason: format!("bad redirect {loc}: {e}") }.into(),
                )
            })?;
            continue;
        }
        return Ok(Opened { resp, linked_sha256, linked_size });
    }
    Err(AttemptError::Fatal(StoreError::Download { url: url.into(), reason: "too many redirects".into() }.into()))
}

/// Downloads `url` to `dest` (resuming a matching `.part`), verifies it and renames it into place.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn fetch_file(
    client: &reqwest::Client,
    cfg: &DownloadConfig,
    cancel: &CancellationToken,
    label: &str,
    url: &str,
    dest: &Path,
    expected: &Expected,
    progress: &mut Progress<'_>,
) -> std::result::Result<Fetched, FetchError> {
    if let Some(parent) = dest.parent() {
        std::fs::create_dir_all(parent).map_err(|e| StoreError::io(parent, e))?;
    }
    let mut part = Part::open(dest, url).await?;
    (progress.emit)(DownloadEvent::FileStarted {
        file: label.to_owned(),
        total: expected.size.or(part.meta.as_ref().and_then(|m| m.total)),
        resumed_from: part.have,
    });
    let mut failures = 0u32;
    let mut checksum_restarts = 0u32;
    loop {
        if cancel.is_cancelled() {
            return Err(StoreError::Cancelled.into());
        }
        let before = part.have;
        let (reason, stalled) = match attempt(client, cfg, cancel, label, url, &mut part, expected, progress).await {
            Ok(()) => break,
            Err(AttemptError::Fatal(e)) => return Err(e),
            Err(AttemptError::Retry { reason, stalled }) => (reason, stalled),
            Err(AttemptError::Checksum { expected, actual }) => {
                // A corrupt transfer: start over once; a second mismatch means the source is wrong.
                part.discard()?;
                checksum_restarts += 1;
                if checksum_restarts > 1 {
                    return Err(StoreError::ChecksumMismatch { file: label.to_owned(), expected, actual }.into());
                }
                (format!("sha256 {actual} instead of {expected}; downloading again"), false)
            }
        };
        // A retry budget per stretch without progress: a flaky link that keeps delivering bytes
        // finishes; a dead one gives up after `max_retries`.
        if part.have > before {
            failures = 0;
        }
        failures += 1;
        if failures > cfg.max_retries {
            return Err(if stalled {
                StoreError::Stalled { url: url.to_owned(), secs: cfg.stall_timeout.as_secs_f64() }
            } else {
                StoreError::Download { url: url.to_owned(), reason }
            }
            .into());
        }
        let delay = backoff(cfg, failures);
        tracing::info!(file = label, attempt = failures, delay_ms = delay.as_millis() as u64, %reason, "download retry");
        (progress.emit)(DownloadEvent::Retrying {
            file: label.to_owned(),
            attempt: failures,
            delay_ms: delay.as_millis() as u64,
            reason,
        });
        tokio::select! {
            _ = cancel.cancelled() => return Err(StoreError::Cancelled.into()),
            _ = tokio::time::sleep(delay) => {}
        }
    }
    let sha256 = hashing::hex(&std::mem::take(&mut part.hasher).finalize());
    std::fs::rename(&part.path, dest).map_err(|e| StoreError::io(dest, e))?;
    let _ = std::fs::remove_file(&part.meta_path);
    (progress.emit)(DownloadEvent::FileDone { file: label.to_owned(), bytes: part.have, sha256: sha256.clone() });
    Ok(Fetched { size: part.have, sha256 })
}

/// Delay before retry `n` (1-based): `initial · 2^(n-1)`, capped at `backoff_max`.
pub(crate) fn backoff(cfg: &DownloadConfig, n: u32) -> Duration {
    let factor = 1u32.checked_shl(n.saturating_sub(1).min(30)).unwrap_or(u32::MAX);
    cfg.backoff_initial.saturating_mul(factor).min(cfg.backoff_max)
}

/// `bytes START-END/TOTAL` → (START, TOTAL if not `*`).
fn parse_content_range(v: &str) -> Option<(u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes ")?;
    let (range, total) = rest.split_once('/')?;
    let (start, _end) = range.split_once('-')?;
    Some((start.trim().parse().ok()?, total.trim().parse().ok()))
}

/// One request: send, check the status, stream the body into the part file.
#[allow(clippy::too_many_arguments)]
async fn attempt(
    client: &reqwest::Client,
    cfg: &DownloadConfig,
    cancel: &CancellationToken,
    label: &str,
    url: &str,
    part: &mut Part,
    expected: &Expected,
    progress: &mut Progress<'_>,
) -> std::result::Result<(), AttemptError> {
    let fatal = |e: StoreError| AttemptError::Fatal(FetchError::Other(e));
    let retry = |reason: String| AttemptError::Retry { reason, stalled: false };
    let if_range = part.meta.as_ref().and_then(|m| m.etag.clone());
    let opened = tokio::select! {
        _ = cancel.cancelled() => return Err(fatal(StoreError::Cancelled)),
        r = send(client, cfg, url, part.have, if_range.as_deref()) => r?,
    };
    let mut resp = opened.resp;
    let status = resp.status();
    let headers = resp.headers().clone();
    let etag = header_str(&headers, ETAG.as_str()).map(|v| clean_etag(&v));
    let len: Option<u64> = header_str(&headers, CONTENT_LENGTH.as_str()).and_then(|v| v.trim().parse().ok());
    let total = match status {
        StatusCode::PARTIAL_CONTENT => {
            match header_str(&headers, CONTENT_RANGE.as_str()).as_deref().and_then(parse_content_range) {
                Some((start, t)) if start == part.have => t.or(len.map(|l| start + l)),
                _ => {
                    part.discard()?;
                    return Err(retry("server resumed at a different offset; restarting".into()));
                }
            }
        }
        StatusCode::OK => {
            if part.have > 0 {
                // The server ignored the range (or the file changed): start from zero.
                tracing::info!(file = label, "server answered 200 to a range request; restarting the file");
                part.discard()?;
            }
            len
        }
        StatusCode::RANGE_NOT_SATISFIABLE => {
            part.discard()?;
            return Err(retry("range not satisfiable; restarting".into()));
        }
        StatusCode::NOT_FOUND => return Err(AttemptError::Fatal(FetchError::NotFound)),
        s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS || s == StatusCode::REQUEST_TIMEOUT => {
            return Err(retry(format!("HTTP {}", s.as_u16())));
        }
        s => return Err(fatal(StoreError::HttpStatus { url: url.to_owned(), status: s.as_u16() })),
    };
    let want_size = expected.size.or(opened.linked_size);
    if let (Some(w), Some(t)) = (want_size, total) {
        if w != t {
            part.discard()?;
            return Err(fatal(StoreError::SizeMismatch { file: label.to_owned(), expected: w, actual: t }));
        }
    }
    let total = total.or(want_size);
    let want_sha = expected
        .sha256
        .as_deref()
        .map(str::to_ascii_lowercase)
        .or(opened.linked_sha256)
        .or(etag.as_deref().filter(|e| hashing::is_sha256_hex(e)).map(str::to_ascii_lowercase));
    part.save_meta(PartMeta { url: url.to_owned(), etag, total })?;
    let mut file = tokio::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&part.path)
        .await
        .map_err(|e| fatal(StoreError::io(&part.path, e)))?;
    let io_err = |e: std::io::Error| AttemptError::Fatal(FetchError::Other(StoreError::io(&part.path, e)));
    let mut last_emit = Instant::now();
    let end = loop {
        let next = tokio::select! {
            _ = cancel.cancelled() => break Err(fatal(StoreError::Cancelled)),
            r = tokio::time::timeout(cfg.stall_timeout, resp.chunk()) => r,
        };
        match next {
            Err(_) => {
                break Err(AttemptError::Retry {
                    reason: format!("no data for {:.1} s", cfg.stall_timeout.as_secs_f64()),
                    stalled: true,
                })
            }
            Ok(Err(e)) => break Err(retry(format!("connection error after {} bytes: {e}", part.have))),
            Ok(Ok(None)) => break Ok(()),
            Ok(Ok(Some(bytes))) => {
                if let Some(t) = total {
                    if part.have + bytes.len() as u64 > t {
                        break Err(fatal(StoreError::SizeMismatch {
                            file: label.to_owned(),
                            expected: t,
                            actual: part.have + bytes.len() as u64,
                        }));
                    }
                }
                if let Err(e) = file.write_all(&bytes).await {
                    break Err(io_err(e));
                }
                part.hasher.update(&bytes);
                part.have += bytes.len() as u64;
                if last_emit.elapsed() >= cfg.progress_interval {
                    last_emit = Instant::now();
                    emit_progress(progress, label, part.have, total);
                }
            }
        }
    };
    // Keep what arrived, whatever happened (a later attempt or call resumes from it).
    file.flush().await.map_err(io_err)?;
    file.sync_all().await.map_err(io_err)?;
    drop(file);
    emit_progress(progress, label, part.have, total);
    if let Err(AttemptError::Fatal(FetchError::Other(StoreError::SizeMismatch { .. }))) = &end {
        part.discard()?;
    }
    end?;
    if let Some(t) = total {
        if part.have < t {
            return Err(retry(format!("connection closed after {} of {t} bytes", part.have)));
        }
    }
    if let Some(w) = want_size {
        if part.have != w {
            part.discard()?;
            return Err(fatal(StoreError::SizeMismatch { file: label.to_owned(), expected: w, actual: part.have }));
        }
    }
    if let Some(sha) = want_sha {
        let actual = hashing::hex(&part.hasher.clone().finalize());
        if actual != sha {
            return Err(AttemptError::Checksum { expected: sha, actual });
        }
    }
    Ok(())
}

fn emit_progress(progress: &mut Progress<'_>, label: &str, file_done: u64, file_total: Option<u64>) {
    (progress.emit)(DownloadEvent::Progress {
        file: label.to_owned(),
        file_done,
        file_total,
        done: progress.done_before + file_done,
        total: progress.total,
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let cfg = DownloadConfig {
            backoff_initial: Duration::from_secs(2),
            backoff_max: Duration::from_secs(60),
            ..DownloadConfig::default()
        };
        let d: Vec<u64> = (1..=7).map(|n| backoff(&cfg, n).as_secs()).collect();
        assert_eq!(d, [2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(backoff(&cfg, 1000).as_secs(), 60);
    }

    #[test]
    fn content_range_parsing() {
        assert_eq!(parse_content_range("bytes 100-199/200"), Some((100, Some(200))));
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, None)));
        assert_eq!(parse_content_range("items 1-2/3"), None);
        assert_eq!(clean_etag("W/\"abc\""), "abc");
    }
}
