#!/usr/bin/env python3
"""Write GGUF quantisation test vectors to tests/golden/quant/.

Usage (from the repository root, venv as in tests/reference/README.md):

    .venv/bin/python tests/reference/make_quant_vectors.py

For each type in Q8_0, Q4_0, Q4_1, Q4_K, Q6_K, F16, BF16 it writes
  quant/<TYPE>.gguf         tensor `w` [4, 512] stored in <TYPE> (GGUF ne = [512, 4]);
                            K-quants also `w_rand` [2, 512] built from random bytes
  quant/<TYPE>.safetensors  `raw` U8 [4, row_bytes] = the exact bytes of `w` in the GGUF,
                            `dequant` F32 [4, 512] = gguf.quants.dequantize(raw)
                            (K-quants also `raw_rand` / `dequant_rand` for `w_rand`)
plus quant/input.safetensors (`x` F32 [4, 512], the original floats shared by all types)
and quant/index.json (type ids, block sizes, which quantiser produced the bytes, errors).

Quantisers: Q8_0, Q4_0, Q4_1, F16 and BF16 use gguf.quants.quantize (gguf-py mirrors
ggml's reference `quantize_row_*_ref`; bit-identity with a C build is intended by gguf-py but not checked here).
gguf-py can only *dequantise* Q4_K and Q6_K, so those blocks come from a simple own
quantiser below (valid blocks, not llama.cpp's optimised search, so the bytes differ
from llama-quantize's) plus fully random blocks; gguf's dequantize is the reference.
Seeded: two runs give identical bytes.
"""
import json
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize
from safetensors.numpy import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "golden", "quant"))
SEED = 20261130
ROWS, COLS = 4, 512


def make_input(rng):
    x = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    x[1] *= 0.01     # small magnitudes
    x[2] *= 100.0    # large magnitudes
    x[3, :32] = 0.0  # an all-zero 32-block (d = 0 path)
    idx = rng.choice(ROWS * COLS, size=16, replace=False)  # outliers
    x.reshape(-1)[idx] *= 25.0
    return x


# --------------------------------------------------------------------- own K-quantisers

def _f16(a):
    return a.astype(np.float16)


def quantize_q4_k(x):
    """x: [n, 256k] f32 -> uint8 [n, 144k]. Layout: d f16, dmin f16, scales[12], qs[128]."""
    xb = x.reshape(-1, 8, 32).astype(np.float32)  # blocks x sub-blocks x 32
    nb = xb.shape[0]
    mn = np.minimum(xb.min(-1), 0.0)                 # <= 0
    mx = xb.max(-1)
    sub_scale = (mx - mn) / 15.0
    d = _f16(sub_scale.max(-1) / 63.0)
    dmin = _f16((-mn).max(-1) / 63.0)
    df, dminf = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(sub_scale / df), 0).clip(0, 63).astype(np.uint8)
        m = np.where(dminf > 0, np.rint(-mn / dminf), 0).clip(0, 63).astype(np.uint8)
        step = (df * sc)[..., None]
        q = np.where(step > 0, np.rint((xb + (dminf * m)[..., None]) / step), 0).clip(0, 15).astype(np.uint8)
    s = np.zeros((nb, 12), np.uint8)
    s[:, 0:4] = sc[:, 0:4] | ((sc[:, 4:8] >> 4) << 6)
    s[:, 4:8] = m[:, 0:4] | ((m[:, 4:8] >> 4) << 6)
    s[:, 8:12] = (sc[:, 4:8] & 0xF) | ((m[:, 4:8] & 0xF) << 4)
    q = q.reshape(nb, 4, 2, 32)  # chunk c: sub-block 2c -> low nibble, 2c+1 -> high nibble
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(nb, 128)
    blk = np.concatenate([d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8), s, qs], axis=1)
    return blk.reshape(x.shape[0], -1)


def quantize_q6_k(x):
    """x: [n, 256k] f32 -> uint8 [n, 210k]. Layout: ql[128], qh[64], scales i8[16], d f16.
    Odd sub-blocks get a negative int8 scale on purpose (exercises the signed scale)."""
    xb = x.reshape(-1, 16, 16).astype(np.float32)
    nb = xb.shape[0]
    sub = np.abs(xb).max(-1) / 31.0
    sign = np.where(np.arange(16) % 2 == 1, -1.0, 1.0)[None, :]
    d = _f16(sub.max(-1) / 127.0)
    df = d.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(df > 0, np.rint(sub / df), 0).clip(0, 127) * sign
        step = (df * sc)[..., None]
        q = np.where(step != 0, np.rint(xb / step), 0).clip(-32, 31)
    sc = sc.astype(np.int8)
    q = (q + 32).astype(np.uint8).reshape(nb, 2, 4, 32)  # half h, group j, lane l: y[128h + 32j + l]
    lo, hi = q & 0xF, q >> 4
    ql = np.concatenate([lo[:, :, 0] | (lo[:, :, 2] << 4), lo[:, :, 1] | (lo[:, :, 3] << 4)], axis=2)  # [nb,2,64]
    qh = hi[:, :, 0] | (hi[:, :, 1] << 2) | (hi[:, :, 2] << 4) | (hi[:, :, 3] << 6)                    # [nb,2,32]
    blk = np.concatenate([ql.reshape(nb, 128), qh.reshape(nb, 64), sc.view(np.uint8),
                          d.reshape(nb, 1).view(np.uint8)], axis=1)
    return blk.reshape(x.shape[0], -1)


def random_blocks(rng, qtype, rows):
    """Random but valid blocks: random code bytes, finite positive f16 super-scales."""
    bs, ts = gguf.GGML_QUANT_SIZES[qtype]
    nb = rows * COLS // bs
    blk = rng.integers(0, 256, size=(nb, ts), dtype=np.uint8)
    if qtype == T.Q4_K:
        blk[:, 0:2] = _f16(rng.uniform(0.001, 0.05, nb)).reshape(nb, 1).view(np.uint8)
        blk[:, 2:4] = _f16(rng.uniform(0.001, 0.05, nb)).reshape(nb, 1).view(np.uint8)
    elif qtype == T.Q6_K:
        blk[:, 208:210] = _f16(rng.uniform(0.001, 0.05, nb)).reshape(nb, 1).view(np.uint8)
    return blk.reshape(rows, -1)


# --------------------------------------------------------------------- scalar spec decoders
# Written from the block layouts (ggml-common.h / docs cpu-engine.md 5.1), element by
# element, to cross-check gguf-py's vectorised dequantize before it is used as reference.

def _h(b, o):
    return float(np.frombuffer(bytes(b[o:o + 2]), np.float16)[0])


def scalar_dequant_block(qt, b):
    b = [int(v) for v in b]
    y = []
    if qt == T.Q8_0:
        d = _h(b, 0)
        y = [d * (v - 256 if v > 127 else v) for v in b[2:34]]
    elif qt == T.Q4_0:
        d = _h(b, 0)
        qs = b[2:18]
        y = [d * ((q & 0xF) - 8) for q in qs] + [d * ((q >> 4) - 8) for q in qs]
    elif qt == T.Q4_1:
        d, m = _h(b, 0), _h(b, 2)
        qs = b[4:20]
        y = [d * (q & 0xF) + m for q in qs] + [d * (q >> 4) + m for q in qs]
    elif qt == T.Q4_K:
        d, dmin, s, qs = _h(b, 0), _h(b, 2), b[4:16], b[16:144]
        def scale_min(j):
            if j < 4:
                return s[j] & 63, s[j + 4] & 63
            return (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)
        y = [0.0] * 256
        for c in range(4):
            (sc0, m0), (sc1, m1) = scale_min(2 * c), scale_min(2 * c + 1)
            for l in range(32):
                q = qs[32 * c + l]
                y[64 * c + l] = d * sc0 * (q & 0xF) - dmin * m0
                y[64 * c + 32 + l] = d * sc1 * (q >> 4) - dmin * m1
    elif qt == T.Q6_K:
        ql, qh = b[0:128], b[128:192]
        sc = [v - 256 if v > 127 else v for v in b[192:208]]
        d = _h(b, 208)
        y = [0.0] * 256
        for h in range(2):
            for l in range(32):
                is_ = l // 16
                L, H, S = ql[64 * h:], qh[32 * h:], sc[8 * h:]
                vals = [((L[l] & 0xF) | (((H[l] >> 0) & 3) << 4), S[is_]),
                        ((L[l + 32] & 0xF) | (((H[l] >> 2) & 3) << 4), S[is_ + 2]),
                        ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4), S[is_ + 4]),
                        ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4), S[is_ + 6])]
                for k, (q, s_) in enumerate(vals):
                    y[128 * h + l + 32 * k] = d * s_ * (q - 32)
    elif qt == T.F16:
        y = list(np.frombuffer(bytes(b), np.float16).astype(np.float64))
    elif qt == T.BF16:
        y = list((np.frombuffer(bytes(b), np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64))
    return y


def check_scalar(qt, raw, deq):
    bs, ts = gguf.GGML_QUANT_SIZES[qt]
    flat = raw.reshape(-1, ts)
    ref = np.array([v for blk in flat for v in scalar_dequant_block(qt, blk)], np.float64)
    got = deq.reshape(-1).astype(np.float64)
    tol = 1e-6 * max(1.0, float(np.abs(ref).max()))
    assert np.abs(ref - got).max() <= tol, (qt.name, float(np.abs(ref - got).max()))


# --------------------------------------------------------------------- main

TYPES = ["Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K", "F16", "BF16"]


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(SEED)
    x = make_input(rng)
    save_file({"x": x}, os.path.join(OUT, "input.safetensors"))
    index = {"_input": {"file": "input.safetensors", "tensor": "x", "shape": [ROWS, COLS], "dtype": "F32",
                        "seed": SEED}}
    for name in TYPES:
        qt = T[name]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        if qt in (T.Q4_K, T.Q6_K):
            raw = (quantize_q4_k if qt == T.Q4_K else quantize_q6_k)(x)
            quantizer = "own (make_quant_vectors.py quantize_%s)" % name.lower()
        else:
            raw = quantize(x, qt)
            quantizer = "gguf.quants.quantize (gguf-py port of ggml quantize_row_*_ref)"
        raw = np.ascontiguousarray(raw).view(np.uint8).reshape(ROWS, -1)
        assert raw.shape[1] == COLS // bs * ts, (name, raw.shape)
        deq = dequantize(raw, qt).reshape(ROWS, COLS).astype(np.float32)
        err = np.abs(deq - x)
        rel_rms = float(np.sqrt((err ** 2).mean(1) / (x ** 2).mean(1)).max())
        limit = {"Q8_0": 0.03, "Q4_0": 0.3, "Q4_1": 0.3, "Q4_K": 0.3, "Q6_K": 0.1, "F16": 1e-3, "BF16": 1e-2}[name]
        assert rel_rms < limit, (name, rel_rms)
        check_scalar(qt, raw, deq)
        st = {"raw": raw, "dequant": deq}

        path = os.path.join(OUT, f"{name}.gguf")
        wr = gguf.GGUFWriter(path, "unmask-quant-test")
        wr.add_tensor("w", raw if qt != T.F16 else raw.view(np.float16), raw_dtype=qt if qt != T.F16 else None)
        entry = {"ggml_type": int(qt), "block_size": bs, "type_size": ts, "shape": [ROWS, COLS],
                 "ggml_ne": [COLS, ROWS], "row_bytes": int(raw.shape[1]), "gguf": f"{name}.gguf",
                 "safetensors": f"{name}.safetensors", "quantizer": quantizer,
                 "max_abs_err_vs_x": float(err.max()), "max_row_rel_rms_err_vs_x": rel_rms}
        if qt in (T.Q4_K, T.Q6_K):
            rraw = random_blocks(rng, qt, 2)
            rdeq = dequantize(rraw, qt).reshape(2, COLS).astype(np.float32)
            assert np.isfinite(rdeq).all()
            check_scalar(qt, rraw, rdeq)
            wr.add_tensor("w_rand", rraw, raw_dtype=qt)
            st.update(raw_rand=rraw, dequant_rand=rdeq)
            entry["rand"] = {"tensor": "w_rand", "shape": [2, COLS]}
        wr.write_header_to_file()
        wr.write_kv_data_to_file()
        wr.write_tensors_to_file()
        wr.close()
        save_file(st, os.path.join(OUT, f"{name}.safetensors"))

        # the GGUF must hold exactly `raw`
        rd = gguf.GGUFReader(path)
        t = {t.name: t for t in rd.tensors}
        assert int(t["w"].tensor_type) == int(qt)
        assert bytes(np.asarray(t["w"].data).view(np.uint8).reshape(-1)) == raw.tobytes(), name
        assert list(map(int, t["w"].shape)) == [COLS, ROWS]
        index[name] = entry
        print(f"{name}: row_bytes={raw.shape[1]} rel_rms_err={rel_rms:.3g} max_abs_err={err.max():.3g}")
    with open(os.path.join(OUT, "index.json"), "w") as f:
        json.dump(index, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
