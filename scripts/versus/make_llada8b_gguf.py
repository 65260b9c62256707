#!/usr/bin/env python3
"""Writes a LLaDA-8B-shaped GGUF with random Q8_0 weights (the `versus` suite's big model).

    python3 scripts/versus/make_llada8b_gguf.py TOKENIZER_FROM.gguf OUT.gguf [--layers 2]

Shapes are LLaDA-8B-Instruct's (hidden 4096, 32 heads of 128, FFN 12288, vocab 126464) with
`--layers` blocks (default 2). Metadata and tokenizer keys are copied from TOKENIZER_FROM (a GGUF
that `unmask models export` wrote for the embedded tiny-llada), with the token list padded to the
8B vocabulary by unused `[PAD{i}]` tokens as our exporter and llama.cpp's converter do, so both
engines tokenise prompts identically. Codes are uniform random in [-127, 127] with one f16 scale
per 32 (about 1/sqrt(k_in) largest weight), norms are ones. Standard library only (no numpy):
about 1.6 GB for 2 layers in well under a minute. Skips the work when OUT exists with the
same parameters (a sidecar `.json` records them).
"""
import json
import os
import random
import struct
import sys

ALIGN = 32
HIDDEN, HEADS, FFN, VOCAB = 4096, 32, 12288, 126464
F32, Q8_0 = 0, 8
# GGUF value types
U8, I8, U16, I16, U32, I32, F32V, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32V: "<f", BOOL: "<?",
          U64: "<Q", I64: "<q", F64: "<d"}


def read_kvs(path):
    """The metadata of a GGUF file as [(key, type, value)] (arrays as (item_type, [items]))."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # metadata of the tiny model is a few hundred KB
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n].decode("utf-8")
        pos += n
        return s

    def value(t):
        if t == STRING:
            return string()
        if t == ARRAY:
            it, n = take("<I"), take("<Q")
            return (it, [value(it) for _ in range(n)])
        return take(SCALAR[t])

    assert data[:4] == b"GGUF", "not a GGUF file"
    pos = 4
    version, _n_tensors, n_kv = take("<I"), take("<Q"), take("<Q")
    assert version == 3, version
    out = []
    for _ in range(n_kv):
        k = string()
        t = take("<I")
        out.append((k, t, value(t)))
    return out


def put_string(b, s):
    e = s.encode("utf-8")
    b += struct.pack("<Q", len(e)) + e


def put_value(b, t, v):
    if t == STRING:
        put_string(b, v)
    elif t == ARRAY:
        it, items = v
        b += struct.pack("<IQ", it, len(items))
        for x in items:
            put_value(b, it, x)
    else:
        b += struct.pack(SCALAR[t], v)


def q8_0_random(n_rows, k, rng):
    """n_rows × k Q8_0 bytes: per 32 values an f16 scale then 32 int8 codes in [-127, 127]."""
    blocks = n_rows * (k // 32)
    n, chunk = blocks * 34, 1 << 22
    buf = bytearray(b"".join(rng.randbytes(min(chunk, n - i)) for i in range(0, n, chunk)))
    # -128 codes become -127 (the range our int8 kernels assume; llama.cpp takes either).
    buf = bytearray(buf.replace(b"\x80", b"\x81"))
    scale = struct.pack("<e", 1.0 / (k ** 0.5) / 127.0)
    buf[0::34] = scale[0:1] * blocks
    buf[1::34] = scale[1:2] * blocks
    return bytes(buf)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    layers = 2
    if "--layers" in sys.argv:
        layers = int(sys.argv[sys.argv.index("--layers") + 1])
        args = [a for a in args if a != str(layers)]
    if len(args) != 2:
        sys.exit(__doc__)
    src, out = args
    params = {"layers": layers, "hidden": HIDDEN, "heads": HEADS, "ffn": FFN, "vocab": VOCAB, "seed": 8,
              "tokenizer_from_size": os.path.getsize(src), "format": 2}
    side = out + ".json"
    if os.path.exists(out) and os.path.exists(side) and json.load(open(side)) == params:
        print(f"{out}: up to date")
        return
    kvs = read_kvs(src)
    keep = [(k, t, v) for k, t, v in kvs if k.startswith("tokenizer.") and k != "tokenizer.ggml.padding_token_id"]
    a = "llada"
    meta = [
        ("general.architecture", STRING, a), ("general.name", STRING, "llada-8b-shapes-random"),
        ("general.file_type", U32, 7), (f"{a}.context_length", U32, 4096), (f"{a}.embedding_length", U32, HIDDEN),
        (f"{a}.block_count", U32, layers), (f"{a}.feed_forward_length", U32, FFN),
        (f"{a}.attention.head_count", U32, HEADS), (f"{a}.attention.head_count_kv", U32, HEADS),
        (f"{a}.attention.key_length", U32, HIDDEN // HEADS), (f"{a}.attention.value_length", U32, HIDDEN // HEADS),
        (f"{a}.attention.layer_norm_rms_epsilon", F32V, 1e-5), (f"{a}.rope.freq_base", F32V, 500000.0),
        (f"{a}.rope.dimension_count", U32, HIDDEN // HEADS), (f"{a}.vocab_size", U32, VOCAB),
        (f"{a}.attention.causal", BOOL, False), ("diffusion.shift_logits", BOOL, False),
    ]
    for k, t, v in keep:
        if k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            it, items = v
            n0 = len(items)
            if k == "tokenizer.ggml.tokens":
                items = items + [f"[PAD{i}]" for i in range(n0, VOCAB)]
            elif k == "tokenizer.ggml.token_type":
                items = items + [5] * (VOCAB - n0)  # unused
            else:
                items = items + [0.0] * (VOCAB - n0)
            v = (it, items)
        meta.append((k, t, v))
    h, f = HIDDEN, FFN
    tensors = [("token_embd.weight", [h, VOCAB], Q8_0), ("output_norm.weight", [h], F32), ("output.weight", [h, VOCAB], Q8_0)]
    for i in range(layers):
        p = f"blk.{i}."
        tensors += [(p + "attn_norm.weight", [h], F32)]
        tensors += [(p + n, [h, h], Q8_0) for n in ("attn_q.weight", "attn_k.weight", "attn_v.weight", "attn_output.weight")]
        tensors += [(p + "ffn_norm.weight", [h], F32), (p + "ffn_gate.weight", [h, f], Q8_0),
                    (p + "ffn_up.weight", [h, f], Q8_0), (p + "ffn_down.weight", [f, h], Q8_0)]

    def nbytes(shape, t):
        n = 1
        for d in shape:
            n *= d
        return n * 4 if t == F32 else n // 32 * 34

    head = bytearray(b"GGUF") + struct.pack("<IQQ", 3, len(tensors), len(meta))
    for k, t, v in meta:
        put_string(head, k)
        head += struct.pack("<I", t)
        put_value(head, t, v)
    off = 0
    for name, shape, t in tensors:
        put_string(head, name)
        head += struct.pack("<I", len(shape)) + b"".join(struct.pack("<Q", d) for d in shape)
        head += struct.pack("<IQ", t, off)
        off += (nbytes(shape, t) + ALIGN - 1) // ALIGN * ALIGN
    head += b"\0" * ((-len(head)) % ALIGN)
    rng = random.Random(params["seed"])
    tmp = out + ".tmp"
    with open(tmp, "wb") as fo:
        fo.write(head)
        for name, shape, t in tensors:
            if t == F32:
                data = struct.pack("<f", 1.0) * shape[0]
            else:
                data = q8_0_random(shape[1], shape[0], rng)
            fo.write(data)
            fo.write(b"\0" * ((-len(data)) % ALIGN))
    os.replace(tmp, out)
    json.dump(params, open(side, "w"))
    print(f"wrote {out} ({os.path.getsize(out) / 1e9:.2f} GB)")


if __name__ == "__main__":
    main()
