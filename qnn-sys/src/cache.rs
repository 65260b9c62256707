//! Context-binary caching: build graphs once, save `contextGetBinary` output plus
//! a JSON sidecar (graph/tensor metadata, API version, source hash), and on later
//! runs reload with `contextCreateFromBinary` + `graphRetrieve` instead of
//! recompiling. Any mismatch rebuilds, with the reason logged and returned.
//!
//! The sidecar exists because the tensor ids needed for `graphExecute` are
//! otherwise only available through `libQnnSystem`, whose structs have a
//! version-dependent stride.

use crate::error::{fmt_version, QnnError, Result};
use crate::graph::{Graph, GraphMeta};
use crate::handles::{Backend, Context, Device};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Bump when the sidecar schema changes.
pub const SIDECAR_FORMAT: u32 = 1;

/// Sidecar contents.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    /// Schema version ([`SIDECAR_FORMAT`]).
    pub format: u32,
    /// Provider name that produced the binary.
    pub provider: String,
    /// Core API version `major.minor.patch`.
    pub core_api: String,
    /// Backend API version.
    pub backend_api: String,
    /// Caller's hash of source weights/shapes/options.
    pub source_hash: String,
    /// Size of the binary file.
    pub binary_size: u64,
    /// FNV-1a hash of the binary file (catches truncation/corruption).
    pub binary_hash: String,
    /// Graphs in the context.
    pub graphs: Vec<GraphMeta>,
}

/// Whether the context came from disk or was rebuilt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheOutcome {
    /// Loaded from the cached binary.
    Loaded,
    /// Built from scratch; `reason` says why the cache was not used.
    Built {
        /// Why the cache was not used.
        reason: String,
    },
}

/// 64-bit FNV-1a over several byte slices, as hex. Not cryptographic: it detects
/// changed weights/shapes, it does not defend against tampering.
pub fn fingerprint(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for &b in *part {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        // Separator so ["ab","c"] and ["a","bc"] differ.
        h ^= 0xff;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// A cache entry: `<dir>/<key>.bin` plus `<dir>/<key>.json`.
#[derive(Debug, Clone)]
pub struct ContextCache {
    bin: PathBuf,
    sidecar: PathBuf,
}

/// Result of [`ContextCache::load_or_build`].
pub struct CachedContext {
    /// The context.
    pub context: Context,
    /// Its graphs, in the order the builder returned them.
    pub graphs: Vec<Graph>,
    /// Loaded or rebuilt.
    pub outcome: CacheOutcome,
}

impl ContextCache {
    /// Cache files for `key` under `dir`.
    pub fn new(dir: impl AsRef<Path>, key: &str) -> Self {
        let dir = dir.as_ref();
        Self { bin: dir.join(format!("{key}.bin")), sidecar: dir.join(format!("{key}.json")) }
    }

    /// Path of the binary.
    pub fn binary_path(&self) -> &Path {
        &self.bin
    }

    /// Path of the sidecar.
    pub fn sidecar_path(&self) -> &Path {
        &self.sidecar
    }

    /// Loads the cached context if valid for `source_hash`, else builds it with `build`
    /// (which must return finalized graphs) and writes the cache.
    pub fn load_or_build<F>(
        &self,
        backend: &Backend,
        device: Option<&Device>,
        source_hash: &str,
        build: F,
    ) -> Result<CachedContext>
    where
        F: FnOnce(&Context) -> Result<Vec<Graph>>,
    {
        self.load_or_build_with(backend, device, source_hash, build)
    }

    /// [`ContextCache::load_or_build`] for callers whose build step fails with their own error type.
    pub fn load_or_build_with<F, E>(
        &self,
        backend: &Backend,
        device: Option<&Device>,
        source_hash: &str,
        build: F,
    ) -> std::result::Result<CachedContext, E>
    where
        F: FnOnce(&Context) -> std::result::Result<Vec<Graph>, E>,
        E: From<QnnError>,
    {
        let reason = match self.try_load(backend, device, source_hash) {
            Ok((context, graphs)) => {
                tracing::info!(path = %self.bin.display(), "loaded cached QNN context binary");
                return Ok(CachedContext { context, graphs, outcome: CacheOutcome::Loaded });
            }
            Err(reason) => reason,
        };
        tracing::warn!(path = %self.bin.display(), %reason, "rebuilding QNN context");
        let context = Context::new(backend, device)?;
        let graphs = build(&context)?;
        self.save(&context, &graphs, source_hash)?;
        Ok(CachedContext { context, graphs, outcome: CacheOutcome::Built { reason } })
    }

    /// Writes the binary and sidecar (each via a temp file + rename, so a crash never leaves a half file).
    pub fn save(&self, context: &Context, graphs: &[Graph], source_hash: &str) -> Result<()> {
        let binary = context.binary()?;
        let api = context.api_version();
        let sidecar = Sidecar {
            format: SIDECAR_FORMAT,
            provider: context.inner.backend.lib_provider_name().to_string(),
            core_api: fmt_version(&api.coreApiVersion),
            backend_api: fmt_version(&api.backendApiVersion),
            source_hash: source_hash.to_string(),
            binary_size: binary.len() as u64,
            binary_hash: fingerprint(&[&binary]),
            graphs: graphs.iter().map(Graph::meta).collect(),
        };
        if let Some(dir) = self.bin.parent() {
            std::fs::create_dir_all(dir).map_err(|source| QnnError::CacheIo { path: dir.to_path_buf(), source })?;
        }
        write_atomic(&self.bin, &binary)?;
        let json = serde_json::to_vec_pretty(&sidecar)
            .map_err(|source| QnnError::Sidecar { path: self.sidecar.clone(), source })?;
        write_atomic(&self.sidecar, &json)
    }

    /// Every failure here is a reason to rebuild, not an error for the caller.
    fn try_load(
        &self,
        backend: &Backend,
        device: Option<&Device>,
        source_hash: &str,
    ) -> Result<(Context, Vec<Graph>), String> {
        let text = match std::fs::read(&self.sidecar) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err("no cached context".into()),
            Err(e) => return Err(format!("cannot read sidecar {}: {e}", self.sidecar.display())),
        };
        let side: Sidecar = serde_json::from_slice(&text).map_err(|e| format!("invalid sidecar JSON: {e}"))?;
        if side.format != SIDECAR_FORMAT {
            return Err(format!("sidecar format {} != {}", side.format, SIDECAR_FORMAT));
        }
        let api = backend.api_version();
        let core = fmt_version(&api.coreApiVersion);
        let be = fmt_version(&api.backendApiVersion);
        if side.core_api != core || side.backend_api != be {
            return Err(format!(
                "API version changed: cached {}/{} vs loaded {core}/{be}",
                side.core_api, side.backend_api
            ));
        }
        if side.source_hash != source_hash {
            return Err(format!("source hash changed: cached {} vs {source_hash}", side.source_hash));
        }
        if side.graphs.is_empty() {
            return Err("sidecar lists no graphs".into());
        }
        let binary = std::fs::read(&self.bin).map_err(|e| format!("cannot read binary {}: {e}", self.bin.display()))?;
        if binary.len() as u64 != side.binary_size || fingerprint(&[&binary]) != side.binary_hash {
            return Err("context binary does not match its sidecar (size/hash)".into());
        }
        let context =
            Context::from_binary(backend, device, &binary).map_err(|e| format!("backend rejected binary: {e}"))?;
        let graphs = side
            .graphs
            .iter()
            .map(|g| context.retrieve_graph(g))
            .collect::<Result<Vec<_>>>()
            .map_err(|e| format!("graph retrieve failed: {e}"))?;
        Ok((context, graphs))
    }
}

fn write_atomic(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let io = |source| QnnError::CacheIo { path: path.to_path_buf(), source };
    std::fs::write(&tmp, data).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_separates_parts_and_detects_changes() {
        assert_ne!(fingerprint(&[b"ab", b"c"]), fingerprint(&[b"a", b"bc"]));
        assert_ne!(fingerprint(&[b"weights"]), fingerprint(&[b"weightz"]));
        assert_eq!(fingerprint(&[b"x"]), fingerprint(&[b"x"]));
        assert_eq!(fingerprint(&[]).len(), 16);
    }
}
