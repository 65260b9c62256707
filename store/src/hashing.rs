//! Streaming SHA-256 of files, optionally copying them at the same time (one read per byte).

use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::{Result, StoreError};

const BUF: usize = 1 << 20;

/// Lower-case hex of a digest.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(bytes.len() * 2), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

/// Whether `s` looks like a sha256 in hex.
pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Hashes `src` and, when `dst` is given, copies it there (created fresh, fsynced). Calls
/// `on_bytes(n)` after each block read. Returns (bytes, sha256 hex).
pub(crate) fn hash_file(src: &Path, dst: Option<&Path>, mut on_bytes: impl FnMut(u64)) -> Result<(u64, String)> {
    let mut input = File::open(src).map_err(|e| StoreError::io(src, e))?;
    let mut out = match dst {
        Some(d) => Some(File::create_new(d).map_err(|e| StoreError::io(d, e))?),
        None => None,
    };
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; BUF];
    let mut total = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(StoreError::io(src, e)),
        };
        hasher.update(&buf[..n]);
        if let (Some(o), Some(d)) = (out.as_mut(), dst) {
            o.write_all(&buf[..n]).map_err(|e| StoreError::io(d, e))?;
        }
        total += n as u64;
        on_bytes(n as u64);
    }
    if let (Some(o), Some(d)) = (out, dst) {
        o.sync_all().map_err(|e| StoreError::io(d, e))?;
    }
    Ok((total, hex(&hasher.finalize())))
}

/// Whether a file of an HF directory defines the model (config, tokenizer, weights), as opposed
/// to documentation and generation defaults, which do not change what the model computes.
pub(crate) fn is_identity_file(rel_path: &str) -> bool {
    matches!(rel_path, "config.json" | "tokenizer.json" | "model.safetensors.index.json")
        || rel_path.ends_with(".safetensors")
}

/// The hash that identifies a multi-file model: SHA-256 over `"{sha256}  {rel_path}\n"` lines
/// (the `sha256sum` format) of its identity files ([`is_identity_file`]) sorted by path, so the
/// same model gives the same id wherever it lies and whatever docs come with it.
pub(crate) fn manifest_hash(files: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = files.iter().filter(|f| is_identity_file(&f.0)).collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let mut h = Sha256::new();
    for (path, sha) in sorted {
        h.update(format!("{sha}  {path}\n").as_bytes());
    }
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digests() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a");
        std::fs::write(&p, b"abc").unwrap();
        let q = dir.path().join("b");
        let mut seen = 0;
        let (n, sha) = hash_file(&p, Some(&q), |k| seen += k).unwrap();
        assert_eq!((n, seen), (3, 3));
        assert_eq!(sha, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(std::fs::read(&q).unwrap(), b"abc");
        // The copy target must not exist already (never overwrite).
        assert!(hash_file(&p, Some(&q), |_| {}).is_err());
        let a = manifest_hash(&[("config.json".into(), "1".into()), ("a.safetensors".into(), "2".into())]);
        let b = manifest_hash(&[
            ("README.md".into(), "3".into()),
            ("a.safetensors".into(), "2".into()),
            ("config.json".into(), "1".into()),
        ]);
        assert_eq!(a, b);
        assert_ne!(a, manifest_hash(&[("config.json".into(), "1".into()), ("a.safetensors".into(), "4".into())]));
        assert!(is_sha256_hex(&sha) && !is_sha256_hex("xyz"));
    }
}
