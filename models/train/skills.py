"""Skills v2: word-list and arithmetic tasks over arbitrary words, paraphrased instructions, and
short honest chat, with a training generator and a disjoint held-out ("unseen") generator.

Why: the v1 tasks draw words from 400 common corpus words and one instruction per task, so a
model can score well on its own test split and still fail on words a person types. Here

* **Words** come from three pools: corpus words (any lowercase word of the train prose),
  names (words the corpus writes capitalised), and made-up words (a seeded syllable generator).
  Every word belongs to one side by a hash of its lowercase form: `crc32("w:" + word) % 4 == 0`
  is held out, the rest trains. Training never puts a held-out word in a task; casing is varied
  (as written, Capitalised, UPPER) on both sides.
* **Instructions**: every family has training templates and held-out templates, written out
  below, disjoint (the held-out ones are paraphrases: "reverse these words:", "what's 12 plus 7?").
  Training instructions are also dressed (a polite prefix such as "Please " or "Kindly ", or a
  lowercase start), never into a held-out template (checked).
* **Numbers**: add and subtract with 1-4 digit operands, carries into a new digit (999+1) made
  common on purpose; subtraction never goes below zero.
* **Chat**: a few intents (greeting, how-are-you, who-are-you, what-can-you-do, thanks, goodbye,
  out of scope) each with one fixed reply; phrasings and out-of-scope topics split the same way.

Families: add, sub, reverse, sort, copy, kv, count, chat. `unseen_set()` writes the evaluation
set (>= 300 prompts per family); the training sampler is `SkillSampler`.
"""
import re
import zlib

import numpy as np

from . import data

FAMILIES = ["add", "sub", "reverse", "sort", "copy", "kv", "count", "chat"]
UNSEEN_SEED = 424242
N_PER_FAMILY_UNSEEN = 300
# Tuning split of the same generator (the ablation bench searches its settings on it).
N_PER_FAMILY_UNSEEN_VAL = 200
MAX_ITEMS = 12
# Default training weights of the families (train.py --skills-mix overrides)
TRAIN_WEIGHTS = {"add": 0.15, "sub": 0.12, "reverse": 0.16, "sort": 0.16, "copy": 0.10, "kv": 0.13,
                 "count": 0.08, "chat": 0.10}


def heldout_word(word):
    """True for words reserved for the unseen evaluation (a quarter, by hash of the lowercase form)."""
    return zlib.crc32(("w:" + word.lower()).encode()) % 4 == 0


def heldout_text(text):
    """Same split for phrasings and topics (hash of the normalised text)."""
    return zlib.crc32(("t:" + " ".join(text.lower().split())).encode()) % 4 == 0


# ---------------------------------------------------------------- word pools
_pools = None

ONSETS = ["b", "bl", "br", "d", "dr", "f", "fl", "g", "gl", "gr", "h", "j", "k", "kl", "l", "m", "n",
          "p", "pl", "pr", "qu", "r", "s", "sk", "sl", "sn", "st", "t", "tr", "v", "w", "z", "ch", "sh", "th"]
VOWELS = ["a", "e", "i", "o", "u", "ai", "ee", "oo", "ou", "y"]
CODAS = ["", "", "", "b", "d", "g", "k", "l", "m", "n", "p", "r", "s", "t", "x", "nk", "st", "rd", "mp"]


def _made_up(rng, real):
    while True:
        n = int(rng.integers(1, 4))
        w = "".join(ONSETS[int(rng.integers(len(ONSETS)))] + VOWELS[int(rng.integers(len(VOWELS)))]
                    for _ in range(n)) + CODAS[int(rng.integers(len(CODAS)))]
        if 3 <= len(w) <= 10 and w not in real:
            return w


def pools():
    """{(side, kind): [words]} with side in train/heldout and kind in common/name/madeup."""
    global _pools
    if _pools is not None:
        return _pools
    lower, capital = {}, {}
    for p in data.load_passages():
        if p["split"] != "train":
            continue
        for w in re.findall(r"[A-Za-z]+", p["text"]):
            if not 2 <= len(w) <= 10:
                continue
            if w.islower():
                lower[w] = lower.get(w, 0) + 1
            elif w[0].isupper() and w[1:].islower():
                capital[w] = capital.get(w, 0) + 1
    common = [w for w, c in sorted(lower.items(), key=lambda kv: (-kv[1], kv[0])) if c >= 3][:6000]
    # names: words (almost) never written in lowercase
    names = [w for w, c in sorted(capital.items(), key=lambda kv: (-kv[1], kv[0]))
             if c >= 3 and lower.get(w.lower(), 0) * 20 < c and len(w) >= 3][:1500]
    real = set(lower) | {w.lower() for w in capital}
    rng = np.random.default_rng(31337)
    madeup = sorted({_made_up(rng, real) for _ in range(6000)})
    out = {}
    for kind, words in (("common", common), ("name", names), ("madeup", madeup)):
        out[("heldout", kind)] = [w for w in words if heldout_word(w)]
        out[("train", kind)] = [w for w in words if not heldout_word(w)]
    _pools = out
    return out


def _cased(rng, w):
    r = rng.random()
    if r < 0.12:
        return w.capitalize() if not w[0].isupper() else w.lower()
    if r < 0.17:
        return w.upper()
    return w


def words(rng, side, n, distinct=True):
    """`n` words from `side`'s pools: 55 % common, 20 % names, 25 % made-up, casing varied."""
    P = pools()
    out, seen = [], set()
    while len(out) < n:
        r = rng.random()
        kind = "common" if r < 0.55 else ("name" if r < 0.75 else "madeup")
        pool = P[(side, kind)]
        # common words: mostly the frequent ones, so lists read like text a person types
        i = int(min(len(pool) - 1, abs(rng.normal(0, len(pool) / 3)))) if kind == "common" else int(rng.integers(len(pool)))
        w = _cased(rng, pool[i])
        if distinct and w.lower() in seen:
            continue
        seen.add(w.lower())
        out.append(w)
    return out


# ---------------------------------------------------------------- templates (train | held out)
T = {
    "add": (["What is {a}+{b}?", "What is {a} + {b}?", "what is {a} plus {b}?", "{a}+{b}=", "Add {a} and {b}.",
             "Compute {a} plus {b}.", "What is the sum of {a} and {b}?", "Calculate {a}+{b}", "{a} plus {b}?",
             "Work out {a} + {b}.", "Find the sum of {a} and {b}.", "{a} added to {b} is?", "Total of {a} and {b}?",
             "Tell me {a} plus {b}.", "Can you add {a} and {b}?"],
            ["what's {a} plus {b}?", "How much is {a} + {b}?", "Please add {a} to {b}.", "Sum {a} and {b}",
             "{a} + {b} = ?", "What do you get if you add {a} and {b}?"]),
    "sub": (["What is {a}-{b}?", "What is {a} - {b}?", "what is {a} minus {b}?", "{a}-{b}=", "Subtract {b} from {a}.",
             "Compute {a} minus {b}.", "What is the difference between {a} and {b}?", "Calculate {a}-{b}",
             "{a} minus {b}?", "Work out {a} - {b}.", "Find {a} minus {b}.", "Remove {b} from {a}.",
             "Tell me {a} minus {b}.", "Can you subtract {b} from {a}?", "{a} take away {b}?"],
            ["what's {a} minus {b}?", "How much is {a} - {b}?", "Take {b} away from {a}.", "{a} - {b} = ?",
             "What do you get if you subtract {b} from {a}?"]),
    "reverse": (["Reverse: {L}", "Reverse the words: {L}", "Reverse the order of these words: {L}",
                 "Write these words backwards: {L}", "Say in reverse order: {L}", "Reverse this list: {L}",
                 "reverse: {L}", "Give the words in reverse order: {L}", "Backwards: {L}",
                 "Flip the order: {L}", "Can you reverse these: {L}", "Write the list from last to first: {L}",
                 "Turn this list around: {L}"],
                ["reverse these words: {L}", "Put these words in reverse order: {L}", "Please reverse: {L}",
                 "List in reverse: {L}", "Reverse the list: {L}"]),
    "sort": (["Sort: {L}", "Sort this list: {L}", "Sort alphabetically: {L}", "Put in alphabetical order: {L}",
              "Arrange alphabetically: {L}", "Order these words from A to Z: {L}", "sort: {L}",
              "Sort the words: {L}", "Alphabetize: {L}", "Sort these from A to Z: {L}",
              "Can you sort these: {L}", "Give these words in dictionary order: {L}", "Order alphabetically: {L}"],
             ["sort these words: {L}", "Put these in alphabetical order: {L}", "Please sort the list: {L}",
              "Sort in alphabetical order: {L}", "Arrange these words alphabetically: {L}"]),
    "copy": (["Repeat: {L}", "Copy: {L}", "Repeat these words: {L}", "Say again: {L}", "Echo: {L}",
              "Write exactly: {L}", "repeat: {L}", "Copy the words: {L}", "Say these words back: {L}",
              "Repeat exactly: {L}", "Can you repeat these: {L}", "Write these words again: {L}",
              "Duplicate this list: {L}"],
             ["repeat after me: {L}", "Copy this list: {L}", "Please repeat: {L}", "Repeat the list: {L}",
              "Copy these words exactly: {L}"]),
    "count": (["How many words: {L}", "Count the words: {L}", "How many words are in: {L}",
               "Number of words: {L}", "Count: {L}", "how many words: {L}", "Count the items: {L}",
               "Tell me how many words: {L}", "How many items are in this list: {L}", "Word count: {L}",
               "Can you count these: {L}", "How many words are here: {L}", "Give the number of words in: {L}"],
              ["count these words: {L}", "How many words are there in this list: {L}",
               "Please count the words: {L}", "How many words does this have: {L}"]),
    "kv": (["{C}. What is {k}?", "{C}. What is the value of {k}?", "{C}. Look up {k}.", "{C}. Find {k}.",
            "{C}. {k}?", "{C}. what is {k}?", "{C}. Give me {k}.", "{C}. What does {k} equal?",
            "{C}. Tell me {k}.", "In {C}, what is {k}?"],
           ["{C}. what's {k}?", "{C}. Tell me the value of {k}.", "{C}. Which value does {k} have?",
            "Given {C}, what is {k}?"]),
}


def _norm_template(t):
    return " ".join(t.lower().split())


HELDOUT_TEMPLATES = {_norm_template(t) for _, held in T.values() for t in held}
assert not any(_norm_template(t) in HELDOUT_TEMPLATES for train, _ in T.values() for t in train), \
    "a training template is also a held-out one"
# Politeness and casing variation of training instructions, so that "Please ..." or a lowercase
# start is not read as another task; a dressed template that equals a held-out one is not used.
POLITE_PREFIXES = ["Please ", "Kindly ", "Now ", "OK, ", "Hey, ", "Go on: "]
DRESSED_FAMILIES = ("add", "sub", "reverse", "sort", "copy", "count")


def _dress_instruction(rng, family, tpl):
    if family not in DRESSED_FAMILIES or rng.random() >= 0.35:
        return tpl
    out = tpl
    if rng.random() < 0.7 and not tpl.startswith(("{", "Can ")):
        out = POLITE_PREFIXES[int(rng.integers(len(POLITE_PREFIXES)))] + tpl[0].lower() + tpl[1:]
    elif tpl[0].isupper():
        out = tpl[0].lower() + tpl[1:]
    return tpl if _norm_template(out) in HELDOUT_TEMPLATES else out


def _template(rng, family, side):
    train, held = T[family]
    if side == "heldout":
        return held[int(rng.integers(len(held)))]
    return _dress_instruction(rng, family, train[int(rng.integers(len(train)))])


def _number(rng):
    """1-4 digits, uniform over the number of digits; a third are next to a power of ten."""
    d = int(rng.integers(1, 5))
    if rng.random() < 0.3:
        return max(0, 10 ** d - int(rng.integers(1, 4)))
    return int(rng.integers(0 if d == 1 else 10 ** (d - 1), 10 ** d))


def _list(rng, ws):
    return ", ".join(ws) if rng.random() < 0.3 else " ".join(ws)


def task(rng, family, side):
    """(message, answer) of `family` drawn from `side` ("train" or "heldout")."""
    if family in ("add", "sub"):
        a, b = _number(rng), _number(rng)
        if family == "add" and rng.random() < 0.15:
            b = int(rng.integers(1, 10))        # 999+1, 4999+3: the carry ripples into a new digit
        if family == "sub" and b > a:
            a, b = b, a
        ans = a + b if family == "add" else a - b
        return _template(rng, family, side).format(a=a, b=b), str(ans)
    if family in ("reverse", "sort", "copy", "count"):
        n = int(rng.integers(1 if family == "count" else 3, MAX_ITEMS + 1))
        ws = words(rng, side, n, distinct=family in ("reverse", "sort"))
        sep_comma = rng.random() < 0.3
        lst = ", ".join(ws) if sep_comma else " ".join(ws)
        msg = _template(rng, family, side).format(L=lst)
        if family == "count":
            return msg, str(n)
        out = {"reverse": ws[::-1], "sort": sorted(ws, key=lambda w: (w.lower(), w)), "copy": ws}[family]
        return msg, (", ".join(out) if sep_comma else " ".join(out))
    if family == "kv":
        n = int(rng.integers(2, 7))
        keys = words(rng, side, n)
        if rng.random() < 0.5:
            vals = [str(int(rng.integers(0, 100))) for _ in keys]
        else:
            vals = words(rng, side, n, distinct=False)
        fmt = ["{k}={v}", "{k}: {v}", "{k} is {v}"][int(rng.integers(3))]
        ctx = ", ".join(fmt.format(k=k, v=v) for k, v in zip(keys, vals))
        q = int(rng.integers(n))
        return _template(rng, family, side).format(C=ctx, k=keys[q]), vals[q]
    if family == "chat":
        intent = INTENTS[int(rng.integers(len(INTENTS)))]
        return chat_phrase(rng, intent, side), REPLIES[intent]
    raise ValueError(family)


# ---------------------------------------------------------------- chat
REPLIES = {
    "greet": "Hello! How can I help?",
    "how_are_you": "I'm fine, thanks! How can I help?",
    "identity": "I am a tiny diffusion language model, running on your device.",
    "abilities": "I can add and subtract numbers, and reverse, sort, copy, count or look up words.",
    "thanks": "You're welcome!",
    "bye": "Goodbye!",
    "out_of_scope": "Sorry, I can't answer that. I can add and subtract numbers and work with lists of words.",
}
INTENTS = list(REPLIES)

PHRASES = {
    "greet": ["hello", "hi", "hey", "hi there", "hello there", "hey there", "good morning", "good evening",
              "good afternoon", "greetings", "howdy", "hiya", "yo", "hello friend", "hi friend", "morning",
              "hey you", "hello again", "hi again", "good day", "hallo", "heya", "sup", "hello hello",
              "hi hi", "well hello", "oh hi", "hey hey", "hi unmask", "hello model", "hey model", "hi bot",
              "hello bot", "salutations", "hey buddy", "hi pal"],
    "how_are_you": ["how are you", "how are you doing", "how's it going", "how do you do", "are you well",
                    "how have you been", "how are things", "what's up", "how is your day", "how are you today",
                    "you doing ok", "how's your day going", "are you ok", "how do you feel",
                    "how are you feeling", "all good with you", "how's everything", "what's new"],
    "identity": ["who are you", "what are you", "what is your name", "what's your name", "tell me about yourself",
                 "are you a robot", "are you human", "who made you", "introduce yourself", "what model are you",
                 "are you an ai", "what kind of model are you", "who am i talking to", "who is this",
                 "what should i call you", "describe yourself", "are you a person", "what exactly are you",
                 "are you chatgpt", "are you a language model"],
    "abilities": ["what can you do", "what are you able to do", "help", "what do you know", "how can you help me",
                  "what are your skills", "what can i ask you", "what tasks can you do", "what are you good at",
                  "can you help me", "what do you do", "show me what you can do", "what can you help with",
                  "list your skills", "what are your abilities", "what should i ask you", "what can you answer",
                  "what do you support", "how do i use you", "what jobs can you do"],
    "thanks": ["thanks", "thank you", "thanks a lot", "thank you very much", "many thanks", "thx", "cheers",
               "much appreciated", "thanks so much", "great, thanks", "ok thanks", "thank you kindly",
               "thanks for the help", "ty", "appreciate it", "nice, thank you", "perfect, thanks",
               "awesome thanks", "thanks buddy", "thank you so much", "thanks again", "thanks mate", "grateful",
               "that helps, thanks", "good job, thanks", "many many thanks", "thank u", "tysm"],
    "bye": ["bye", "goodbye", "see you", "see you later", "bye bye", "good night", "farewell", "later",
            "talk to you later", "i have to go", "catch you later", "so long", "see ya", "ciao",
            "bye for now", "good bye", "have a nice day", "take care", "i'm leaving", "gotta go"],
}
OOS_TEMPLATES = ["what is the capital of {x}", "tell me about {x}", "write a poem about {x}",
                 "what's the weather in {x}", "explain {x}", "who invented {x}", "translate {x} into french",
                 "what do you think of {x}", "give me a recipe for {x}", "how do i fix my {x}",
                 "write a story about {x}", "what is the history of {x}", "recommend a book about {x}",
                 "why is {x} important", "how big is {x}", "is {x} dangerous"]
OOS_TOPICS = ["france", "japan", "brazil", "egypt", "canada", "london", "paris", "tokyo", "the moon", "mars",
              "the ocean", "cats", "dogs", "horses", "coffee", "pizza", "bread", "soup", "the internet",
              "electricity", "the telephone", "computers", "my car", "my bike", "my laptop", "the printer",
              "music", "jazz", "painting", "football", "chess", "tennis", "love", "friendship", "winter",
              "summer", "rain", "volcanoes", "dinosaurs", "the roman empire", "world war one", "gravity",
              "black holes", "photosynthesis", "democracy", "money", "taxes", "the stock market",
              "bitcoin", "vaccines", "sleep", "dreams", "happiness", "trees", "rivers", "mountains",
              "the sun", "stars", "birds", "bees", "sharks", "whales", "chocolate", "tea", "cheese",
              "rome", "berlin", "india", "china", "kenya", "peru", "spain", "italy", "mexico", "australia"]


def _dress(rng, core, question):
    """Surface variation: capitalisation, punctuation, polite prefixes."""
    s = core
    if rng.random() < 0.6:
        s = s[0].upper() + s[1:]
    r = rng.random()
    s += ("?" if question else "!") if r < 0.55 else ("." if r < 0.7 else "")
    if rng.random() < 0.15:
        s = ("Please, " if question else "Oh, ") + s[0].lower() + s[1:]
    return s


def chat_phrase(rng, intent, side):
    held = side == "heldout"
    if intent == "out_of_scope":
        while True:
            tpl = OOS_TEMPLATES[int(rng.integers(len(OOS_TEMPLATES)))]
            x = OOS_TOPICS[int(rng.integers(len(OOS_TOPICS)))]
            core = tpl.format(x=x)
            # held out: the topic or the template is held out; training: neither is
            if (heldout_text(x) or heldout_text(tpl)) == held:
                return _dress(rng, core, True)
    return dressed_phrase(rng, intent, [p for p in PHRASES[intent] if heldout_text(p) == held])


def dressed_phrase(rng, intent, cores):
    """One of `cores`, dressed as a question where the intent asks one."""
    core = cores[int(rng.integers(len(cores)))]
    return _dress(rng, core, intent in ("how_are_you", "identity", "abilities"))


# ---------------------------------------------------------------- long answers (64-256 tokens)
LONG_FAMILIES = ["long_reverse", "long_sort", "long_count", "long_add_steps", "long_copy"]
N_PER_FAMILY_UNSEEN_LONG = 300
LONG_T = {
    "long_count": (["Count from {a} to {b}.", "Count from {a} up to {b}.", "Write the numbers from {a} to {b}.",
                    "count from {a} to {b}"],
                   ["List the numbers from {a} to {b}.", "Please count from {a} to {b}.",
                    "Write every number from {a} through {b}."]),
    "long_add_steps": (["Add {a} and {b} step by step.", "What is {a}+{b}? Show the steps.",
                        "Work out {a} + {b} digit by digit."],
                       ["Show step by step how to add {a} and {b}.", "what's {a} plus {b}? Explain each step."]),
    "long_copy": (["Copy this paragraph: {P}", "Repeat the text: {P}", "Copy: {P}"],
                  ["Please copy this text exactly: {P}", "Repeat this paragraph: {P}"]),
}


def add_steps(a, b):
    """Column addition written out, least significant digit first, then the result."""
    da, db = str(a)[::-1], str(b)[::-1]
    carry, parts = 0, []
    for i in range(max(len(da), len(db))):
        x, y = int(da[i]) if i < len(da) else 0, int(db[i]) if i < len(db) else 0
        t = x + y + carry
        parts.append(f"{x}+{y}+{carry}={t}, write {t % 10} carry {t // 10}.")
        carry = t // 10
    if carry:
        parts.append(f"Write the carry {carry}.")
    return " ".join(parts) + f" Answer: {a + b}"


def long_task(rng, family, side, passages=None):
    """(message, answer) of a long-answer family; answers are 64-256 tokens."""
    held = side == "heldout"
    if family in ("long_reverse", "long_sort"):
        ws = words(rng, side, int(rng.integers(26, 41)))
        base = "reverse" if family == "long_reverse" else "sort"
        msg = _template(rng, base, side).format(L=" ".join(ws))
        out = ws[::-1] if base == "reverse" else sorted(ws, key=lambda w: (w.lower(), w))
        return msg, " ".join(out)
    tpl = LONG_T[family][1 if held else 0]
    tpl = tpl[int(rng.integers(len(tpl)))]
    if family == "long_count":
        a = int(rng.integers(0, 1000))
        b = a + int(rng.integers(25, 46))
        return tpl.format(a=a, b=b), " ".join(str(i) for i in range(a, b + 1))
    if family == "long_add_steps":
        a, b = int(rng.integers(10 ** 4, 10 ** 8)), int(rng.integers(10 ** 3, 10 ** 8))
        return tpl.format(a=a, b=b), add_steps(a, b)
    if family == "long_copy":
        while True:
            w = passages[int(rng.integers(len(passages)))]
            if len(w) >= 50:
                n = int(rng.integers(50, min(len(w), 90) + 1))
                text = " ".join(w[:n])
                return tpl.format(P=text), text
    raise ValueError(family)


def unseen_long_set(per_family=N_PER_FAMILY_UNSEEN_LONG, seed=UNSEEN_SEED + 1):
    """Held-out long-answer set: held-out words and instructions, test-split passages."""
    passages = [p["text"].split() for p in data.load_passages() if p["split"] == "test"]
    rows = []
    for fi, fam in enumerate(LONG_FAMILIES):
        rng = np.random.default_rng([seed, fi])
        seen = set()
        while len(seen) < per_family:
            msg, ans = long_task(rng, fam, "heldout", passages)
            if msg in seen:
                continue
            seen.add(msg)
            rows.append({"task": fam, "message": msg, "prompt": data.chat_prompt(msg), "answer": ans})
    return rows


# ---------------------------------------------------------------- samplers and the unseen set
class SkillSampler:
    """Training examples of the v2 families (training side only), weights per family."""

    def __init__(self, weights):
        self.families = [f for f in weights if weights[f] > 0]
        w = np.array([weights[f] for f in self.families], dtype=np.float64)
        self.p = w / w.sum()
        self.passages = None
        if any(f in LONG_FAMILIES for f in self.families):
            self.passages = [p["text"].split() for p in data.load_passages() if p["split"] == "train"]

    def sample(self, rng):
        f = self.families[int(rng.choice(len(self.families), p=self.p))]
        if f in LONG_FAMILIES:
            msg, ans = long_task(rng, f, "train", self.passages)
        else:
            msg, ans = task(rng, f, "train")
        return f, msg, ans


def heldout_rows(per_family, seed, exclude=frozenset()):
    """`per_family` distinct held-out-side messages per family (words and instructions no
    training example uses), none of them in `exclude`."""
    rows = []
    for fi, fam in enumerate(FAMILIES):
        rng = np.random.default_rng([seed, fi])
        seen = set()
        while len(seen) < per_family:
            msg, ans = task(rng, fam, "heldout")
            if msg in seen or msg in exclude:
                continue
            seen.add(msg)
            rows.append({"task": fam, "message": msg, "prompt": data.chat_prompt(msg), "answer": ans})
    return rows


def unseen_set(per_family=N_PER_FAMILY_UNSEEN, seed=UNSEEN_SEED):
    """The unseen-word, paraphrased-instruction evaluation set: `per_family` distinct messages per
    family, every word and instruction from the held-out side."""
    return heldout_rows(per_family, seed)


# Extra phrasings of the conversational intents for the tuning split only: the held-out side of
# PHRASES has a few dozen messages per intent and the evaluation set takes most of them, so
# without these the split's chat rows would be almost all out-of-scope questions. Nothing is
# trained on them and the evaluation set never uses them.
VAL_PHRASES = {
    "greet": ["hello you", "hi everyone", "hey, hello", "good morning to you", "hi, good evening", "hello, model",
              "greetings, bot", "hey there friend", "a warm hello", "top of the morning"],
    "how_are_you": ["how are you holding up", "how goes it", "how's life", "you alright", "how are you keeping",
                    "are you doing well", "how's your evening", "how are things with you", "how you doing",
                    "feeling good today"],
    "identity": ["what is this thing", "who built you", "what am i chatting with", "are you a computer",
                 "what are you exactly", "tell me who you are", "are you software", "what sort of ai are you",
                 "is this a bot", "what should i know about you"],
    "abilities": ["what can you help me with", "what kinds of things can you do", "what's possible here",
                  "which tasks do you handle", "what can you do for me", "what are you for", "how can you be useful",
                  "give me your list of skills", "what can you manage", "tell me what you can do"],
    "thanks": ["thanks a bunch", "thank you, friend", "big thanks", "thanks heaps", "cheers, thanks",
               "thank you for that", "thanks loads", "i appreciate that", "thanks, that's great", "lovely, thanks"],
    "bye": ["bye now", "see you soon", "goodbye for now", "i'm off", "until next time", "catch you soon",
            "have a good one", "signing off", "good night then", "see you around"],
}


def unseen_val_set(per_family=N_PER_FAMILY_UNSEEN_VAL, seed=UNSEEN_SEED + 2):
    """Tuning split of the unseen generator (held-out words and instructions, like the evaluation
    set): `per_family` distinct messages per family, none of them in `unseen_set()`, so a search
    tuned on it is judged on prompts it never saw. Nothing is trained on either. Its chat rows
    follow the evaluation set's mix of intents, phrased from the held-out phrasings the
    evaluation set left and `VAL_PHRASES`."""
    evaluation = unseen_set()
    taken = {r["message"] for r in evaluation}
    rows = [r for r in heldout_rows(per_family, seed, exclude=taken) if r["task"] != "chat"]
    return rows + val_chat_rows(per_family, seed, evaluation, taken)


def val_chat_rows(n, seed, evaluation, taken):
    """`n` chat rows with the intents in the evaluation set's proportions (largest remainders)."""
    answers = {v: k for k, v in REPLIES.items()}
    counts = {i: 0 for i in INTENTS}
    for r in evaluation:
        if r["task"] == "chat":
            counts[answers[r["answer"]]] += 1
    total = sum(counts.values())
    quota = {i: n * c // total for i, c in counts.items()}
    for i in sorted(INTENTS, key=lambda i: -(n * counts[i] % total))[:n - sum(quota.values())]:
        quota[i] += 1
    rng = np.random.default_rng([seed, FAMILIES.index("chat")])
    rows = []
    for intent in INTENTS:
        if intent == "out_of_scope":
            phrase = lambda: chat_phrase(rng, intent, "heldout")
        else:
            cores = [p for p in PHRASES[intent] if heldout_text(p)] + VAL_PHRASES[intent]
            phrase = lambda: dressed_phrase(rng, intent, cores)
        seen = set()
        while len(seen) < quota[intent]:
            msg = phrase()
            if msg in seen or msg in taken:
                continue
            seen.add(msg)
            rows.append({"task": "chat", "message": msg, "prompt": data.chat_prompt(msg), "answer": REPLIES[intent]})
    # Interleave the intents, as the generator does, so the first rows are a fair sample too.
    order = rng.permutation(len(rows))
    return [rows[i] for i in order]


def write_unseen(out_dir=data.DATA_DIR, per_family=N_PER_FAMILY_UNSEEN, long=False):
    import os
    rows = unseen_long_set(per_family) if long else unseen_set(per_family)
    data.write_task_rows(os.path.join(out_dir, "unseen_long.jsonl" if long else "unseen.jsonl"), rows)
    if not long:
        data.write_task_rows(os.path.join(out_dir, "unseen_val.jsonl"), unseen_val_set())


def main():
    import argparse
    ap = argparse.ArgumentParser(description="Write models/data/unseen.jsonl, unseen_val.jsonl (its tuning split) and "
                                             "unseen_long.jsonl: the "
                                             "unseen-word, paraphrased-instruction evaluation sets of the v2 "
                                             "skills and of the long-answer families.")
    ap.add_argument("--corpus", default=data.CORPUS_DIR, help="folder of Gutenberg *.txt (default: %(default)s)")
    ap.add_argument("--out-dir", default=data.DATA_DIR)
    ap.add_argument("--per-family", type=int, default=N_PER_FAMILY_UNSEEN)
    a = ap.parse_args()
    data.set_corpus_dir(a.corpus)
    write_unseen(a.out_dir, a.per_family)
    write_unseen(a.out_dir, a.per_family, long=True)


if __name__ == "__main__":
    main()
