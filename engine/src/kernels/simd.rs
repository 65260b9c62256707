//! Run-time instruction-set dispatch for the f32 kernels (attention, element-wise ops).
//!
//! The f32 kernels are written once as plain Rust over fixed-size lane arrays (`[f32; L]`) in
//! `#[inline(always)]` bodies, and compiled several times: inside a `#[target_feature]` wrapper
//! per instruction set ([`Simd`]), so LLVM turns the lane loops into AVX-512 (zmm), AVX2+FMA
//! (ymm) or NEON code. The release build sets no target CPU, so without these wrappers the same
//! code would be SSE2 only. [`Simd::detect`] picks the best level once (`UNMASK_F32_ISA=
//! scalar|avx2|avx512|neon` narrows it); every level's variant is checked against the kernel's
//! plain reference in its unit tests ([`Simd::all_available`]).
//!
//! The int8 GEMM has its own dispatch ([`super::int8::Isa`]); this one is for f32 code.

/// Instruction-set level of an f32 kernel variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Simd {
    /// No target features beyond the build's baseline (SSE2 on x86_64); plain `a * b + c`.
    Scalar,
    /// x86_64 AVX2 + FMA (8-lane ymm).
    Avx2,
    /// x86_64 AVX-512 F/BW/DQ/VL + FMA (16-lane zmm).
    Avx512,
    /// aarch64 NEON (4-lane q registers, `fmla`).
    Neon,
}

impl Simd {
    /// Whether this CPU can run kernels compiled for this level.
    pub fn available(self) -> bool {
        match self {
            Simd::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 => is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"),
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 => {
                is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512dq")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
            }
            #[cfg(target_arch = "aarch64")]
            Simd::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every level this CPU runs (tests compare each against the references).
    pub fn all_available() -> Vec<Simd> {
        [Simd::Scalar, Simd::Avx2, Simd::Avx512, Simd::Neon].into_iter().filter(|s| s.available()).collect()
    }

    /// The best level this CPU runs, chosen once (`UNMASK_F32_ISA` narrows it).
    pub fn detect() -> Simd {
        static BEST: std::sync::OnceLock<Simd> = std::sync::OnceLock::new();
        *BEST.get_or_init(|| {
            let forced = match std::env::var("UNMASK_F32_ISA").ok().as_deref() {
                Some("scalar") => Some(Simd::Scalar),
                Some("avx2") => Some(Simd::Avx2),
                Some("avx512") => Some(Simd::Avx512),
                Some("neon") => Some(Simd::Neon),
                _ => None,
            };
            if let Some(s) = forced.filter(|s| s.available()) {
                return s;
            }
            [Simd::Avx512, Simd::Avx2, Simd::Neon].into_iter().find(|s| s.available()).unwrap_or(Simd::Scalar)
        })
    }
}

/// Multiply-add policy of a variant: fused where the level has FMA, `a * b + c` otherwise (a
/// fused `mul_add` without hardware FMA would be a libm call per element).
pub trait MulAdd: Copy {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
    fn mul_add64(a: f64, b: f64, c: f64) -> f64;
}

/// Hardware FMA (AVX2, AVX-512, NEON variants).
#[derive(Clone, Copy)]
pub struct Fused;
/// Separate multiply and add (scalar variant).
#[derive(Clone, Copy)]
pub struct Unfused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
    #[inline(always)]
    fn mul_add64(a: f64, b: f64, c: f64) -> f64 {
        a.mul_add(b, c)
    }
}
impl MulAdd for Unfused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
    #[inline(always)]
    fn mul_add64(a: f64, b: f64, c: f64) -> f64 {
        a * b + c
    }
}

/// `e^x` to ~2 ulp for `x ≥ -87.3` (Cephes polynomial on `x - n·ln 2`), exactly 0 below
/// (masked attention scores are `-inf`); written for the vectoriser (no branches, no int casts).
#[inline(always)]
pub fn exp_approx<F: MulAdd>(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    // 1.5·2^23: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f32 = 12_582_912.0;
    let xc = x.clamp(-87.336_55, 88.722_83);
    let t = F::mul_add(xc, LOG2E, MAGIC);
    let n = t - MAGIC;
    let r = F::mul_add(n, -LN2_HI, xc);
    let r = F::mul_add(n, -LN2_LO, r);
    let mut p = 1.987_569_2e-4f32;
    p = F::mul_add(p, r, 1.398_2e-3);
    p = F::mul_add(p, r, 8.333_452e-3);
    p = F::mul_add(p, r, 4.166_579_6e-2);
    p = F::mul_add(p, r, 1.666_666_5e-1);
    p = F::mul_add(p, r, 5.000_000_1e-1);
    let p = F::mul_add(p, r * r, r) + 1.0;
    // n sits in the low bits of t's bit pattern (t's exponent is fixed over the range used).
    let bits = t.to_bits().wrapping_sub(0x4B40_0000).wrapping_add(127) << 23;
    let y = p * f32::from_bits(bits);
    if x < -87.336_55 {
        0.0
    } else {
        y
    }
}

/// `e^x` in f64 to ~1 ulp for `x ≥ -708.39`, exactly 0 below (and for `-inf`): `x = n·ln 2 + r`
/// (Cody-Waite split of ln 2), `e^r` by its Taylor series to `r^13` (|r| ≤ ln2/2, so the
/// truncation error is below 0.05 ulp), scaled by `2^n` built in the exponent bits. Written for
/// the vectoriser like [`exp_approx`]; the confidence of a token is a softmax over the whole
/// vocabulary in f64 (the reference decoders' precision), so this runs once per vocabulary entry.
#[inline(always)]
pub fn exp_f64<F: MulAdd>(x: f64) -> f64 {
    const LOG2E: f64 = std::f64::consts::LOG2_E;
    // ln 2 with its low 32 bits cleared, and the rest: n·LN2_HI is exact for |n| < 2^21.
    const LN2_HI: f64 = 6.931_471_803_691_238_164_9e-1;
    const LN2_LO: f64 = 1.908_214_929_270_587_700_02e-10;
    // 1.5·2^52: adding it rounds to an integer held in the low mantissa bits.
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    const LOW: f64 = -708.39;
    let xc = x.clamp(LOW, 709.78);
    let t = F::mul_add64(xc, LOG2E, MAGIC);
    let n = t - MAGIC;
    let r = F::mul_add64(n, -LN2_HI, xc);
    let r = F::mul_add64(n, -LN2_LO, r);
    // 1/k! for k = 13 down to 2.
    const C: [f64; 12] = [
        1.0 / 6_227_020_800.0,
        1.0 / 479_001_600.0,
        1.0 / 39_916_800.0,
        1.0 / 3_628_800.0,
        1.0 / 362_880.0,
        1.0 / 40_320.0,
        1.0 / 5_040.0,
        1.0 / 720.0,
        1.0 / 120.0,
        1.0 / 24.0,
        1.0 / 6.0,
        0.5,
    ];
    let mut p = C[0];
    for &c in &C[1..] {
        p = F::mul_add64(p, r, c);
    }
    let p = F::mul_add64(p, r * r, r) + 1.0;
    // n sits in the low bits of t's bit pattern; n ≥ -1022 after the clamp, so 2^n is normal.
    let bits = (t.to_bits().wrapping_sub(MAGIC.to_bits()).wrapping_add(1023)) << 52;
    let y = p * f64::from_bits(bits);
    if x < LOW {
        0.0
    } else {
        y
    }
}

/// Defines `pub fn NAME(simd: Simd, args) -> R` that runs one `#[inline(always)]` body compiled
/// per instruction set. The body sees the type parameter `F: MulAdd` (fused or not) and a const
/// `L` (lanes of the level: 16, 8, 4 or 4).
macro_rules! multiversion {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $(-> $ret:ty)? $body:block) => {
        $(#[$meta])*
        $vis fn $name(simd: $crate::kernels::simd::Simd, $($arg: $ty),*) $(-> $ret)? {
            // `F` is there for bodies that multiply-add; comparisons and sums (a max) need none.
            #[inline(always)]
            #[allow(non_snake_case, clippy::too_many_arguments, clippy::extra_unused_type_parameters)]
            fn body<F: $crate::kernels::simd::MulAdd, const L: usize>($($arg: $ty),*) $(-> $ret)? $body
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx512($($arg: $ty),*) $(-> $ret)? { body::<$crate::kernels::simd::Fused, 16>($($arg),*) }
            #[cfg(target_arch = "x86_64")]
            #[target_feature(enable = "avx2,fma")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn avx2($($arg: $ty),*) $(-> $ret)? { body::<$crate::kernels::simd::Fused, 8>($($arg),*) }
            #[cfg(target_arch = "aarch64")]
            #[target_feature(enable = "neon")]
            #[allow(clippy::too_many_arguments)]
            unsafe fn neon($($arg: $ty),*) $(-> $ret)? { body::<$crate::kernels::simd::Fused, 4>($($arg),*) }
            match simd {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX-512 F/BW/DQ/VL, AVX2 and FMA were detected (`Simd::available`).
                $crate::kernels::simd::Simd::Avx512 if simd.available() => unsafe { avx512($($arg),*) },
                #[cfg(target_arch = "x86_64")]
                // SAFETY: AVX2 and FMA were detected (`Simd::available`).
                $crate::kernels::simd::Simd::Avx2 if simd.available() => unsafe { avx2($($arg),*) },
                #[cfg(target_arch = "aarch64")]
                // SAFETY: NEON was detected (`Simd::available`).
                $crate::kernels::simd::Simd::Neon if simd.available() => unsafe { neon($($arg),*) },
                _ => body::<$crate::kernels::simd::Unfused, 4>($($arg),*),
            }
        }
    };
}
pub(crate) use multiversion;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_approx_is_close_to_libm() {
        let mut worst = 0.0f64;
        let mut x = -87.0f32;
        while x < 88.0 {
            let got = exp_approx::<Fused>(x) as f64;
            let want = (x as f64).exp();
            worst = worst.max(((got - want) / want).abs());
            x += 0.0137;
        }
        assert!(worst < 4e-7, "relative error {worst}");
        assert_eq!(exp_approx::<Unfused>(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_approx::<Unfused>(-100.0), 0.0);
        assert_eq!(exp_approx::<Fused>(0.0), 1.0);
    }

    #[test]
    fn exp_f64_is_within_an_ulp_or_two_of_libm() {
        let mut worst = 0.0f64;
        let mut x = -708.0f64;
        while x < 709.0 {
            for f in [exp_f64::<Fused>(x), exp_f64::<Unfused>(x)] {
                let want = x.exp();
                worst = worst.max(((f - want) / want).abs());
            }
            x += 0.001_37;
        }
        assert!(worst < 4.0 * f64::EPSILON, "relative error {worst}");
        for x in [0.0, -1e-300, 1e-300, 0.5, -0.5, 1.0] {
            assert!((exp_f64::<Fused>(x) - x.exp()).abs() <= 2.0 * f64::EPSILON * x.exp(), "{x}");
        }
        assert_eq!(exp_f64::<Fused>(0.0), 1.0);
        assert_eq!(exp_f64::<Unfused>(f64::NEG_INFINITY), 0.0);
        assert_eq!(exp_f64::<Fused>(-800.0), 0.0);
    }
}

/// Explicit f32 vectors for kernels whose register tiling the auto-vectoriser does not find
/// (attention): one implementation per x86 level over its intrinsics. Methods are
/// `#[inline(always)]` so that, inlined into a `#[target_feature]` kernel, they compile to single
/// instructions. They are `unsafe`: callers must run under the level's target features, and
/// loads/stores need `L` valid floats at the pointer.
#[cfg(target_arch = "x86_64")]
pub mod vx86 {
    use std::arch::x86_64::*;

    /// An f32 vector of `L` lanes. Kernels advance pointers with `wrapping_add`: the dev profile's
    /// `ptr::add` precondition checks would otherwise sit in the inner loops.
    pub trait Vf: Copy {
        const L: usize;
        unsafe fn zero() -> Self;
        unsafe fn splat(x: f32) -> Self;
        unsafe fn load(p: *const f32) -> Self;
        unsafe fn store(p: *mut f32, v: Self);
        /// `a * b + c`, fused.
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self;
        unsafe fn mul(a: Self, b: Self) -> Self;
        unsafe fn sub(a: Self, b: Self) -> Self;
        unsafe fn add(a: Self, b: Self) -> Self;
        unsafe fn max(a: Self, b: Self) -> Self;
        unsafe fn hmax(a: Self) -> f32;
        unsafe fn hsum(a: Self) -> f32;
        /// [`super::exp_approx`] lane-wise (0 below -87.3).
        unsafe fn exp(x: Self) -> Self;
    }

    /// 16 lanes (AVX-512F).
    #[derive(Clone, Copy)]
    pub struct Z(pub __m512);
    /// 8 lanes (AVX2 + FMA).
    #[derive(Clone, Copy)]
    pub struct Y(pub __m256);

    impl Z {
        #[inline(always)]
        unsafe fn min_(a: Self, b: Self) -> Self {
            Z(_mm512_min_ps(a.0, b.0))
        }
    }
    impl Y {
        #[inline(always)]
        unsafe fn min_(a: Self, b: Self) -> Self {
            Y(_mm256_min_ps(a.0, b.0))
        }
    }

    impl Vf for Z {
        const L: usize = 16;
        #[inline(always)]
        unsafe fn zero() -> Self {
            Z(_mm512_setzero_ps())
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            Z(_mm512_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            // Full-mask masked forms: LLVM intrinsics, free of the debug-build precondition checks
            // of `read_unaligned` (tests and `bench/run` use the dev profile).
            Z(_mm512_maskz_loadu_ps(0xFFFF, p))
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: Self) {
            _mm512_mask_storeu_ps(p, 0xFFFF, v.0)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            Z(_mm512_fmadd_ps(a.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn mul(a: Self, b: Self) -> Self {
            Z(_mm512_mul_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn sub(a: Self, b: Self) -> Self {
            Z(_mm512_sub_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            Z(_mm512_add_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn max(a: Self, b: Self) -> Self {
            Z(_mm512_max_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn hmax(a: Self) -> f32 {
            _mm512_reduce_max_ps(a.0)
        }
        #[inline(always)]
        unsafe fn hsum(a: Self) -> f32 {
            _mm512_reduce_add_ps(a.0)
        }
        #[inline(always)]
        unsafe fn exp(x: Self) -> Self {
            let xc = Z::min_(Z::max(Z::splat(-87.336_55), x), Z::splat(88.722_83));
            let t = Z::fma(xc, Z::splat(std::f32::consts::LOG2_E), Z::splat(12_582_912.0));
            let n = Z::sub(t, Z::splat(12_582_912.0));
            let r = Z::fma(n, Z::splat(-0.693_359_4), xc);
            let r = Z::fma(n, Z::splat(2.121_944_4e-4), r);
            let mut p = Z::splat(1.987_569_2e-4);
            p = Z::fma(p, r, Z::splat(1.398_2e-3));
            p = Z::fma(p, r, Z::splat(8.333_452e-3));
            p = Z::fma(p, r, Z::splat(4.166_579_6e-2));
            p = Z::fma(p, r, Z::splat(1.666_666_5e-1));
            p = Z::fma(p, r, Z::splat(5.000_000_1e-1));
            let p = Z::add(Z::fma(p, Z::mul(r, r), r), Z::splat(1.0));
            let bits = _mm512_slli_epi32::<23>(_mm512_add_epi32(
                _mm512_sub_epi32(_mm512_castps_si512(t.0), _mm512_set1_epi32(0x4B40_0000)),
                _mm512_set1_epi32(127),
            ));
            let y = Z::mul(p, Z(_mm512_castsi512_ps(bits)));
            Z(_mm512_maskz_mov_ps(!_mm512_cmp_ps_mask::<_CMP_LT_OQ>(x.0, _mm512_set1_ps(-87.336_55)), y.0))
        }
    }

    impl Vf for Y {
        const L: usize = 8;
        #[inline(always)]
        unsafe fn zero() -> Self {
            Y(_mm256_setzero_ps())
        }
        #[inline(always)]
        unsafe fn splat(x: f32) -> Self {
            Y(_mm256_set1_ps(x))
        }
        #[inline(always)]
        unsafe fn load(p: *const f32) -> Self {
            Y(_mm256_castsi256_ps(_mm256_lddqu_si256(p as *const __m256i)))
        }
        #[inline(always)]
        unsafe fn store(p: *mut f32, v: Self) {
            _mm256_maskstore_ps(p, _mm256_set1_epi32(-1), v.0)
        }
        #[inline(always)]
        unsafe fn fma(a: Self, b: Self, c: Self) -> Self {
            Y(_mm256_fmadd_ps(a.0, b.0, c.0))
        }
        #[inline(always)]
        unsafe fn mul(a: Self, b: Self) -> Self {
            Y(_mm256_mul_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn sub(a: Self, b: Self) -> Self {
            Y(_mm256_sub_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn add(a: Self, b: Self) -> Self {
            Y(_mm256_add_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn max(a: Self, b: Self) -> Self {
            Y(_mm256_max_ps(a.0, b.0))
        }
        #[inline(always)]
        unsafe fn hmax(a: Self) -> f32 {
            let m = _mm_max_ps(_mm256_castps256_ps128(a.0), _mm256_extractf128_ps::<1>(a.0));
            let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
            let m = _mm_max_ss(m, _mm_shuffle_ps::<1>(m, m));
            _mm_cvtss_f32(m)
        }
        #[inline(always)]
        unsafe fn hsum(a: Self) -> f32 {
            let s = _mm_add_ps(_mm256_castps256_ps128(a.0), _mm256_extractf128_ps::<1>(a.0));
            let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
            let s = _mm_add_ss(s, _mm_shuffle_ps::<1>(s, s));
            _mm_cvtss_f32(s)
        }
        #[inline(always)]
        unsafe fn exp(x: Self) -> Self {
            let xc = Y::min_(Y::max(Y::splat(-87.336_55), x), Y::splat(88.722_83));
            let t = Y::fma(xc, Y::splat(std::f32::consts::LOG2_E), Y::splat(12_582_912.0));
            let n = Y::sub(t, Y::splat(12_582_912.0));
            let r = Y::fma(n, Y::splat(-0.693_359_4), xc);
            let r = Y::fma(n, Y::splat(2.121_944_4e-4), r);
            let mut p = Y::splat(1.987_569_2e-4);
            p = Y::fma(p, r, Y::splat(1.398_2e-3));
            p = Y::fma(p, r, Y::splat(8.333_452e-3));
            p = Y::fma(p, r, Y::splat(4.166_579_6e-2));
            p = Y::fma(p, r, Y::splat(1.666_666_5e-1));
            p = Y::fma(p, r, Y::splat(5.000_000_1e-1));
            let p = Y::add(Y::fma(p, Y::mul(r, r), r), Y::splat(1.0));
            let bits = _mm256_slli_epi32::<23>(_mm256_add_epi32(
                _mm256_sub_epi32(_mm256_castps_si256(t.0), _mm256_set1_epi32(0x4B40_0000)),
                _mm256_set1_epi32(127),
            ));
            let y = Y::mul(p, Y(_mm256_castsi256_ps(bits)));
            Y(_mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x.0, _mm256_set1_ps(-87.336_55)), y.0))
        }
    }
}
