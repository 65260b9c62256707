"""Default locations, all computed from this file's place in the repository (standard library only).

Every script takes these as arguments; these are only the defaults.
"""
import os

HERE = os.path.dirname(os.path.abspath(__file__))   # models/train
MODELS = os.path.dirname(HERE)                      # models
ROOT = os.path.dirname(MODELS)                      # the repository
DATA_DIR = os.path.join(MODELS, "data")             # held-out sets (committed)
# Checkpoints and intermediate initialisations: inside the repository but git-ignored
# (models/ckpt/ in .gitignore); never commit them.
CKPT_ROOT = os.path.join(MODELS, "ckpt")


def default_corpus_dir():
    """The Gutenberg corpus: $UNMASK_CORPUS_DIR, else shared/data/corpus/gutenberg inside the
    checkout, else the project's shared/ folder beside it (where the workplace keeps it)."""
    env = os.environ.get("UNMASK_CORPUS_DIR")
    if env:
        return env
    inside = os.path.join(ROOT, "shared", "data", "corpus", "gutenberg")
    if os.path.isdir(inside):
        return inside
    return os.path.normpath(os.path.join(ROOT, "..", "shared", "data", "corpus", "gutenberg"))


def rel(path):
    """`path` relative to the repository root when it lies inside it (for records that get
    committed: trainer_state.json, eval_results.json); other paths are returned unchanged."""
    if path is None:
        return None
    p = os.path.abspath(path)
    if p == ROOT or p.startswith(ROOT + os.sep):
        return os.path.relpath(p, ROOT)
    return path
