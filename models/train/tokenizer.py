"""Byte-level BPE tokenizer (vocab 4096) for the tiny LLaDA model.

Pre-tokenizer: Digits(individual_digits=True) then ByteLevel, so numbers are
tokenised one digit per token.  Special tokens get fixed ids 0..9 (in the
order of data.SPECIAL_TOKENS).  Trained on train-split prose plus a sample of
synthetic task text.

Usage (from the repository root):
    python -m models.train.tokenizer [--out models/tiny-llada] [--corpus DIR]
writes tokenizer.json + tokenizer_config.json + special_tokens_map.json into --out. Do not
overwrite the shipped one: the models' weights depend on its ids.
"""
import argparse
import json
import os

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from . import data, paths

VOCAB_SIZE = 4096
OUT_DIR = os.path.join(paths.MODELS, "tiny-llada")


def build(out_dir=OUT_DIR):
    tok = Tokenizer(models.BPE())   # no unk needed: byte-level alphabet covers every byte
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        min_frequency=2,
        special_tokens=list(data.SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    def corpus():
        for doc in data.prose_documents("train"):
            for para in doc.split("\n\n"):
                yield para
        rng = np.random.default_rng([data.TRAIN_SEED, 424242])
        ts = data.TaskSampler()
        for _ in range(20000):
            _, msg, ans = ts.sample(rng)
            yield f"user\n\n{msg}assistant\n\n{ans}"

    tok.train_from_iterator(corpus(), trainer=trainer)
    for i, s in enumerate(data.SPECIAL_TOKENS):
        assert tok.token_to_id(s) == i, (s, tok.token_to_id(s))
    assert tok.get_vocab_size() == VOCAB_SIZE, tok.get_vocab_size()
    os.makedirs(out_dir, exist_ok=True)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    legacy_merges(os.path.join(out_dir, "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": data.BOS,
        "eos_token": data.EOS,
        "mask_token": data.MASK,
        "pad_token": data.EOS,
        "eot_token": data.EOT,
        "additional_special_tokens": list(data.SPECIAL_TOKENS[3:]),
        "model_max_length": 256,
        "clean_up_tokenization_spaces": False,
        "chat_template": (
            "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n"
            "{{ m['content'] }}<|eot_id|>{% endfor %}"
            "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
        ),
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
        f.write("\n")
    with open(os.path.join(out_dir, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": data.BOS, "eos_token": data.EOS, "mask_token": data.MASK,
                   "pad_token": data.EOS}, f, indent=2)
        f.write("\n")
    return tok


def legacy_merges(path):
    """Rewrite BPE merges from [["a","b"],...] to the older "a b" string form, which every
    version of the Rust `tokenizers` crate reads (byte-level tokens never contain a space)."""
    with open(path) as f:
        d = json.load(f)
    merges = d["model"]["merges"]
    if merges and isinstance(merges[0], list):
        assert all(" " not in a and " " not in b for a, b in merges)
        d["model"]["merges"] = [f"{a} {b}" for a, b in merges]
    with open(path, "w") as f:
        json.dump(d, f, ensure_ascii=False, indent=None)


def load(model_dir=OUT_DIR):
    return Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))


def main():
    ap = argparse.ArgumentParser(description="Train the shared 4,096-token byte-level BPE tokenizer.")
    ap.add_argument("--out", default=OUT_DIR, help="output model directory (default models/tiny-llada)")
    ap.add_argument("--corpus", default=None,
                    help="Gutenberg corpus folder (default: $UNMASK_CORPUS_DIR or shared/data/corpus/gutenberg "
                         "beside the repository)")
    a = ap.parse_args()
    if a.corpus:
        data.set_corpus_dir(a.corpus)
    tok = build(a.out)
    for s in [data.chat_prompt("What is 347+586?") + data.chat_answer("933"),
              "It is a truth universally acknowledged, that a single man"]:
        enc = tok.encode(s)
        print(len(enc.ids), enc.tokens)
        assert tok.decode(enc.ids, skip_special_tokens=False) == s, tok.decode(enc.ids, skip_special_tokens=False)
    print("ok")


if __name__ == "__main__":
    main()
