//! Shared (zero-copy) I/O buffers: an allocator trait with the real rpcmem
//! implementation (dlopen `libcdsprpc.so`) and a memfd-backed fake for hosts,
//! plus `memRegister`/`memDeRegister` bound to a context.

use crate::error::{check, QnnError, Result};
use crate::ffi::*;
use crate::handles::{Context, ContextInner};
use crate::loader::qnn_fn;
use crate::tensor::{OwnedTensor, TensorKind, TensorSpec};
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

/// One raw shared allocation: CPU address plus the fd QNN maps on the DSP side.
#[derive(Debug, Clone, Copy)]
pub struct RawShared {
    /// CPU address.
    pub ptr: NonNull<u8>,
    /// File descriptor for `Qnn_MemDescriptor_t` (ION type).
    pub fd: i32,
}

/// Source of DSP-shareable memory. Tests substitute a host fake.
pub trait SharedMemoryAllocator: Send + Sync {
    /// Allocates `size` bytes.
    fn allocate(&self, size: usize) -> Result<RawShared>;
    /// Frees an allocation returned by `allocate` with the same `size`.
    fn release(&self, raw: RawShared, size: usize);
}

/// An owned shared allocation; freed on drop.
pub struct SharedBuffer {
    raw: RawShared,
    len: usize,
    alloc: Arc<dyn SharedMemoryAllocator>,
}

// SAFETY: the buffer exclusively owns its allocation; access goes through &/&mut self.
unsafe impl Send for SharedBuffer {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for SharedBuffer {}

impl SharedBuffer {
    /// Allocates `len` bytes from `alloc`.
    pub fn new(alloc: Arc<dyn SharedMemoryAllocator>, len: usize) -> Result<Self> {
        if len == 0 {
            return Err(QnnError::SharedMemory("zero-sized shared buffer".into()));
        }
        let raw = alloc.allocate(len)?;
        Ok(Self { raw, len, alloc })
    }

    /// Byte length.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false (zero-sized buffers are rejected).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The fd QNN registers.
    pub fn fd(&self) -> i32 {
        self.raw.fd
    }

    /// Read view.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the allocation is `len` bytes, live until drop.
        unsafe { std::slice::from_raw_parts(self.raw.ptr.as_ptr(), self.len) }
    }

    /// Write view.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.raw.ptr.as_ptr(), self.len) }
    }
}

impl Drop for SharedBuffer {
    fn drop(&mut self) {
        self.alloc.release(self.raw, self.len);
    }
}

/// rpcmem heap id SYSTEM (used by all QNN clients).
pub const RPCMEM_HEAP_ID_SYSTEM: i32 = 25;
/// rpcmem flag DEFAULT (cached).
pub const RPCMEM_DEFAULT_FLAGS: u32 = 1;

type RpcmemAllocFn = unsafe extern "C" fn(heap: i32, flags: u32, size: i32) -> *mut c_void;
type RpcmemFreeFn = unsafe extern "C" fn(ptr: *mut c_void);
type RpcmemToFdFn = unsafe extern "C" fn(ptr: *mut c_void) -> i32;

/// The real allocator: `rpcmem_alloc`/`rpcmem_free`/`rpcmem_to_fd` from `libcdsprpc.so`.
pub struct RpcMemAllocator {
    // Never unloaded: outstanding buffers would dangle.
    _lib: ManuallyDrop<libloading::Library>,
    alloc: RpcmemAllocFn,
    free: RpcmemFreeFn,
    to_fd: RpcmemToFdFn,
}

impl RpcMemAllocator {
    /// Loads `libcdsprpc.so` (from the vendor partition on a phone).
    pub fn load() -> Result<Self> {
        Self::load_from("libcdsprpc.so")
    }

    /// Loads the rpcmem functions from a specific library.
    pub fn load_from(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        // SAFETY: loading a system library with no initialiser side effects we depend on.
        let lib = unsafe { libloading::Library::new(&path) }
            .map_err(|source| QnnError::LibraryLoad { path: path.clone(), source })?;
        macro_rules! sym {
            ($name:literal, $ty:ty) => {
                // SAFETY: the type matches the documented rpcmem.h prototype.
                unsafe {
                    *lib.get::<$ty>(concat!($name, "\0").as_bytes()).map_err(|source| QnnError::MissingSymbol {
                        path: path.clone(),
                        symbol: $name,
                        source,
                    })?
                }
            };
        }
        let alloc = sym!("rpcmem_alloc", RpcmemAllocFn);
        let free = sym!("rpcmem_free", RpcmemFreeFn);
        let to_fd = sym!("rpcmem_to_fd", RpcmemToFdFn);
        Ok(Self { _lib: ManuallyDrop::new(lib), alloc, free, to_fd })
    }
}

impl SharedMemoryAllocator for RpcMemAllocator {
    fn allocate(&self, size: usize) -> Result<RawShared> {
        let isize = i32::try_from(size)
            .map_err(|_| QnnError::SharedMemory(format!("rpcmem_alloc takes at most 2 GB, asked {size} bytes")))?;
        // SAFETY: plain C call with the documented heap/flags.
        let p = unsafe { (self.alloc)(RPCMEM_HEAP_ID_SYSTEM, RPCMEM_DEFAULT_FLAGS, isize) };
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| QnnError::SharedMemory(format!("rpcmem_alloc({size}) failed")))?;
        // SAFETY: p is a live rpcmem allocation.
        let fd = unsafe { (self.to_fd)(p) };
        if fd < 0 {
            // SAFETY: p came from rpcmem_alloc and is not used afterwards.
            unsafe { (self.free)(p) };
            return Err(QnnError::SharedMemory("rpcmem_to_fd failed".into()));
        }
        Ok(RawShared { ptr, fd })
    }

    fn release(&self, raw: RawShared, _size: usize) {
        // SAFETY: raw came from rpcmem_alloc and is released once (SharedBuffer::drop).
        unsafe { (self.free)(raw.ptr.as_ptr().cast()) };
    }
}

/// Host fake for tests and desktop runs: memfd + shared mmap, so a provider can map
/// the same fd like the DSP does with rpcmem.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[derive(Debug, Default, Clone, Copy)]
pub struct MemfdAllocator;

#[cfg(any(target_os = "linux", target_os = "android"))]
impl SharedMemoryAllocator for MemfdAllocator {
    fn allocate(&self, size: usize) -> Result<RawShared> {
        let err = |what: &str| QnnError::SharedMemory(format!("{what}: {}", std::io::Error::last_os_error()));
        // SAFETY: plain syscalls with valid arguments; every failure path closes what it opened.
        unsafe {
            let fd = libc::memfd_create(c"qnn-shared".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return Err(err("memfd_create"));
            }
            if libc::ftruncate(fd, size as libc::off_t) != 0 {
                let e = err("ftruncate");
                libc::close(fd);
                return Err(e);
            }
            let p = libc::mmap(std::ptr::null_mut(), size, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            if p == libc::MAP_FAILED {
                let e = err("mmap");
                libc::close(fd);
                return Err(e);
            }
            match NonNull::new(p.cast::<u8>()) {
                Some(ptr) => Ok(RawShared { ptr, fd }),
                None => {
                    libc::close(fd);
                    Err(QnnError::SharedMemory("mmap returned null".into()))
                }
            }
        }
    }

    fn release(&self, raw: RawShared, size: usize) {
        // SAFETY: raw is our mapping of `size` bytes and our fd, released once.
        unsafe {
            libc::munmap(raw.ptr.as_ptr().cast(), size);
            libc::close(raw.fd);
        }
    }
}

/// A shared buffer registered with a context for one tensor shape/dtype.
/// Drop order: `memDeRegister`, then the buffer is freed, then the context reference drops.
pub struct RegisteredBuffer {
    ctx: Arc<ContextInner>,
    handle: Qnn_MemHandle_t,
    spec: TensorSpec,
    buffer: SharedBuffer,
}

// SAFETY: the mem handle is a token owned by this struct.
unsafe impl Send for RegisteredBuffer {}
// SAFETY: shared access only reads the handle and the buffer.
unsafe impl Sync for RegisteredBuffer {}

impl Context {
    /// `memRegister` of `buffer` (ION descriptor with its fd) as backing for tensors shaped like `spec`.
    pub fn register(&self, buffer: SharedBuffer, spec: &TensorSpec) -> Result<RegisteredBuffer> {
        let register = qnn_fn!(self.inner.backend.lib, memRegister)?;
        if buffer.len() < spec.num_bytes() {
            return Err(QnnError::InvalidArgument(format!(
                "shared buffer of {} bytes is smaller than tensor {:?} ({} bytes)",
                buffer.len(),
                spec.name,
                spec.num_bytes()
            )));
        }
        let shape = OwnedTensor::new(spec.clone(), TensorKind::Input)?;
        let desc = Qnn_MemDescriptor_t {
            memShape: Qnn_MemShape_t {
                numDim: spec.dims.len() as u32,
                dimSize: shape.dims_ptr(),
                shapeConfig: std::ptr::null(),
            },
            dataType: spec.dtype.raw(),
            memType: QNN_MEM_TYPE_ION,
            u: Qnn_MemDescriptorUnion_t { ionInfo: Qnn_MemIonInfo_t { fd: buffer.fd() } },
        };
        let mut handle: Qnn_MemHandle_t = std::ptr::null_mut();
        // SAFETY: descriptor and dims live across the call; out-pointer valid for one handle.
        check("memRegister", unsafe { register(self.inner.handle, &desc, 1, &mut handle) })?;
        Ok(RegisteredBuffer { ctx: self.inner.clone(), handle, spec: spec.clone(), buffer })
    }
}

impl RegisteredBuffer {
    /// The QNN mem handle.
    pub fn handle(&self) -> Qnn_MemHandle_t {
        self.handle
    }

    /// The tensor spec it was registered for.
    pub fn spec(&self) -> &TensorSpec {
        &self.spec
    }

    /// CPU view (valid between executes).
    pub fn as_slice(&self) -> &[u8] {
        &self.buffer.as_slice()[..self.spec.num_bytes()]
    }

    /// CPU write view.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let n = self.spec.num_bytes();
        &mut self.buffer.as_mut_slice()[..n]
    }

    /// Checks this registration can back `spec` in a graph of `ctx`.
    pub(crate) fn check_compatible(&self, ctx: &Arc<ContextInner>, spec: &TensorSpec) -> Result<()> {
        if !Arc::ptr_eq(&self.ctx, ctx) {
            return Err(QnnError::InvalidArgument(format!(
                "buffer for {:?} is registered with another context",
                self.spec.name
            )));
        }
        if self.spec.dtype != spec.dtype || self.spec.dims != spec.dims {
            return Err(QnnError::InvalidArgument(format!(
                "registered buffer {:?} ({:?} {:?}) does not match tensor {:?} ({:?} {:?})",
                self.spec.name, self.spec.dtype, self.spec.dims, spec.name, spec.dtype, spec.dims
            )));
        }
        Ok(())
    }
}

impl Drop for RegisteredBuffer {
    fn drop(&mut self) {
        if let Some(dereg) = self.ctx.table().memDeRegister {
            // SAFETY: handle came from memRegister on a context that is still alive (we hold it).
            let ret = unsafe { dereg(&self.handle, 1) };
            if let Err(e) = check("memDeRegister", ret) {
                tracing::warn!("{e}");
            }
        }
    }
}
