//! Scaled dot-product attention of a block of queries over a context of keys/values.
//!
//! The context is whatever the caller gathered (cached prefix ∪ the block itself); causal masking
//! compares absolute positions, so the same kernel serves bidirectional dLLM blocks and AR decoding.
//!
//! The kernel ([`attention`]) is batched over every query row of the window and every head: K is
//! transposed once per call into `[kv_head][d][key]` (padded to whole key tiles), then each task
//! (a run of query rows, all heads) takes MR query vectors at a time — query heads sharing a KV
//! head (GQA) are packed together so they share K/V loads — and walks the keys in tiles of
//! `KT·L` with an online softmax, so the score matrix never materialises:
//! `S = q·Kᵀ` as an MR×(KT·L) register tile (broadcast q, FMA with K rows), masking, running
//! max/sum with a vectorised `exp`, then `O += P·V` as an MR×(NC·L) register tile over `hd`.
//! Variants per instruction set ([`Simd`]: AVX-512 16 lanes, AVX2 8, NEON 4, portable 4) come from
//! one body compiled under `#[target_feature]`; each is checked against [`attention_reference`].
//! Head dims that are not a multiple of the lane count take the one-query portable path.
//!
//! K/V stay f32: at the shapes decoding uses the K/V bytes a call streams are a few MB against
//! hundreds of MB of weights per forward, so int8/f16 K/V would save no measurable time.

use rayon::prelude::*;

use super::simd::{exp_approx, Fused, MulAdd, Simd, Unfused};

/// Head layout of an attention call.
#[derive(Debug, Clone, Copy)]
pub struct HeadShape {
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// Largest head dimension of the tiled kernels (the per-task output tile lives on the stack).
pub const MAX_HEAD_DIM: usize = 256;

/// One attention call's operands.
#[derive(Clone, Copy)]
pub struct AttnArgs<'a> {
    /// `[nq, n_heads·hd]`.
    pub q: &'a [f32],
    pub q_pos: &'a [usize],
    /// `[nctx, n_kv_heads·hd]`.
    pub k: &'a [f32],
    /// `[nctx, n_kv_heads·hd]`.
    pub v: &'a [f32],
    pub k_pos: &'a [usize],
    pub shape: HeadShape,
    pub causal: bool,
}

/// `out[nq, n_heads*hd] = softmax(q·kᵀ/√hd (+mask)) · v` with GQA head sharing.
///
/// `k`/`v` are `[nctx, n_kv_heads*hd]`; with `causal`, key j is visible to query i iff
/// `k_pos[j] <= q_pos[i]`. Allocates its transposed-K buffer; the forward pass calls
/// [`attention_with`] with a reused one.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    out: &mut [f32],
    q: &[f32],
    q_pos: &[usize],
    k: &[f32],
    v: &[f32],
    k_pos: &[usize],
    shape: HeadShape,
    causal: bool,
) {
    let mut kt = Vec::new();
    attention_with(Simd::detect(), out, AttnArgs { q, q_pos, k, v, k_pos, shape, causal }, &mut kt);
}

/// Key tile (KT·L keys) of a level's variant: the transposed K is padded to a multiple of it.
fn key_tile(simd: Simd) -> usize {
    match simd {
        Simd::Avx512 => 16 * 4,
        Simd::Avx2 => 8 * 4,
        Simd::Neon => 4 * 4,
        Simd::Scalar => 4 * 2,
    }
}

fn lanes(simd: Simd) -> usize {
    match simd {
        Simd::Avx512 => 16,
        Simd::Avx2 => 8,
        Simd::Neon | Simd::Scalar => 4,
    }
}

/// [`attention`] with the variant of `simd` (falls back to the portable one where it does not
/// run) and `kt` as the transposed-K scratch (grown when too small, never shrunk).
pub fn attention_with(simd: Simd, out: &mut [f32], a: AttnArgs, kt: &mut Vec<f32>) {
    let HeadShape { n_heads, n_kv_heads, head_dim: hd } = a.shape;
    let nq = a.q_pos.len();
    let nctx = a.k_pos.len();
    let qw = n_heads * hd;
    if nq == 0 || qw == 0 {
        return;
    }
    assert!(n_kv_heads > 0 && n_heads % n_kv_heads == 0, "heads must be a multiple of KV heads");
    assert!(a.q.len() >= nq * qw && out.len() >= nq * qw, "attention: q/out too short");
    assert!(a.k.len() >= nctx * n_kv_heads * hd && a.v.len() >= nctx * n_kv_heads * hd, "attention: k/v too short");
    let simd = if simd.available() { simd } else { Simd::Scalar };
    if hd % lanes(simd) != 0 || hd > MAX_HEAD_DIM || nctx == 0 {
        return attention_portable(out, a);
    }
    let kb = key_tile(simd);
    let nctxp = nctx.div_ceil(kb) * kb;
    let kw = n_kv_heads * hd;
    let need = n_kv_heads * hd * nctxp;
    if kt.len() < need {
        kt.resize(need, 0.0);
    }
    // Transpose K per KV head: kt[kh][d][j]; padded keys are zero (and masked in the kernels).
    // By 16×16 tiles through a local buffer: each source line (16 dims of one key) and each
    // destination line (16 keys of one dim) is touched once and whole. Walking rows or columns
    // directly strides by the row width (KiBs), which maps the accesses to a few L1 sets.
    kt[..need].par_chunks_mut(hd * nctxp).enumerate().for_each(|(kh, dst)| {
        let mut tile = [[0.0f32; 16]; 16];
        for jb in (0..nctx).step_by(16) {
            let nj = (nctx - jb).min(16);
            for db in (0..hd).step_by(16) {
                let nd = (hd - db).min(16);
                for (jj, t) in tile.iter_mut().enumerate().take(nj) {
                    t[..nd].copy_from_slice(&a.k[(jb + jj) * kw + kh * hd + db..][..nd]);
                }
                for dd in 0..nd {
                    let col = &mut dst[(db + dd) * nctxp + jb..][..nj];
                    for (x, t) in col.iter_mut().zip(&tile) {
                        *x = t[dd];
                    }
                }
            }
        }
        for col in dst.chunks_exact_mut(nctxp) {
            col[nctx..].iter_mut().for_each(|x| *x = 0.0);
        }
    });
    let kt: &[f32] = &kt[..need];
    // Tasks: runs of up to 64 query rows × runs of KV heads, enough of them to balance the pool;
    // each K/V head is then streamed once per row run.
    let threads = rayon::current_num_threads().max(1);
    let rows = nq.min(64);
    let row_runs = nq.div_ceil(rows);
    let head_runs = (4 * threads).div_ceil(row_runs).clamp(1, n_kv_heads);
    let heads = n_kv_heads.div_ceil(head_runs);
    let head_runs = n_kv_heads.div_ceil(heads);
    let outp = OutPtr(out.as_mut_ptr());
    (0..row_runs * head_runs).into_par_iter().for_each(|t| {
        let outp = outp;
        let (rr, hr) = (t / head_runs, t % head_runs);
        let i0 = rr * rows;
        let task = Task {
            a,
            kt,
            nctx,
            nctxp,
            i0,
            n: rows.min(nq - i0),
            kh0: hr * heads,
            kh1: ((hr + 1) * heads).min(n_kv_heads),
            out: outp.0,
        };
        match simd {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: `simd.available()` confirmed AVX-512 F/BW/DQ/VL, AVX2 and FMA; tasks write
            // disjoint (row, head) blocks of `out`, whose size was checked above.
            Simd::Avx512 => unsafe { x86::avx512(&task) },
            #[cfg(target_arch = "x86_64")]
            // SAFETY: as above, with AVX2 and FMA.
            Simd::Avx2 => unsafe { x86::avx2(&task) },
            #[cfg(target_arch = "aarch64")]
            // SAFETY: as above, with NEON.
            Simd::Neon => unsafe { arm::neon(&task) },
            // SAFETY: as above (no target features needed).
            _ => unsafe { run_task::<Unfused, 4, 4, 2, 2>(&task) },
        }
    });
}

/// The output pointer shared by the tasks.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: tasks write disjoint (row, head) blocks of the output.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

/// One task: query rows `i0..i0+n` × KV heads `kh0..kh1` (and their query heads); writes only
/// that block of the output (`[nq, n_heads·hd]` at `out`).
struct Task<'a> {
    a: AttnArgs<'a>,
    kt: &'a [f32],
    nctx: usize,
    nctxp: usize,
    i0: usize,
    n: usize,
    kh0: usize,
    kh1: usize,
    out: *mut f32,
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::simd::vx86::{Vf, Y, Z};
    use super::*;

    #[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")]
    pub unsafe fn avx512(t: &Task) {
        // 6×64 score tile = 24 zmm (+4 K), 6×64 output tile = 24 zmm (+4 V).
        tiled::<Z, 6, 4, 4>(t)
    }

    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2(t: &Task) {
        // 4×32 score tile = 16 ymm would leave no room for K: 3×32 = 12 (+4 K); 3×16 output = 6.
        tiled::<Y, 3, 4, 2>(t)
    }

    /// The tiled kernel over explicit vectors `V` (`V::L` lanes): MR query vectors per tile,
    /// `KT·L` keys per tile, output passes of `NC·L` head dims (narrower for the remainder).
    ///
    /// SAFETY (for every raw load/store below): `attention_with` checked `q`, `k`, `v`, `out`
    /// against the shape; `kt` holds `n_kv_heads·hd·nctxp` floats with `nctxp` a multiple of
    /// `KT·L`; `hd` is a multiple of `L` and at most `MAX_HEAD_DIM`; V rows are read only for
    /// keys `< nctx`.
    #[inline(always)]
    unsafe fn tiled<V: Vf, const MR: usize, const KT: usize, const NC: usize>(t: &Task) {
        let AttnArgs { q, q_pos, v, k_pos, shape, causal, .. } = t.a;
        let HeadShape { n_heads, n_kv_heads, head_dim: hd } = shape;
        let (qw, kw) = (n_heads * hd, n_kv_heads * hd);
        let group = n_heads / n_kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let l = V::L;
        let kb = KT * l;
        let nvec = group * t.n;
        let (qp_, vp, ktp, outp) = (q.as_ptr(), v.as_ptr(), t.kt.as_ptr(), t.out);
        // P of one tile, [MR][KT·L] (at most 4 × 64 keys).
        let mut pbuf = [[0.0f32; 64]; MR];
        let mut o = [[0.0f32; MAX_HEAD_DIM]; MR];
        for kh in t.kh0..t.kh1 {
            let ktb = ktp.wrapping_add(kh * hd * t.nctxp);
            let mut base = 0;
            while base < nvec {
                let mr = (nvec - base).min(MR);
                let mut qoff = [0usize; MR];
                let mut qpos = [0usize; MR];
                for r in 0..MR {
                    let idx = base + r.min(mr - 1);
                    let (h, i) = (kh * group + idx / t.n, idx % t.n);
                    qoff[r] = (t.i0 + i) * qw + h * hd;
                    qpos[r] = q_pos[t.i0 + i];
                }
                let mut m = [f32::NEG_INFINITY; MR];
                let mut lsum = [0.0f32; MR];
                for orow in o.iter_mut() {
                    for c in (0..hd).step_by(l) {
                        V::store(orow.as_mut_ptr().wrapping_add(c), V::zero());
                    }
                }
                let mut j0 = 0;
                while j0 < t.nctx {
                    let mut s = [[V::zero(); KT]; MR];
                    let mut kp = ktb.wrapping_add(j0);
                    let mut qr = [qp_; MR];
                    for r in 0..MR {
                        qr[r] = qp_.wrapping_add(qoff[r]);
                    }
                    for _ in 0..hd {
                        let mut kv = [V::zero(); KT];
                        for c in 0..KT {
                            kv[c] = V::load(kp.wrapping_add(c * l));
                        }
                        kp = kp.wrapping_add(t.nctxp);
                        for r in 0..MR {
                            let qd = V::splat(qr[r].read());
                            qr[r] = qr[r].wrapping_add(1);
                            for c in 0..KT {
                                s[r][c] = V::fma(qd, kv[c], s[r][c]);
                            }
                        }
                    }
                    let valid = (t.nctx - j0).min(kb);
                    let sc = V::splat(scale);
                    let mut corr = [1.0f32; MR];
                    let mut live = false;
                    for r in 0..MR {
                        for c in 0..KT {
                            V::store(pbuf[r].as_mut_ptr().wrapping_add(c * l), V::mul(s[r][c], sc));
                        }
                        if valid < kb || causal {
                            for j in 0..kb {
                                if j >= valid || (causal && k_pos[j0 + j] > qpos[r]) {
                                    pbuf[r][j] = f32::NEG_INFINITY;
                                }
                            }
                        }
                        let mut mx = V::load(pbuf[r].as_ptr());
                        for c in 1..KT {
                            mx = V::max(mx, V::load(pbuf[r].as_ptr().wrapping_add(c * l)));
                        }
                        let tmax = V::hmax(mx);
                        if tmax == f32::NEG_INFINITY {
                            pbuf[r][..kb].iter_mut().for_each(|x| *x = 0.0);
                            continue;
                        }
                        live = true;
                        let mnew = m[r].max(tmax);
                        corr[r] = super::super::simd::exp_approx::<Fused>(m[r] - mnew);
                        m[r] = mnew;
                        let mv = V::splat(mnew);
                        let mut acc = V::zero();
                        for c in 0..KT {
                            let p = V::exp(V::sub(V::load(pbuf[r].as_ptr().wrapping_add(c * l)), mv));
                            V::store(pbuf[r].as_mut_ptr().wrapping_add(c * l), p);
                            acc = V::add(acc, p);
                        }
                        lsum[r] = lsum[r] * corr[r] + V::hsum(acc);
                    }
                    if live {
                        let voff = kh * hd;
                        let mut c0 = 0;
                        while c0 < hd {
                            let left = (hd - c0) / l;
                            if left >= NC {
                                pv::<V, MR, NC>(&pbuf, &corr, &mut o, vp, j0, valid, voff + c0, kw, c0);
                                c0 += NC * l;
                            } else if left >= 2 {
                                pv::<V, MR, 2>(&pbuf, &corr, &mut o, vp, j0, valid, voff + c0, kw, c0);
                                c0 += 2 * l;
                            } else {
                                pv::<V, MR, 1>(&pbuf, &corr, &mut o, vp, j0, valid, voff + c0, kw, c0);
                                c0 += l;
                            }
                        }
                    }
                    j0 += kb;
                }
                for r in 0..mr {
                    let inv = V::splat(if lsum[r] > 0.0 { 1.0 / lsum[r] } else { 0.0 });
                    let dst = outp.wrapping_add(qoff[r]);
                    for c in (0..hd).step_by(l) {
                        V::store(dst.wrapping_add(c), V::mul(V::load(o[r].as_ptr().wrapping_add(c)), inv));
                    }
                }
                base += mr;
            }
        }
    }

    /// `o[r][c0..c0+NC·L] = corr[r]·o[r][..] + Σ_j P[r][j]·V[j0+j][voff..]` over the valid keys.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn pv<V: Vf, const MR: usize, const NC: usize>(
        p: &[[f32; 64]; MR],
        corr: &[f32; MR],
        o: &mut [[f32; MAX_HEAD_DIM]; MR],
        v: *const f32,
        j0: usize,
        valid: usize,
        voff: usize,
        kw: usize,
        c0: usize,
    ) {
        let l = V::L;
        let mut acc = [[V::zero(); NC]; MR];
        for r in 0..MR {
            let cr = V::splat(corr[r]);
            for n in 0..NC {
                acc[r][n] = V::mul(V::load(o[r].as_ptr().wrapping_add(c0 + n * l)), cr);
            }
        }
        let mut vr = v.wrapping_add(j0 * kw + voff);
        let mut pr = [p[0].as_ptr(); MR];
        for r in 0..MR {
            pr[r] = p[r].as_ptr();
        }
        for _ in 0..valid {
            let mut vv = [V::zero(); NC];
            for n in 0..NC {
                vv[n] = V::load(vr.wrapping_add(n * l));
            }
            vr = vr.wrapping_add(kw);
            for r in 0..MR {
                let pj = V::splat(pr[r].read());
                pr[r] = pr[r].wrapping_add(1);
                for n in 0..NC {
                    acc[r][n] = V::fma(pj, vv[n], acc[r][n]);
                }
            }
        }
        for r in 0..MR {
            for n in 0..NC {
                V::store(o[r].as_mut_ptr().wrapping_add(c0 + n * l), acc[r][n]);
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::*;

    #[target_feature(enable = "neon")]
    pub unsafe fn neon(t: &Task) {
        // 4×16 score tile = 16 q registers, 4×16 output tile = 16.
        run_task::<Fused, 4, 4, 4, 4>(t)
    }
}

/// The tiled kernel body: `L` lanes, `MR` query vectors per tile, `KT·L` keys per tile, output
/// passes of `NC·L` head dims (with narrower passes for the remainder).
#[inline(always)]
///
/// # Safety
/// `t.out` must point at the `[nq, n_heads·hd]` output, of which only this task writes its block.
unsafe fn run_task<F: MulAdd, const L: usize, const MR: usize, const KT: usize, const NC: usize>(t: &Task) {
    let AttnArgs { q, q_pos, v, k_pos, shape, causal, .. } = t.a;
    let HeadShape { n_heads, n_kv_heads, head_dim: hd } = shape;
    let (qw, kw) = (n_heads * hd, n_kv_heads * hd);
    let group = n_heads / n_kv_heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let kb = KT * L;
    let nvec = group * t.n;
    for kh in t.kh0..t.kh1 {
        let ktb = &t.kt[kh * hd * t.nctxp..(kh + 1) * hd * t.nctxp];
        let mut base = 0;
        while base < nvec {
            let mr = (nvec - base).min(MR);
            // Query vector r of the tile: head kh·group + (idx / n), row idx % n of the task.
            let mut qoff = [0usize; MR];
            let mut qp = [0usize; MR];
            for r in 0..MR {
                let idx = base + r.min(mr - 1);
                let (h, i) = (kh * group + idx / t.n, idx % t.n);
                qoff[r] = (t.i0 + i) * qw + h * hd;
                qp[r] = q_pos[t.i0 + i];
            }
            let mut m = [f32::NEG_INFINITY; MR];
            let mut l = [0.0f32; MR];
            let mut o = [[0.0f32; MAX_HEAD_DIM]; MR];
            let mut j0 = 0;
            while j0 < t.nctx {
                // S = q·K over the tile.
                let mut s = [[[0.0f32; L]; KT]; MR];
                for d in 0..hd {
                    let krow = &ktb[d * t.nctxp + j0..d * t.nctxp + j0 + kb];
                    let mut kv = [[0.0f32; L]; KT];
                    for c in 0..KT {
                        kv[c].copy_from_slice(&krow[c * L..(c + 1) * L]);
                    }
                    for r in 0..MR {
                        let qd = q[qoff[r] + d];
                        for c in 0..KT {
                            for x in 0..L {
                                s[r][c][x] = F::mul_add(qd, kv[c][x], s[r][c][x]);
                            }
                        }
                    }
                }
                let valid = (t.nctx - j0).min(kb);
                // Scale, mask, online softmax update; s becomes P.
                let mut corr = [1.0f32; MR];
                let mut live = [false; MR];
                for r in 0..MR {
                    let mut tmax = f32::NEG_INFINITY;
                    for c in 0..KT {
                        for x in 0..L {
                            let j = c * L + x;
                            let masked = j >= valid || (causal && k_pos[(j0 + j).min(t.nctx - 1)] > qp[r]);
                            let val = if masked { f32::NEG_INFINITY } else { s[r][c][x] * scale };
                            s[r][c][x] = val;
                            tmax = tmax.max(val);
                        }
                    }
                    if tmax == f32::NEG_INFINITY {
                        // Every key of this tile is masked for this query: P is zero, state unchanged.
                        s[r] = [[0.0; L]; KT];
                        continue;
                    }
                    live[r] = true;
                    let mnew = m[r].max(tmax);
                    corr[r] = exp_approx::<F>(m[r] - mnew);
                    m[r] = mnew;
                    let mut sum = [0.0f32; L];
                    for c in 0..KT {
                        for x in 0..L {
                            let p = exp_approx::<F>(s[r][c][x] - mnew);
                            s[r][c][x] = p;
                            sum[x] += p;
                        }
                    }
                    l[r] = l[r] * corr[r] + sum.iter().sum::<f32>();
                }
                if live.iter().any(|&x| x) {
                    let mut c0 = 0;
                    while c0 < hd {
                        let left = (hd - c0) / L;
                        if left >= NC {
                            pv::<F, L, MR, KT, NC>(&s, &corr, &mut o, v, j0, valid, kh * hd + c0, kw, c0);
                            c0 += NC * L;
                        } else if left >= 2 && NC > 2 {
                            pv::<F, L, MR, KT, 2>(&s, &corr, &mut o, v, j0, valid, kh * hd + c0, kw, c0);
                            c0 += 2 * L;
                        } else {
                            pv::<F, L, MR, KT, 1>(&s, &corr, &mut o, v, j0, valid, kh * hd + c0, kw, c0);
                            c0 += L;
                        }
                    }
                }
                j0 += kb;
            }
            for r in 0..mr {
                let inv = if l[r] > 0.0 { 1.0 / l[r] } else { 0.0 };
                for d in 0..hd {
                    // SAFETY: (row, head) of this task's block, inside the checked output.
                    *t.out.add(qoff[r] + d) = o[r][d] * inv;
                }
            }
            base += mr;
        }
    }
}

/// `o[r][c0..c0+NC·L] = corr[r]·o[r][..] + Σ_j P[r][j]·V[j0+j][voff..]` over the tile's valid keys.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn pv<F: MulAdd, const L: usize, const MR: usize, const KT: usize, const NC: usize>(
    p: &[[[f32; L]; KT]; MR],
    corr: &[f32; MR],
    o: &mut [[f32; MAX_HEAD_DIM]; MR],
    v: &[f32],
    j0: usize,
    valid: usize,
    voff: usize,
    kw: usize,
    c0: usize,
) {
    let mut acc = [[[0.0f32; L]; NC]; MR];
    for r in 0..MR {
        for n in 0..NC {
            for x in 0..L {
                acc[r][n][x] = o[r][c0 + n * L + x] * corr[r];
            }
        }
    }
    for j in 0..valid {
        let row = &v[(j0 + j) * kw + voff..(j0 + j) * kw + voff + NC * L];
        let mut vv = [[0.0f32; L]; NC];
        for n in 0..NC {
            vv[n].copy_from_slice(&row[n * L..(n + 1) * L]);
        }
        for r in 0..MR {
            let pj = p[r][j / L][j % L];
            for n in 0..NC {
                for x in 0..L {
                    acc[r][n][x] = F::mul_add(pj, vv[n][x], acc[r][n][x]);
                }
            }
        }
    }
    for r in 0..MR {
        for n in 0..NC {
            o[r][c0 + n * L..c0 + (n + 1) * L].copy_from_slice(&acc[r][n]);
        }
    }
}

/// One query at a time, any head dim (the fallback for shapes the tiled kernels do not take).
fn attention_portable(out: &mut [f32], a: AttnArgs) {
    let HeadShape { n_heads, n_kv_heads, head_dim: hd } = a.shape;
    let qw = n_heads * hd;
    let kw = n_kv_heads * hd;
    let group = n_heads / n_kv_heads;
    let nctx = a.k_pos.len();
    let scale = 1.0 / (hd as f32).sqrt();
    let nq = a.q_pos.len();
    out[..nq * qw].par_chunks_mut(qw).zip(a.q.par_chunks(qw)).zip(a.q_pos.par_iter()).for_each(
        |((orow, qrow), &qp)| {
            for h in 0..n_heads {
                let kh = h / group;
                let qh = &qrow[h * hd..(h + 1) * hd];
                let o = &mut orow[h * hd..(h + 1) * hd];
                o.iter_mut().for_each(|x| *x = 0.0);
                let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
                for j in 0..nctx {
                    if a.causal && a.k_pos[j] > qp {
                        continue;
                    }
                    let kr = &a.k[j * kw + kh * hd..j * kw + (kh + 1) * hd];
                    let s = qh.iter().zip(kr).map(|(x, y)| x * y).sum::<f32>() * scale;
                    let mnew = m.max(s);
                    let c = (m - mnew).exp();
                    let p = (s - mnew).exp();
                    l = l * c + p;
                    let vr = &a.v[j * kw + kh * hd..j * kw + (kh + 1) * hd];
                    for (x, &y) in o.iter_mut().zip(vr) {
                        *x = *x * c + p * y;
                    }
                    m = mnew;
                }
                let inv = if l > 0.0 { 1.0 / l } else { 0.0 };
                o.iter_mut().for_each(|x| *x *= inv);
            }
        },
    );
}

/// Reference: materialises every score row, f64 accumulation (tests only).
#[allow(clippy::too_many_arguments)]
pub fn attention_reference(
    out: &mut [f32],
    q: &[f32],
    q_pos: &[usize],
    k: &[f32],
    v: &[f32],
    k_pos: &[usize],
    shape: HeadShape,
    causal: bool,
) {
    let HeadShape { n_heads, n_kv_heads, head_dim: hd } = shape;
    let (qw, kw, group) = (n_heads * hd, n_kv_heads * hd, n_heads / n_kv_heads);
    for (i, &qp) in q_pos.iter().enumerate() {
        for h in 0..n_heads {
            let kh = h / group;
            let s: Vec<f64> = (0..k_pos.len())
                .map(|j| {
                    if causal && k_pos[j] > qp {
                        f64::NEG_INFINITY
                    } else {
                        (0..hd).map(|d| q[i * qw + h * hd + d] as f64 * k[j * kw + kh * hd + d] as f64).sum::<f64>()
                            / (hd as f64).sqrt()
                    }
                })
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            if m == f64::NEG_INFINITY {
                for d in 0..hd {
                    out[i * qw + h * hd + d] = 0.0;
                }
                continue;
            }
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for d in 0..hd {
                let acc: f64 = (0..k_pos.len()).map(|j| e[j] * v[j * kw + kh * hd + d] as f64).sum();
                out[i * qw + h * hd + d] = (acc / z) as f32;
            }
        }
    }
}

/// FLOPs of one call (`q·k` and `p·v`, 2 per multiply-add), the figure throughput reports use.
pub fn flops(nq: usize, nctx: usize, shape: HeadShape) -> f64 {
    4.0 * (nq * nctx * shape.n_heads * shape.head_dim) as f64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn case(nq: usize, nctx: usize, shape: HeadShape, seed: u64) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let f = |i: usize, s: u64| (((i as u64 * 2654435761 + s) % 2001) as f32 / 1000.0) - 1.0;
        let (qw, kw) = (shape.n_heads * shape.head_dim, shape.n_kv_heads * shape.head_dim);
        let q: Vec<f32> = (0..nq * qw).map(|i| f(i, seed)).collect();
        let k: Vec<f32> = (0..nctx * kw).map(|i| f(i, seed + 7)).collect();
        let v: Vec<f32> = (0..nctx * kw).map(|i| f(i, seed + 13)).collect();
        (q, k, v)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Every variant this CPU runs (and the portable path for odd head dims) against the reference.
        #[test]
        fn every_variant_matches_reference(nq in 1usize..40, nctx in 1usize..150, kvh in 1usize..3, group in 1usize..4,
                                   hd in prop::sample::select(vec![4usize, 8, 12, 16, 48, 64, 128]), causal: bool,
                                   shuffled: bool, seed in 0u64..1000) {
            let shape = HeadShape { n_heads: kvh * group, n_kv_heads: kvh, head_dim: hd };
            let (q, k, v) = case(nq, nctx, shape, seed);
            let mut k_pos: Vec<usize> = (0..nctx).collect();
            if shuffled {
                // Cached rows first, block rows after, positions interleaved (dual-cache gathers).
                k_pos.reverse();
            }
            // Queries sit at the end of the context, as in block decoding.
            let q_pos: Vec<usize> = (0..nq).map(|i| nctx.saturating_sub(nq) + i).collect();
            let mut want = vec![0.0; nq * shape.n_heads * hd];
            attention_reference(&mut want, &q, &q_pos, &k, &v, &k_pos, shape, causal);
            let a = AttnArgs { q: &q, q_pos: &q_pos, k: &k, v: &v, k_pos: &k_pos, shape, causal };
            for simd in Simd::all_available() {
                let mut got = vec![f32::NAN; want.len()];
                let mut kt = Vec::new();
                attention_with(simd, &mut got, a, &mut kt);
                for (x, y) in got.iter().zip(&want) {
                    prop_assert!((x - y).abs() < 2e-5, "{:?}: {} vs {}", simd, x, y);
                }
            }
            let mut got = vec![f32::NAN; want.len()];
            attention_portable(&mut got, a);
            for (x, y) in got.iter().zip(&want) {
                prop_assert!((x - y).abs() < 2e-5, "portable: {} vs {}", x, y);
            }
        }
    }

    #[test]
    fn scratch_is_reused_across_shapes() {
        let shape = HeadShape { n_heads: 4, n_kv_heads: 2, head_dim: 16 };
        let mut kt = Vec::new();
        for (nq, nctx) in [(40, 200), (3, 17), (64, 64)] {
            let (q, k, v) = case(nq, nctx, shape, 3);
            let k_pos: Vec<usize> = (0..nctx).collect();
            let q_pos: Vec<usize> = (nctx - nq.min(nctx)..nctx).chain(0..nq.saturating_sub(nctx)).collect();
            let mut want = vec![0.0; nq * 64];
            attention_reference(&mut want, &q, &q_pos, &k, &v, &k_pos, shape, true);
            let mut got = vec![0.0; nq * 64];
            attention_with(
                Simd::detect(),
                &mut got,
                AttnArgs { q: &q, q_pos: &q_pos, k: &k, v: &v, k_pos: &k_pos, shape, causal: true },
                &mut kt,
            );
            for (x, y) in got.iter().zip(&want) {
                assert!((x - y).abs() < 2e-5);
            }
        }
    }
}
