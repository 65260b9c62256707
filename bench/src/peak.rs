//! Micro-benchmarks of this machine's arithmetic peak (instruction streams with independent
//! accumulator chains), so kernel throughput can be reported as a fraction of what the cores can do.
//! Only benchmarks measure peaks, so the probes live here rather than in the engine's kernels; the
//! streams are hand-written intrinsics, each `unsafe` block behind a run-time CPU-feature check.

use std::time::Instant;

/// Measured peak of one instruction stream.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Peak {
    /// Operations per second (FLOP/s or integer OP/s), all threads together.
    pub ops_per_s: f64,
    pub threads: usize,
}

/// Which instruction stream to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeakKind {
    /// AVX-512 `vfmadd` on zmm f32 (2 FLOP per lane).
    Avx512Fma,
    /// AVX2 `vfmadd` on ymm f32.
    Avx2Fma,
    /// AVX-512 VNNI `vpdpbusd` zmm (64 u8×i8 MACs = 128 ops).
    Avx512Vnni,
    /// AVX2 without VNNI: the shortest u8×i8 → i32 dot sequence, `vpmaddubsw` + `vpmaddwd` (by
    /// ones) + `vpaddd` on ymm (32 MACs = 64 ops per three instructions). The int8 kernels need at
    /// least these three per 32 MACs, so this is their ceiling here.
    Avx2Int8,
}

impl PeakKind {
    /// Whether this CPU can run the stream.
    pub fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                PeakKind::Avx512Fma => is_x86_feature_detected!("avx512f"),
                PeakKind::Avx2Fma => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
                PeakKind::Avx512Vnni => is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512vnni"),
                PeakKind::Avx2Int8 => is_x86_feature_detected!("avx2"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = self;
            false
        }
    }

    /// The int8 stream the int8 kernels use on this CPU: VNNI where present, else AVX2.
    pub fn int8() -> PeakKind {
        if PeakKind::Avx512Vnni.available() {
            PeakKind::Avx512Vnni
        } else {
            PeakKind::Avx2Int8
        }
    }
}

/// Runs `iters` iterations of 12 independent chains per thread on a pool of `threads`; best of `reps`.
///
/// The work is cut into 8 chunks per thread and shared by work stealing, like the GEMM kernels
/// share theirs: on a machine where other processes hold a core, fixed per-thread streams would
/// wait for the slowest thread and understate what a work-stealing kernel can get.
pub fn measure(kind: PeakKind, threads: usize, iters: u64, reps: usize) -> Option<Peak> {
    use rayon::prelude::*;
    if !kind.available() {
        return None;
    }
    let threads = threads.max(1);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().ok()?;
    let chunks = threads * 8;
    let per = (iters / 8).max(1);
    let mut best = 0.0f64;
    for _ in 0..reps.max(1) {
        let t0 = Instant::now();
        let total: f64 = pool.install(|| (0..chunks).into_par_iter().map(|_| run_stream(kind, per)).sum());
        let dt = t0.elapsed().as_secs_f64();
        best = best.max(total / dt);
    }
    Some(Peak { ops_per_s: best, threads })
}

/// One sample of `kind` on the global worker pool (the pool the kernels run on): `iters`
/// iterations of 12 chains, cut into 8 chunks per thread; returns operations per second. Meant to
/// be interleaved with kernel samples in one loop, so both see the same machine load.
pub fn sample(kind: PeakKind, iters: u64) -> Option<f64> {
    use rayon::prelude::*;
    if !kind.available() {
        return None;
    }
    let chunks = rayon::current_num_threads().max(1) * 8;
    let per = (iters / 8).max(1);
    let t0 = Instant::now();
    let total: f64 = (0..chunks).into_par_iter().map(|_| run_stream(kind, per)).sum();
    Some(total / t0.elapsed().as_secs_f64())
}

/// Returns the operation count executed.
fn run_stream(kind: PeakKind, iters: u64) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `measure` checked the CPU features each stream needs before calling.
        unsafe {
            match kind {
                PeakKind::Avx512Fma => x86::fma512(iters),
                PeakKind::Avx2Fma => x86::fma256(iters),
                PeakKind::Avx512Vnni => x86::vnni512(iters),
                PeakKind::Avx2Int8 => x86::maddubs256(iters),
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (kind, iters);
        0.0
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    macro_rules! chains12 {
        ($init:expr) => {
            [$init, $init, $init, $init, $init, $init, $init, $init, $init, $init, $init, $init]
        };
    }

    #[target_feature(enable = "avx512f")]
    pub unsafe fn fma512(iters: u64) -> f64 {
        let mut acc = chains12!(_mm512_set1_ps(0.0));
        let a = _mm512_set1_ps(0.999_999);
        let b = _mm512_set1_ps(1e-7);
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm512_fmadd_ps(*c, a, b);
            }
        }
        let mut s = _mm512_set1_ps(0.0);
        for c in acc {
            s = _mm512_add_ps(s, c);
        }
        std::hint::black_box(_mm512_reduce_add_ps(s));
        (iters * 12 * 16 * 2) as f64
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn fma256(iters: u64) -> f64 {
        let mut acc = chains12!(_mm256_set1_ps(0.0));
        let a = _mm256_set1_ps(0.999_999);
        let b = _mm256_set1_ps(1e-7);
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm256_fmadd_ps(*c, a, b);
            }
        }
        let mut s = _mm256_set1_ps(0.0);
        for c in acc {
            s = _mm256_add_ps(s, c);
        }
        let mut out = [0.0f32; 8];
        _mm256_storeu_ps(out.as_mut_ptr(), s);
        std::hint::black_box(out);
        (iters * 12 * 8 * 2) as f64
    }

    #[target_feature(enable = "avx512f,avx512vnni")]
    pub unsafe fn vnni512(iters: u64) -> f64 {
        let mut acc = chains12!(_mm512_set1_epi32(0));
        let a = _mm512_set1_epi8(3);
        let b = _mm512_set1_epi8(-2);
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm512_dpbusd_epi32(*c, a, b);
            }
        }
        let mut s = _mm512_set1_epi32(0);
        for c in acc {
            s = _mm512_add_epi32(s, c);
        }
        std::hint::black_box(_mm512_reduce_add_epi32(s));
        (iters * 12 * 64 * 2) as f64
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn maddubs256(iters: u64) -> f64 {
        let mut acc = chains12!(_mm256_set1_epi32(0));
        let a = _mm256_set1_epi8(3);
        let ones = _mm256_set1_epi16(1);
        for _ in 0..iters {
            for c in acc.iter_mut() {
                // The accumulator is also the i8 operand, so the products cannot be hoisted out of
                // the loop; 12 chains hide the latency (values are meaningless, only timing counts).
                *c = _mm256_add_epi32(*c, _mm256_madd_epi16(_mm256_maddubs_epi16(a, *c), ones));
            }
        }
        let mut s = _mm256_set1_epi32(0);
        for c in acc {
            s = _mm256_add_epi32(s, c);
        }
        let mut out = [0i32; 8];
        _mm256_storeu_si256(out.as_mut_ptr() as *mut __m256i, s);
        std::hint::black_box(out);
        (iters * 12 * 32 * 2) as f64
    }
}

/// Resident-set figures of this process from `/proc/self/status` (bytes; `None` off Linux).
pub fn rss_bytes() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = s.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_int8_stream_of_this_cpu_counts_its_operations() {
        let kind = PeakKind::int8();
        if !kind.available() {
            return; // neither VNNI nor AVX2 (not x86_64): nothing to time
        }
        // Ops per chunk: 12 chains x (64 ops per AVX2 ymm step, 128 per VNNI zmm step).
        let per_step = if kind == PeakKind::Avx512Vnni { 128.0 } else { 64.0 };
        assert_eq!(run_stream(kind, 10), 10.0 * 12.0 * per_step);
        let p = measure(kind, 1, 10_000, 1).expect("available");
        assert!(p.ops_per_s.is_finite() && p.ops_per_s > 0.0, "{p:?}");
    }
}
