//! The persistent worker pool every kernel runs on, sized to the machine unless configured.

use std::sync::OnceLock;

static POOL_THREADS: OnceLock<usize> = OnceLock::new();

/// Sets the number of worker threads (first call wins; later calls return the size in force).
/// `0` means one per available core. Honours `UNMASK_THREADS` when `n == 0`.
pub fn init(n: usize) -> usize {
    *POOL_THREADS.get_or_init(|| {
        let env = std::env::var("UNMASK_THREADS").ok().and_then(|s| s.parse::<usize>().ok());
        let n = if n > 0 { n } else { env.unwrap_or(0) };
        let n = if n > 0 { n } else { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) };
        // A pool that was already built (by a test harness, say) keeps its size.
        let _ = rayon::ThreadPoolBuilder::new().num_threads(n).build_global();
        rayon::current_num_threads()
    })
}

/// Number of threads kernels may use.
pub fn count() -> usize {
    init(0)
}
