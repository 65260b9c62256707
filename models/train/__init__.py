"""Training, evaluation and model-card code of Unmask's embedded tiny models (a Python package).

Run its modules with `python -m` from the repository root (or as `python -m train.MODULE` from
models/); every path is an argument whose default is computed from this package's location:

    python -m models.train.data          # held-out task sets (models/data/{val,test}.jsonl)
    python -m models.train.tokenizer     # the shared BPE tokenizer (do not rerun: weights depend on its ids)
    python -m models.train.train --help  # the trainer for all four models
    python -m models.train.upcycle --help
    python -m models.train.eval --help   # PyTorch reference eval (its decoder: decoding.py)
    python -m models.train.card tiny-llada tiny-ar tiny-draft tiny-llada-moe

`decoding.py` (NumPy only) is the one reference implementation of the dLLM decoding loops; the
golden trajectories (tests/reference/decode_reference.py) and the PyTorch eval both use it.
"""
