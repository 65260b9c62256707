//! Owned QNN handles: log + backend → device → context. Each child holds an `Arc`
//! to its parent, so teardown always runs in reverse creation order: a context is
//! freed before its device, the device before the backend, the backend before the log.

use crate::error::{check, fmt_version, QnnError, Result};
use crate::ffi::*;
use crate::loader::{qnn_fn, LibraryInner, QnnLibrary};
use crate::log::{log_callback, LogLevel};
use std::ptr::null_mut;
use std::sync::Arc;

pub(crate) struct BackendInner {
    pub(crate) lib: Arc<LibraryInner>,
    log: Qnn_LogHandle_t,
    pub(crate) handle: Qnn_BackendHandle_t,
}

// SAFETY: QNN handles are plain tokens owned by this struct; all mutation goes
// through QNN calls, and the public wrappers take `&mut self` where QNN is not re-entrant.
unsafe impl Send for BackendInner {}
// SAFETY: see above.
unsafe impl Sync for BackendInner {}

impl Drop for BackendInner {
    fn drop(&mut self) {
        if let Some(free) = self.lib.table.backendFree {
            // SAFETY: handle came from backendCreate and every child has already been dropped.
            let ret = unsafe { free(self.handle) };
            if let Err(e) = check("backendFree", ret) {
                tracing::warn!("{e}");
            }
        }
        if !self.log.is_null() {
            if let Some(free) = self.lib.table.logFree {
                // SAFETY: log came from logCreate; the backend using it is gone.
                let ret = unsafe { free(self.log) };
                if let Err(e) = check("logFree", ret) {
                    tracing::warn!("{e}");
                }
            }
        }
    }
}

/// An initialised QNN backend (with its log handle).
#[derive(Clone)]
pub struct Backend {
    pub(crate) inner: Arc<BackendInner>,
}

impl Backend {
    /// `logCreate` (routed to `tracing`) then `backendCreate` with default config.
    pub fn new(lib: &QnnLibrary, level: LogLevel) -> Result<Self> {
        let lib = lib.inner().clone();
        let mut log: Qnn_LogHandle_t = null_mut();
        if let Some(create) = lib.table.logCreate {
            // SAFETY: callback is a valid extern "C" fn for the process lifetime; out-pointer is valid.
            let ret = unsafe { create(Some(log_callback), level.raw(), &mut log) };
            if let Err(e) = check("logCreate", ret) {
                // Logging is optional: carry on without it rather than fail bring-up.
                tracing::warn!("{e}; continuing without QNN logging");
                log = null_mut();
            }
        }
        let create = match qnn_fn!(lib, backendCreate) {
            Ok(f) => f,
            Err(e) => {
                free_log(&lib, log);
                return Err(e);
            }
        };
        let mut handle: Qnn_BackendHandle_t = null_mut();
        // SAFETY: NULL config = defaults; out-pointer valid.
        let ret = unsafe { create(log, std::ptr::null(), &mut handle) };
        if let Err(e) = check("backendCreate", ret) {
            free_log(&lib, log);
            return Err(e);
        }
        let backend = Self { inner: Arc::new(BackendInner { lib, log, handle }) };
        backend.self_check_version();
        Ok(backend)
    }

    /// Compares `backendGetApiVersion` with the provider struct; mismatches are logged, not fatal.
    fn self_check_version(&self) {
        let Some(get) = self.inner.lib.table.backendGetApiVersion else { return };
        let mut v = Qnn_ApiVersion_t::default();
        // SAFETY: out-pointer is valid for one Qnn_ApiVersion_t.
        let ret = unsafe { get(&mut v) };
        if check("backendGetApiVersion", ret).is_ok() {
            let listed = self.inner.lib.api_version.coreApiVersion;
            if v.coreApiVersion != listed {
                // Reported by some vendor builds; the provider struct decides which slots we read.
                tracing::warn!(
                    provider = %fmt_version(&listed),
                    backend = %fmt_version(&v.coreApiVersion),
                    "backendGetApiVersion disagrees with the provider's API version"
                );
            }
        }
    }

    /// The provider's build id string, if it reports one.
    pub fn build_id(&self) -> Result<String> {
        let get = qnn_fn!(self.inner.lib, backendGetBuildId)?;
        let mut p: *const std::ffi::c_char = std::ptr::null();
        // SAFETY: out-pointer valid; the string is owned by the backend.
        check("backendGetBuildId", unsafe { get(&mut p) })?;
        if p.is_null() {
            return Ok(String::new());
        }
        // SAFETY: non-null NUL-terminated string owned by the backend.
        Ok(unsafe { std::ffi::CStr::from_ptr(p) }.to_string_lossy().into_owned())
    }

    /// `propertyHasCapability(key)`: true when the backend reports support.
    pub fn has_capability(&self, key: u32) -> Result<bool> {
        let f = qnn_fn!(self.inner.lib, propertyHasCapability)?;
        // SAFETY: plain value call.
        let ret = unsafe { f(key) };
        Ok(ret & QNN_ERROR_CODE_MASK == 0)
    }

    /// Creates a device (HTP: pass SoC/arch so the right skel loads).
    pub fn create_device(&self, cfg: &DeviceConfig) -> Result<Device> {
        let create = qnn_fn!(self.inner.lib, deviceCreate)?;
        let mut customs: Vec<QnnHtpDevice_CustomConfig_t> = Vec::new();
        if let Some(soc) = cfg.soc_model {
            customs.push(QnnHtpDevice_CustomConfig_t {
                option: QNN_HTP_DEVICE_CONFIG_OPTION_SOC,
                u: QnnHtpDevice_CustomConfigUnion_t { socModel: soc },
            });
        }
        if let Some(arch) = cfg.arch {
            customs.push(QnnHtpDevice_CustomConfig_t {
                option: QNN_HTP_DEVICE_CONFIG_OPTION_ARCH,
                u: QnnHtpDevice_CustomConfigUnion_t { arch: QnnHtpDevice_DeviceArch_t { deviceId: 0, arch } },
            });
        }
        let configs: Vec<Qnn_Config_t> = customs
            .iter_mut()
            .map(|c| Qnn_Config_t {
                option: QNN_DEVICE_CONFIG_OPTION_CUSTOM,
                value: Qnn_ConfigValue_t { customConfig: (c as *mut QnnHtpDevice_CustomConfig_t).cast() },
            })
            .collect();
        let ptrs = null_terminated(&configs);
        let mut handle: Qnn_DeviceHandle_t = null_mut();
        // SAFETY: config array is NULL-terminated and outlives the call; out-pointer valid.
        let ret = unsafe { create(self.inner.log, config_arg(&ptrs), &mut handle) };
        check("deviceCreate", ret)?;
        Ok(Device { inner: Arc::new(DeviceInner { backend: self.inner.clone(), handle }) })
    }

    /// API versions of the provider this backend came from.
    pub fn api_version(&self) -> Qnn_ApiVersion_t {
        self.inner.lib_api_version()
    }
}

impl BackendInner {
    fn lib_api_version(&self) -> Qnn_ApiVersion_t {
        self.lib.api_version
    }

    pub(crate) fn lib_provider_name(&self) -> &str {
        &self.lib.provider_name
    }
}

fn free_log(lib: &LibraryInner, log: Qnn_LogHandle_t) {
    if log.is_null() {
        return;
    }
    if let Some(free) = lib.table.logFree {
        // SAFETY: log came from logCreate and nothing uses it.
        let _ = unsafe { free(log) };
    }
}

/// Builds a NULL-terminated pointer array over `items`.
pub(crate) fn null_terminated<T>(items: &[T]) -> Vec<*const T> {
    items.iter().map(|c| c as *const T).chain(std::iter::once(std::ptr::null())).collect()
}

/// NULL for an empty config list (= backend defaults), else the array.
pub(crate) fn config_arg<T>(ptrs: &[*const T]) -> *const *const T {
    if ptrs.len() <= 1 {
        std::ptr::null()
    } else {
        ptrs.as_ptr()
    }
}

/// HTP device selection.
#[derive(Debug, Clone, Default)]
pub struct DeviceConfig {
    /// `Qnn_SocModel_t`: 57 SM8650, 69 SM8750, 87 SM8850.
    pub soc_model: Option<u32>,
    /// `QnnHtpDevice_Arch_t`: 75, 79, 81.
    pub arch: Option<u32>,
}

pub(crate) struct DeviceInner {
    pub(crate) backend: Arc<BackendInner>,
    pub(crate) handle: Qnn_DeviceHandle_t,
}

// SAFETY: as for BackendInner.
unsafe impl Send for DeviceInner {}
// SAFETY: as for BackendInner.
unsafe impl Sync for DeviceInner {}

impl Drop for DeviceInner {
    fn drop(&mut self) {
        if let Some(free) = self.backend.lib.table.deviceFree {
            // SAFETY: handle came from deviceCreate; all contexts on it are freed (they hold this Arc).
            let ret = unsafe { free(self.handle) };
            if let Err(e) = check("deviceFree", ret) {
                tracing::warn!("{e}");
            }
        }
    }
}

/// A QNN device.
#[derive(Clone)]
pub struct Device {
    pub(crate) inner: Arc<DeviceInner>,
}

pub(crate) struct ContextInner {
    pub(crate) backend: Arc<BackendInner>,
    _device: Option<Arc<DeviceInner>>,
    pub(crate) handle: Qnn_ContextHandle_t,
}

// SAFETY: as for BackendInner.
unsafe impl Send for ContextInner {}
// SAFETY: as for BackendInner.
unsafe impl Sync for ContextInner {}

impl ContextInner {
    pub(crate) fn table(&self) -> &QnnInterface_FunctionTable_t {
        &self.backend.lib.table
    }
}

impl Drop for ContextInner {
    fn drop(&mut self) {
        if let Some(free) = self.backend.lib.table.contextFree {
            // SAFETY: handle came from contextCreate*; graphs and registrations hold this Arc, so they are gone.
            let ret = unsafe { free(self.handle, null_mut()) };
            if let Err(e) = check("contextFree", ret) {
                tracing::warn!("{e}");
            }
        }
    }
}

/// A QNN context: owns graphs and memory registrations.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<ContextInner>,
}

impl Context {
    /// `contextCreate` with default config.
    pub fn new(backend: &Backend, device: Option<&Device>) -> Result<Self> {
        let create = qnn_fn!(backend.inner.lib, contextCreate)?;
        let dev = device.map(|d| d.inner.handle).unwrap_or(null_mut());
        let mut handle: Qnn_ContextHandle_t = null_mut();
        // SAFETY: handles are live (held by Arcs); NULL config = defaults; out-pointer valid.
        let ret = unsafe { create(backend.inner.handle, dev, std::ptr::null(), &mut handle) };
        check("contextCreate", ret)?;
        Ok(Self::wrap(backend, device, handle))
    }

    /// `contextCreateFromBinary`: deserialises a cached context (no graph compile).
    pub fn from_binary(backend: &Backend, device: Option<&Device>, binary: &[u8]) -> Result<Self> {
        let create = qnn_fn!(backend.inner.lib, contextCreateFromBinary)?;
        if binary.is_empty() {
            return Err(QnnError::InvalidArgument("empty context binary".into()));
        }
        let dev = device.map(|d| d.inner.handle).unwrap_or(null_mut());
        let mut handle: Qnn_ContextHandle_t = null_mut();
        // SAFETY: binary is readable for its length during the call; out-pointer valid.
        let ret = unsafe {
            create(
                backend.inner.handle,
                dev,
                std::ptr::null(),
                binary.as_ptr().cast(),
                binary.len() as u64,
                &mut handle,
                null_mut(),
            )
        };
        check("contextCreateFromBinary", ret)?;
        Ok(Self::wrap(backend, device, handle))
    }

    fn wrap(backend: &Backend, device: Option<&Device>, handle: Qnn_ContextHandle_t) -> Self {
        Self {
            inner: Arc::new(ContextInner {
                backend: backend.inner.clone(),
                _device: device.map(|d| d.inner.clone()),
                handle,
            }),
        }
    }

    /// `contextGetBinarySize` + `contextGetBinary`: the serialised context (after finalize).
    pub fn binary(&self) -> Result<Vec<u8>> {
        let get_size = qnn_fn!(self.inner.backend.lib, contextGetBinarySize)?;
        let get = qnn_fn!(self.inner.backend.lib, contextGetBinary)?;
        let mut size: u64 = 0;
        // SAFETY: out-pointer valid.
        check("contextGetBinarySize", unsafe { get_size(self.inner.handle, &mut size) })?;
        let len = usize::try_from(size)
            .map_err(|_| QnnError::InvalidArgument(format!("context binary size {size} does not fit in memory")))?;
        let mut buf = vec![0u8; len];
        let mut written: u64 = 0;
        // SAFETY: buf is writable for `size` bytes; out-pointer valid.
        check("contextGetBinary", unsafe { get(self.inner.handle, buf.as_mut_ptr().cast(), size, &mut written) })?;
        if written > size {
            return Err(QnnError::InvalidArgument(format!("contextGetBinary wrote {written} > {size} bytes")));
        }
        buf.truncate(written as usize);
        Ok(buf)
    }

    /// API versions of the provider this context's backend came from.
    pub fn api_version(&self) -> Qnn_ApiVersion_t {
        self.inner.backend.lib.api_version
    }
}
