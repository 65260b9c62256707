//! Randomized comparison of the aarch64 kernels with a plain reference on ragged shapes
//! (m, n, k not multiples of the tile), on both scale groupings and on partial panel ranges.

use crate::int8_aarch64::{self as k8, Panels, Rows, PANEL};

/// splitmix64: a small deterministic generator (the crate has no dependencies).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn code(&mut self) -> i8 {
        (self.below(255) as i32 - 127) as i8
    }
    fn scale(&mut self) -> f32 {
        0.001 + self.below(1000) as f32 * 1e-4
    }
}

/// One GEMM problem: unpadded codes and scales plus their packed forms.
struct Case {
    m: usize,
    n: usize,
    k: usize,
    kp: usize,
    group: usize,
    qw: Vec<i8>,
    sw: Vec<f32>,
    qx: Vec<i8>,
    sx: Vec<f32>,
    data: Vec<i8>,
    scales: Vec<f32>,
    xdata: Vec<u8>,
}

impl Case {
    fn new(m: usize, n: usize, k: usize, per_row: bool, unit_scales: bool, rng: &mut Rng) -> Case {
        let kp = k.div_ceil(32) * 32;
        let group = if per_row { kp } else { 32 };
        let ng = kp / group;
        let qw: Vec<i8> = (0..n * k).map(|_| rng.code()).collect();
        let qx: Vec<i8> = (0..m * k).map(|_| rng.code()).collect();
        let sw: Vec<f32> = (0..n * ng).map(|_| if unit_scales { 1.0 } else { rng.scale() }).collect();
        let sx: Vec<f32> = (0..m).map(|_| if unit_scales { 1.0 } else { rng.scale() }).collect();
        Self::pack(m, n, k, group, qw, sw, qx, sx)
    }

    #[allow(clippy::too_many_arguments)]
    fn pack(m: usize, n: usize, k: usize, group: usize, qw: Vec<i8>, sw: Vec<f32>, qx: Vec<i8>, sx: Vec<f32>) -> Case {
        let kp = k.div_ceil(32) * 32;
        let ng = kp / group;
        let np = n.div_ceil(PANEL);
        let mut data = vec![0i8; np * kp * PANEL];
        let mut scales = vec![0.0f32; np * ng * PANEL];
        for j in 0..n {
            let (p, r) = (j / PANEL, j % PANEL);
            for t in 0..k {
                data[p * kp * PANEL + k8::oct_offset(r, t)] = qw[j * k + t];
            }
            for g in 0..ng {
                scales[p * ng * PANEL + g * PANEL + r] = sw[j * ng + g];
            }
        }
        let mut xdata = vec![0u8; m * kp];
        for i in 0..m {
            for t in 0..k {
                xdata[i * kp + t] = qx[i * k + t] as u8;
            }
        }
        Case { m, n, k, kp, group, qw, sw, qx, sx, data, scales, xdata }
    }

    fn views(&self) -> (Panels<'_>, Rows<'_>) {
        let w = Panels { data: &self.data, scales: &self.scales, n: self.n, kp: self.kp, group: self.group };
        let x = Rows { data: &self.xdata, scales: &self.sx, kp: self.kp };
        (w, x)
    }

    /// Plain triple loop on the unpacked codes: i32 sums per group, f64 outside.
    fn reference(&self) -> Vec<f32> {
        let ng = self.kp / self.group;
        let mut y = vec![0.0f32; self.m * self.n];
        for i in 0..self.m {
            for j in 0..self.n {
                let mut acc = 0.0f64;
                for g in 0..ng {
                    let mut s = 0i32;
                    for t in (g * self.group..(g + 1) * self.group).filter(|&t| t < self.k) {
                        s += self.qx[i * self.k + t] as i32 * self.qw[j * self.k + t] as i32;
                    }
                    acc += self.sw[j * ng + g] as f64 * s as f64;
                }
                y[i * self.n + j] = (self.sx[i] as f64 * acc) as f32;
            }
        }
        y
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kernel {
    Scalar,
    Dot,
    I8mm,
}

/// The kernels this CPU can run (scalar always).
fn kernels() -> Vec<Kernel> {
    let mut v = vec![Kernel::Scalar];
    if k8::dot_available() {
        v.push(Kernel::Dot);
    }
    if k8::i8mm_available() {
        v.push(Kernel::I8mm);
    }
    v
}

/// Runs `kernel` on panels `p0..p1` into a NaN-filled output.
fn run(kernel: Kernel, c: &Case, p0: usize, p1: usize) -> Vec<f32> {
    let (w, x) = c.views();
    let mut y = vec![f32::NAN; c.m * c.n];
    assert!(k8::shapes_ok(&w, &x, c.m, p0, p1, y.len()));
    match kernel {
        Kernel::Scalar => k8::scalar_panels(&w, &x, c.m, p0, p1, &mut y),
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `kernels()` detected dotprod; `shapes_ok` holds; `y` is exclusively ours.
        Kernel::Dot => unsafe { k8::dot_panels(&w, &x, c.m, p0, p1, y.as_mut_ptr()) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: `kernels()` detected i8mm; `shapes_ok` holds; `y` is exclusively ours.
        Kernel::I8mm => unsafe { k8::i8mm_panels(&w, &x, c.m, p0, p1, y.as_mut_ptr()) },
        #[cfg(not(target_arch = "aarch64"))]
        _ => unreachable!("SIMD kernels are only detected on aarch64"),
    }
    y
}

/// Columns of panels `p0..p1` match `want` within `tol`; all others are untouched (NaN).
fn check(kernel: Kernel, c: &Case, p0: usize, p1: usize, want: &[f32], tol: f32) {
    let got = run(kernel, c, p0, p1);
    for i in 0..c.m {
        for j in 0..c.n {
            let (g, w) = (got[i * c.n + j], want[i * c.n + j]);
            let inside = (p0 * PANEL..p1 * PANEL).contains(&j);
            let ok = if inside { (g - w).abs() <= tol } else { g.is_nan() };
            assert!(
                ok,
                "{kernel:?} m={} n={} k={} group={} panels {p0}..{p1}: y[{i},{j}] = {g}, want {}",
                c.m,
                c.n,
                c.k,
                c.group,
                if inside { w } else { f32::NAN }
            );
        }
    }
}

/// `UNMASK_EXPECT_AARCH64=dotprod,i8mm` (or `dotprod`, or `none`) states what the emulated CPU
/// has, so a detection failure cannot silently reduce the run to the scalar kernel.
#[test]
fn cpu_features_as_expected() {
    let Ok(want) = std::env::var("UNMASK_EXPECT_AARCH64") else {
        eprintln!("UNMASK_EXPECT_AARCH64 not set: detected dotprod={} i8mm={}", k8::dot_available(), k8::i8mm_available());
        return;
    };
    let want: Vec<&str> = want.split(',').collect();
    assert_eq!(k8::dot_available(), want.contains(&"dotprod"), "dotprod detection");
    assert_eq!(k8::i8mm_available(), want.contains(&"i8mm"), "i8mm detection");
}

/// Unit scales: every kernel computes the exact integer dot products on random ragged shapes.
#[test]
fn integer_sums_are_exact() {
    let mut rng = Rng(1);
    for case in 0..150 {
        let (m, n, k) = (1 + rng.below(23), 1 + rng.below(75), 1 + rng.below(300));
        let c = Case::new(m, n, k, case % 2 == 0, true, &mut rng);
        let want = c.reference();
        let np = n.div_ceil(PANEL);
        for kernel in kernels() {
            check(kernel, &c, 0, np, &want, 0.0);
        }
    }
}

/// Random scales and partial panel ranges (as the engine's column tasks run them).
#[test]
fn scaled_outputs_match_reference() {
    let mut rng = Rng(2);
    for case in 0..150 {
        let (m, n, k) = (1 + rng.below(23), 1 + rng.below(75), 1 + rng.below(300));
        let c = Case::new(m, n, k, case % 3 == 0, false, &mut rng);
        let want = c.reference();
        let tol = 1e-5 * want.iter().fold(1e-6f32, |a, v| a.max(v.abs()));
        let np = n.div_ceil(PANEL);
        let p0 = rng.below(np);
        let p1 = p0 + 1 + rng.below(np - p0);
        for kernel in kernels() {
            check(kernel, &c, p0, p1, &want, tol);
        }
    }
}

/// Longest LLaDA-8B row (k = 12288) with all codes at ±127: the i32 per-row sum is the largest
/// the engine can produce and must not overflow; the result is exact in f32.
#[test]
fn extreme_codes_do_not_overflow() {
    let (m, n, k) = (5, 19, 12288);
    for sign in [1i8, -1] {
        let qw = vec![127 * sign; n * k];
        let qx = vec![127i8; m * k];
        let c = Case::pack(m, n, k, k, qw, vec![1.0; n], qx, vec![1.0; m]);
        let want = c.reference();
        assert_eq!(want[0], sign as f32 * 127.0 * 127.0 * k as f32);
        for kernel in kernels() {
            check(kernel, &c, 0, n.div_ceil(PANEL), &want, 0.0);
        }
    }
}
