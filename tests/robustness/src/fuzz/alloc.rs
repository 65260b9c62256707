//! Allocation accounting for fuzz executions.
//!
//! [`TrackingAlloc`] wraps the system allocator. A binary that wants allocation checks (the fuzz
//! test, the bench) installs it with `#[global_allocator]`; the library never does, so linking it
//! changes nothing for other users. While a measuring window is open ([`begin`] .. [`end`], one
//! fuzz execution) it records the peak of bytes allocated-and-not-freed and the largest single
//! request, over all threads (executions are serialised, so rayon workers count too).
//!
//! A hostile size must not abort the process: on a failed allocation Rust calls
//! `handle_alloc_error`, which aborts, and stable Rust has no hook to turn that into a panic.
//! So every request above [`HARD_CAP`] is served by an anonymous `MAP_NORESERVE` mapping
//! (Linux): the kernel hands out address space without committing memory, nothing is touched,
//! and the execution goes on to fail with its typed error, while the window records the request
//! as an over-allocation finding. Code that really writes gigabytes would still grow the
//! resident set; the fuzz watchdog aborts the process (after saving the input) when RSS passes
//! its limit. Where the mapping is refused (e.g. strict overcommit) the request fails and the
//! process aborts as it would without the harness.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Single requests above this are over-allocations (and are served without committing memory).
pub const HARD_CAP: usize = 1 << 30;

static INSTALLED: AtomicBool = AtomicBool::new(false);
static ACTIVE: AtomicBool = AtomicBool::new(false);
static LIVE: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);
static LARGEST: AtomicU64 = AtomicU64::new(0);
static OVER_CAP: AtomicU64 = AtomicU64::new(0);

/// Return addresses of the first over-cap request of the window (resolved after it closes).
const MAX_FRAMES: usize = 64;
static FRAMES: [AtomicUsize; MAX_FRAMES] = [const { AtomicUsize::new(0) }; MAX_FRAMES];
static N_FRAMES: AtomicUsize = AtomicUsize::new(0);
/// Set while frames are being captured: allocations made by the unwinder itself skip capture.
static CAPTURING_FRAMES: AtomicBool = AtomicBool::new(false);

/// The counting allocator; install it with `#[global_allocator] static A: TrackingAlloc = TrackingAlloc;`.
#[derive(Debug, Default, Clone, Copy)]
pub struct TrackingAlloc;

/// What one measuring window saw.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct AllocStats {
    /// Highest net growth of live heap bytes during the window.
    pub peak_bytes: u64,
    /// Largest single allocation request.
    pub largest_request: u64,
    /// Largest request above [`HARD_CAP`], if any.
    pub over_cap_request: Option<u64>,
}

/// One window at a time: the counters are process-wide.
static WINDOW: Mutex<()> = Mutex::new(());

/// Runs `f` inside a measuring window and returns what it allocated. Windows are serialised.
pub fn measure<R>(f: impl FnOnce() -> R) -> (R, AllocStats) {
    let _one = WINDOW.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    begin();
    let r = f();
    (r, end())
}

fn begin() {
    LIVE.store(0, Relaxed);
    PEAK.store(0, Relaxed);
    LARGEST.store(0, Relaxed);
    OVER_CAP.store(0, Relaxed);
    N_FRAMES.store(0, Relaxed);
    ACTIVE.store(true, Relaxed);
}

fn end() -> AllocStats {
    ACTIVE.store(false, Relaxed);
    let over = OVER_CAP.load(Relaxed);
    AllocStats {
        peak_bytes: PEAK.load(Relaxed).max(0) as u64,
        largest_request: LARGEST.load(Relaxed),
        over_cap_request: (over > 0).then_some(over),
    }
}

/// Whether [`TrackingAlloc`] is the global allocator of this process.
pub fn is_installed() -> bool {
    let probe = std::hint::black_box(vec![0u8; 64]);
    drop(probe);
    INSTALLED.load(Relaxed)
}

/// The innermost `engine/src/…:line` frame (else the innermost frame outside std and this
/// module) of the stack that made the window's first over-cap request.
pub fn over_cap_site() -> Option<String> {
    let n = N_FRAMES.load(Relaxed).min(MAX_FRAMES);
    let mut engine = None;
    let mut other = None;
    for slot in FRAMES.iter().take(n) {
        let ip = slot.load(Relaxed) as *mut std::ffi::c_void;
        backtrace::resolve(ip, |sym| {
            if let (Some(file), Some(line)) = (sym.filename(), sym.lineno()) {
                let file = file.to_string_lossy();
                if engine.is_none() {
                    if let Some(at) = file.find("engine/src/") {
                        engine = Some(format!("{}:{line}", &file[at..]));
                    }
                }
                let ours = file.contains("fuzz/alloc.rs") || file.contains("/rustc/") || file.contains("backtrace");
                if other.is_none() && !ours {
                    other = Some(format!("{file}:{line}"));
                }
            }
        });
        if engine.is_some() {
            break;
        }
    }
    engine.or(other)
}

fn note_request(size: usize) {
    if !INSTALLED.load(Relaxed) {
        INSTALLED.store(true, Relaxed);
    }
    if ACTIVE.load(Relaxed) {
        LARGEST.fetch_max(size as u64, Relaxed);
        if size > HARD_CAP && OVER_CAP.fetch_max(size as u64, Relaxed) == 0 {
            capture_frames();
        }
    }
}

/// Records the caller's return addresses into `FRAMES` without allocating.
fn capture_frames() {
    if CAPTURING_FRAMES.swap(true, Relaxed) {
        return;
    }
    let mut n = 0;
    // SAFETY: `trace_unsynchronized` skips the crate's global lock (which would allocate here);
    // that lock guards Windows' non-reentrant dbghelp, while the libgcc unwinder used on Linux is
    // thread-safe. The flag above keeps our own calls single and the closure only stores integers.
    unsafe {
        backtrace::trace_unsynchronized(|frame| {
            if n < MAX_FRAMES {
                FRAMES[n].store(frame.ip() as usize, Relaxed);
                n += 1;
            }
            n < MAX_FRAMES
        });
    }
    N_FRAMES.store(n, Relaxed);
    CAPTURING_FRAMES.store(false, Relaxed);
}

fn add_live(size: usize) {
    if ACTIVE.load(Relaxed) {
        let now = LIVE.fetch_add(size as i64, Relaxed) + size as i64;
        PEAK.fetch_max(now, Relaxed);
    }
}

fn sub_live(size: usize) {
    if ACTIVE.load(Relaxed) {
        LIVE.fetch_sub(size as i64, Relaxed);
    }
}

/// Address-space-only mappings for requests above [`HARD_CAP`].
#[cfg(target_os = "linux")]
mod huge {
    use std::alloc::Layout;

    pub fn map(layout: Layout) -> *mut u8 {
        if layout.align() > 4096 {
            return std::ptr::null_mut();
        }
        // SAFETY: an anonymous private mapping with no address hint touches no existing memory.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                layout.size(),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            p.cast()
        }
    }

    /// # Safety
    /// `ptr` must come from [`map`] (or [`remap`]) with this `size`.
    pub unsafe fn unmap(ptr: *mut u8, size: usize) {
        // SAFETY: guaranteed by the caller.
        unsafe { libc::munmap(ptr.cast(), size) };
    }

    /// # Safety
    /// `ptr` must come from [`map`] (or [`remap`]) with size `old`.
    pub unsafe fn remap(ptr: *mut u8, old: usize, new: usize) -> *mut u8 {
        // SAFETY: guaranteed by the caller; MREMAP_MAYMOVE keeps the contents.
        let p = unsafe { libc::mremap(ptr.cast(), old, new, libc::MREMAP_MAYMOVE) };
        if p == libc::MAP_FAILED {
            std::ptr::null_mut()
        } else {
            p.cast()
        }
    }
}

#[cfg(target_os = "linux")]
fn is_huge(size: usize) -> bool {
    size > HARD_CAP
}

#[cfg(not(target_os = "linux"))]
fn is_huge(_size: usize) -> bool {
    false
}

// SAFETY: every block is either a `System` block (size <= HARD_CAP) or a private anonymous
// mapping (size > HARD_CAP, Linux only); the size in the layout, which the caller must pass back
// unchanged, tells which, so each block is freed or resized by the same mechanism that made it.
// The bookkeeping only touches atomics and never allocates.
unsafe impl GlobalAlloc for TrackingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_request(layout.size());
        #[cfg(target_os = "linux")]
        let p = if is_huge(layout.size()) { huge::map(layout) } else { unsafe { System.alloc(layout) } };
        #[cfg(not(target_os = "linux"))]
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            add_live(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_request(layout.size());
        // Fresh anonymous mappings are already zero.
        #[cfg(target_os = "linux")]
        let p = if is_huge(layout.size()) { huge::map(layout) } else { unsafe { System.alloc_zeroed(layout) } };
        #[cfg(not(target_os = "linux"))]
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            add_live(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        sub_live(layout.size());
        #[cfg(target_os = "linux")]
        if is_huge(layout.size()) {
            // SAFETY: blocks of this size were made by `huge::map`/`huge::remap`.
            unsafe { huge::unmap(ptr, layout.size()) };
            return;
        }
        // SAFETY: blocks of this size were made by `System` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        note_request(new_size);
        if !is_huge(old) && !is_huge(new_size) {
            // SAFETY: a `System` block resized by `System`, as the caller's contract requires.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                sub_live(old);
                add_live(new_size);
            }
            return p;
        }
        #[cfg(target_os = "linux")]
        if is_huge(old) && is_huge(new_size) {
            // SAFETY: both sizes are mapping-backed, so `ptr` is a mapping of `old` bytes.
            let p = unsafe { huge::remap(ptr, old, new_size) };
            if !p.is_null() {
                sub_live(old);
                add_live(new_size);
            }
            return p;
        }
        // Crossing HARD_CAP: move between the two mechanisms.
        // SAFETY: `new_size` is non-zero and, rounded to `layout.align()`, fits isize (caller's
        // contract), so the layout is valid; the copy covers the smaller of the two blocks.
        unsafe {
            let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
            let p = self.alloc(new_layout);
            if !p.is_null() {
                std::ptr::copy_nonoverlapping(ptr, p, old.min(new_size));
                self.dealloc(ptr, layout);
            }
            p
        }
    }
}
