//! A bundle: several named files in one fuzz input (a model folder), so a whole-folder crash is
//! one regression file. Layout: `UMB1`, then per file a u8 name length, the name, a u32 LE data
//! length and the data. Decoding is lenient (a short last file keeps what is there) and only
//! plain file names are honoured, so a mutated bundle can never write outside its folder.

use std::path::Path;

const MAGIC: &[u8; 4] = b"UMB1";

/// Encodes `(name, bytes)` pairs.
pub fn encode(files: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    for (name, data) in files {
        let name = &name.as_bytes()[..name.len().min(255)];
        out.push(name.len() as u8);
        out.extend_from_slice(name);
        out.extend_from_slice(&(data.len().min(u32::MAX as usize) as u32).to_le_bytes());
        out.extend_from_slice(data);
    }
    out
}

/// Decodes a bundle; files with unsafe names are dropped.
pub fn decode(bundle: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let Some(mut rest) = bundle.strip_prefix(MAGIC) else { return out };
    while let Some((&n, tail)) = rest.split_first() {
        let n = n as usize;
        if tail.len() < n + 4 {
            break;
        }
        let name = String::from_utf8_lossy(&tail[..n]).into_owned();
        let len = u32::from_le_bytes([tail[n], tail[n + 1], tail[n + 2], tail[n + 3]]) as usize;
        let body = &tail[n + 4..];
        let take = len.min(body.len());
        if is_plain_name(&name) {
            out.push((name, body[..take].to_vec()));
        }
        rest = &body[take..];
    }
    out
}

/// A single path component made of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Replaces the contents of `dir` by the bundle's files.
pub fn unpack(bundle: &[u8], dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            std::fs::remove_dir_all(&path)?;
        } else {
            std::fs::remove_file(&path)?;
        }
    }
    for (name, data) in decode(bundle) {
        std::fs::write(dir.join(name), data)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_unsafe_names() {
        let files = vec![("config.json".to_owned(), b"{}".to_vec()), ("../x".to_owned(), vec![1])];
        let b = encode(&files);
        assert_eq!(decode(&b), vec![("config.json".to_owned(), b"{}".to_vec())]);
        assert_eq!(decode(&b[..b.len() - 1]).len(), 1);
        assert!(decode(b"junk").is_empty());
    }
}
