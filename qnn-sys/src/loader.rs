//! Loads a QNN backend library at run time, queries its providers and applies
//! the version gate. The library is never unloaded: reloading a QNN backend in
//! the same process fails with 1009 (LOADING_BINARIES).

use crate::error::{fmt_version, QnnError, Result, StatusCode};
use crate::ffi::{
    slot_count_for_core_minor, QnnInterfaceGetProvidersFn_t, QnnInterface_FunctionTable_t, QnnInterface_t,
    Qnn_ApiVersion_t, Qnn_Version_t, QNN_INTERFACE_GET_PROVIDERS_SYMBOL,
};
use std::ffi::CStr;
use std::mem::{offset_of, ManuallyDrop};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Oldest core API we accept: 2.18 (QAIRT 2.25). Older ABIs (e.g. 2.7) use another slot order.
pub const MIN_CORE_API: Qnn_Version_t = Qnn_Version_t { major: 2, minor: 18, patch: 0 };

/// Symbol name as a `&str` for error messages.
const GET_PROVIDERS: &str = "QnnInterface_getProviders";

/// A loaded QNN library plus the provider chosen from it.
///
/// Cheap to clone; every handle created from it keeps it alive.
#[derive(Clone)]
pub struct QnnLibrary {
    inner: Arc<LibraryInner>,
}

pub(crate) struct LibraryInner {
    /// Never dropped, so the library is never dlclosed (see module docs).
    _lib: ManuallyDrop<libloading::Library>,
    path: PathBuf,
    backend_id: u32,
    pub(crate) provider_name: String,
    pub(crate) api_version: Qnn_ApiVersion_t,
    /// Copy of the provider's table; slots past its API minor stay NULL.
    pub(crate) table: QnnInterface_FunctionTable_t,
}

// SAFETY: the table holds plain C function pointers into a library that is never
// unloaded; QNN entry points are callable from any thread (handles are not shared
// across threads by this crate without `&mut`/ownership).
unsafe impl Send for LibraryInner {}
// SAFETY: as above; the struct is immutable after construction.
unsafe impl Sync for LibraryInner {}

/// Options for [`QnnLibrary::load_with`].
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    /// Only accept providers with this backend id (e.g. `QNN_BACKEND_ID_HTP`).
    pub backend_id: Option<u32>,
}

impl QnnLibrary {
    /// Loads `path` and picks the newest provider with core API ≥ [`MIN_CORE_API`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self> {
        Self::load_with(path, &LoadOptions::default())
    }

    /// Like [`QnnLibrary::load`] with provider filters.
    pub fn load_with(path: impl AsRef<Path>, opts: &LoadOptions) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        // SAFETY: loading runs the library's initialisers; a QNN backend (or our mock)
        // has no initialiser side effects beyond its own state.
        let lib = unsafe { libloading::Library::new(&path) }
            .map_err(|source| QnnError::LibraryLoad { path: path.clone(), source })?;
        // SAFETY: the symbol type matches the documented C prototype of the provider query.
        let get_providers: QnnInterfaceGetProvidersFn_t = unsafe {
            *lib.get::<QnnInterfaceGetProvidersFn_t>(QNN_INTERFACE_GET_PROVIDERS_SYMBOL)
                .map_err(|source| QnnError::MissingSymbol { path: path.clone(), symbol: GET_PROVIDERS, source })?
        };
        let mut list: *mut *const QnnInterface_t = std::ptr::null_mut();
        let mut count: u32 = 0;
        // SAFETY: both out-pointers are valid for writes; the returned array lives while the library is loaded.
        let ret = unsafe { get_providers(&mut list, &mut count) };
        if let Some(code) = StatusCode::from_raw(ret) {
            return Err(QnnError::ProviderQuery(code));
        }
        if list.is_null() || count == 0 {
            return Err(QnnError::NoProviders { path });
        }
        let mut best: Option<ProviderHeader> = None;
        let mut newest_rejected: Option<Qnn_Version_t> = None;
        let mut major_mismatch: Option<Qnn_Version_t> = None;
        for i in 0..count as usize {
            // SAFETY: the provider promised `count` entries in `list`.
            let entry = unsafe { *list.add(i) };
            if entry.is_null() {
                continue;
            }
            // SAFETY: every provider has at least the 40-byte header; only that is read here.
            let header = unsafe { ProviderHeader::read(entry) };
            if opts.backend_id.is_some_and(|id| id != header.backend_id) {
                continue;
            }
            let core = header.api_version.coreApiVersion;
            if core.major != MIN_CORE_API.major {
                major_mismatch = Some(core);
                continue;
            }
            if core.minor < MIN_CORE_API.minor {
                newest_rejected = newest_rejected.max(Some(core));
                continue;
            }
            if best.as_ref().is_none_or(|b| b.api_version.coreApiVersion < core) {
                best = Some(header);
            }
        }
        let Some(chosen) = best else {
            if let Some(found) = newest_rejected {
                return Err(QnnError::ApiVersionTooOld {
                    found: fmt_version(&found),
                    required: fmt_version(&MIN_CORE_API),
                });
            }
            if let Some(found) = major_mismatch {
                return Err(QnnError::ApiMajorMismatch { found: fmt_version(&found), required: MIN_CORE_API.major });
            }
            return Err(QnnError::NoProviders { path });
        };
        // SAFETY: `chosen.ptr` is a provider whose table has at least `slot_count_for_core_minor` slots.
        let table = unsafe { chosen.copy_table() };
        tracing::info!(
            path = %path.display(),
            provider = %chosen.provider_name,
            backend_id = chosen.backend_id,
            core_api = %fmt_version(&chosen.api_version.coreApiVersion),
            backend_api = %fmt_version(&chosen.api_version.backendApiVersion),
            "loaded QNN provider"
        );
        Ok(Self {
            inner: Arc::new(LibraryInner {
                _lib: ManuallyDrop::new(lib),
                path,
                backend_id: chosen.backend_id,
                provider_name: chosen.provider_name,
                api_version: chosen.api_version,
                table,
            }),
        })
    }

    /// Path the library was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Chosen provider's backend id.
    pub fn backend_id(&self) -> u32 {
        self.inner.backend_id
    }

    /// Chosen provider's name.
    pub fn provider_name(&self) -> &str {
        &self.inner.provider_name
    }

    /// Chosen provider's API versions.
    pub fn api_version(&self) -> Qnn_ApiVersion_t {
        self.inner.api_version
    }

    /// The (prefix-copied) function table, for callers that need a raw slot.
    pub fn table(&self) -> &QnnInterface_FunctionTable_t {
        &self.inner.table
    }

    pub(crate) fn inner(&self) -> &Arc<LibraryInner> {
        &self.inner
    }
}

impl std::fmt::Debug for QnnLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QnnLibrary")
            .field("path", &self.inner.path)
            .field("provider", &self.inner.provider_name)
            .field("core_api", &fmt_version(&self.inner.api_version.coreApiVersion))
            .finish()
    }
}

/// The fixed-size header of a provider entry, read without touching its table.
struct ProviderHeader {
    ptr: *const QnnInterface_t,
    backend_id: u32,
    provider_name: String,
    api_version: Qnn_ApiVersion_t,
}

impl ProviderHeader {
    /// Reads backend id, name and version.
    ///
    /// # Safety
    /// `ptr` must point to a provider entry of at least 40 bytes.
    unsafe fn read(ptr: *const QnnInterface_t) -> Self {
        let base = ptr.cast::<u8>();
        // SAFETY: offsets are within the 40-byte header; unaligned reads avoid assuming more than the C ABI gives.
        let (backend_id, name_ptr, api_version) = unsafe {
            (
                base.add(offset_of!(QnnInterface_t, backendId)).cast::<u32>().read_unaligned(),
                base.add(offset_of!(QnnInterface_t, providerName)).cast::<*const std::ffi::c_char>().read_unaligned(),
                base.add(offset_of!(QnnInterface_t, apiVersion)).cast::<Qnn_ApiVersion_t>().read_unaligned(),
            )
        };
        let provider_name = if name_ptr.is_null() {
            String::from("<unnamed>")
        } else {
            // SAFETY: a non-null provider name is a NUL-terminated static string.
            unsafe { CStr::from_ptr(name_ptr) }.to_string_lossy().into_owned()
        };
        Self { ptr, backend_id, provider_name, api_version }
    }

    /// Copies only the slots this provider's minor version has; newer slots stay NULL.
    ///
    /// # Safety
    /// The provider's table must hold at least `slot_count_for_core_minor(minor)` slots.
    unsafe fn copy_table(&self) -> QnnInterface_FunctionTable_t {
        let mut table = QnnInterface_FunctionTable_t::EMPTY;
        let slots = slot_count_for_core_minor(self.api_version.coreApiVersion.minor);
        // SAFETY: source holds `slots` pointer-sized entries at offset 40; destination has 71.
        unsafe {
            let src = self.ptr.cast::<u8>().add(offset_of!(QnnInterface_t, functions));
            std::ptr::copy_nonoverlapping(
                src,
                (&mut table as *mut QnnInterface_FunctionTable_t).cast::<u8>(),
                slots * 8,
            );
        }
        table
    }
}

/// Fetches a slot or fails with `MissingFunction(name)`.
macro_rules! qnn_fn {
    ($lib:expr, $slot:ident) => {
        $lib.table.$slot.ok_or($crate::error::QnnError::MissingFunction(stringify!($slot)))
    };
}
pub(crate) use qnn_fn;
