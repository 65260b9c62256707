"""The official `openai` Python package against a running `unmask serve`.

Started by cli/tests/serve.rs and by the `serve` bench suite, which create a virtual
environment with `openai` and start the real server binary. Environment:

    UNMASK_SERVE_URL    base URL including /v1, e.g. http://127.0.0.1:PORT/v1 (required)
    UNMASK_SERVE_KEY    the server's API key (when it requires one; a wrong key is then tried)
    UNMASK_SERVE_MODEL  model id (default tiny-llada)

The last line printed is `openai-client-tests: {"passed": N, "failed": M, "total": T}`; the
exit status is 0 only when every test passed.
"""

import json
import os
import sys
import unittest

import openai

URL = os.environ["UNMASK_SERVE_URL"]
KEY = os.environ.get("UNMASK_SERVE_KEY") or "no-key-needed"
MODEL = os.environ.get("UNMASK_SERVE_MODEL", "tiny-llada")
QUESTION = [{"role": "user", "content": "What is 347+586?"}]
# One long block without early stop: many steps, so a stream is still running when it is cut.
LONG = {"unmask": {"steps": 96, "block_length": 96, "early_stop_eos": False}}


def client(key=KEY):
    # No retries: the error tests want the server's first answer.
    return openai.OpenAI(base_url=URL, api_key=key, max_retries=0, timeout=120)


def extension(obj):
    """The `unmask` object of a response or chunk (an extra field to the openai models)."""
    return (obj.model_extra or {}).get("unmask")


class NonStreaming(unittest.TestCase):
    def test_models_list_names_the_model(self):
        ids = [m.id for m in client().models.list()]
        self.assertIn(MODEL, ids)
        self.assertEqual(client().models.retrieve(MODEL).id, MODEL)

    def test_chat_completion_answers_with_usage(self):
        r = client().chat.completions.create(model=MODEL, messages=QUESTION, temperature=0, seed=1, max_tokens=16)
        self.assertTrue(r.id.startswith("chatcmpl-"))
        self.assertEqual(r.object, "chat.completion")
        self.assertEqual(r.model, MODEL)
        choice = r.choices[0]
        self.assertEqual(choice.message.role, "assistant")
        self.assertTrue(choice.message.content, "empty answer")
        self.assertEqual(choice.finish_reason, "stop")
        self.assertGreater(r.usage.prompt_tokens, 0)
        self.assertGreater(r.usage.completion_tokens, 0)
        self.assertLessEqual(r.usage.completion_tokens, 16)
        self.assertEqual(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens)
        ext = extension(r)
        self.assertEqual(ext["settings"]["gen_length"], 16)
        self.assertEqual(ext["settings"]["seed"], 1)

    def test_extension_options_are_echoed(self):
        r = client().chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=32,
            extra_body={"unmask": {"steps": 16, "block_length": 16, "cache": "prefix", "speculative": True}},
        )
        s = extension(r)["settings"]
        self.assertEqual((s["gen_length"], s["block_length"], s["steps"], s["cache"]), (32, 16, 16, "prefix"))
        self.assertIsNotNone(s["speculative"])
        self.assertTrue(r.choices[0].message.content is not None)

    def test_text_completion(self):
        r = client().completions.create(model=MODEL, prompt="What is 12+34?", max_tokens=16)
        self.assertEqual(r.object, "text_completion")
        self.assertIsInstance(r.choices[0].text, str)
        self.assertIn(r.choices[0].finish_reason, ("stop", "length"))
        self.assertGreater(r.usage.prompt_tokens, 0)

    def test_stop_string_cuts_the_answer(self):
        full = client().chat.completions.create(model=MODEL, messages=QUESTION).choices[0].message.content
        self.assertGreaterEqual(len(full), 2, f"answer {full!r} too short to cut")
        stop = full[1]
        r = client().chat.completions.create(model=MODEL, messages=QUESTION, stop=[stop])
        self.assertEqual(r.choices[0].message.content, full[: full.index(stop)])
        self.assertEqual(r.choices[0].finish_reason, "stop")


class Streaming(unittest.TestCase):
    def test_chat_stream_concatenates_to_the_whole_answer(self):
        whole = client().chat.completions.create(model=MODEL, messages=QUESTION).choices[0].message.content
        stream = client().chat.completions.create(
            model=MODEL, messages=QUESTION, stream=True, stream_options={"include_usage": True}
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        self.assertEqual(text, whole)
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        self.assertEqual(finishes, ["stop"])
        self.assertEqual(chunks[-1].choices, [])
        self.assertGreater(chunks[-1].usage.completion_tokens, 0)
        self.assertEqual(len({c.id for c in chunks}), 1)

    def test_text_completion_stream(self):
        whole = client().completions.create(model=MODEL, prompt="What is 12+34?").choices[0].text
        chunks = list(client().completions.create(model=MODEL, prompt="What is 12+34?", stream=True))
        self.assertEqual("".join(c.choices[0].text for c in chunks if c.choices), whole)

    def test_stream_steps_carry_the_canvas(self):
        stream = client().chat.completions.create(
            model=MODEL, messages=QUESTION, stream=True, extra_body={"unmask": {"stream_steps": True}}
        )
        first, steps = None, []
        for c in stream:
            ext = extension(c) or {}
            if first is None:
                first = ext
            if "step" in ext:
                steps.append(ext["step"])
        self.assertIsInstance(first.get("run_id"), int)
        gen_length = first["gen_length"]
        self.assertGreater(len(steps), 0)
        committed = {ch["pos"] for s in steps for ch in s["changes"] if ch["state"] != "masked"}
        self.assertTrue(committed, "no committed positions")
        self.assertTrue(all(0 <= p < gen_length for p in committed))
        for s in steps:
            for ch in s["changes"]:
                self.assertIn(ch["state"], ("masked", "visible", "stable"))
                self.assertIsInstance(ch["token"], int)

    def test_closing_a_stream_early_leaves_the_server_serving(self):
        with client().chat.completions.create(model=MODEL, messages=QUESTION, stream=True, max_tokens=96, extra_body=LONG) as s:
            next(iter(s))
        r = client().chat.completions.create(model=MODEL, messages=QUESTION)
        self.assertTrue(r.choices[0].message.content)


class Errors(unittest.TestCase):
    def assert_bad_request(self, fn, words):
        with self.assertRaises(openai.BadRequestError) as cm:
            fn()
        self.assertEqual(cm.exception.status_code, 400)
        self.assertIn(words, str(cm.exception))

    def test_unknown_model_is_not_found(self):
        with self.assertRaises(openai.NotFoundError) as cm:
            client().chat.completions.create(model="no-such-model", messages=QUESTION)
        self.assertEqual(cm.exception.code, "model_not_found")

    def test_too_many_tokens_is_a_bad_request(self):
        self.assert_bad_request(
            lambda: client().chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=100000), "context"
        )

    def test_a_draft_the_server_was_not_started_with_is_refused(self):
        self.assert_bad_request(
            lambda: client().chat.completions.create(
                model=MODEL, messages=QUESTION, extra_body={"unmask": {"draft_model": "tiny-draft"}}
            ),
            "without a draft model",
        )

    def test_unknown_extension_key_is_refused(self):
        self.assert_bad_request(
            lambda: client().chat.completions.create(model=MODEL, messages=QUESTION, extra_body={"unmask": {"stepz": 4}}),
            "stepz",
        )

    def test_several_choices_are_refused(self):
        self.assert_bad_request(lambda: client().chat.completions.create(model=MODEL, messages=QUESTION, n=2), "n = 1")

    def test_a_bad_streaming_request_fails_before_streaming(self):
        self.assert_bad_request(
            lambda: client().chat.completions.create(model=MODEL, messages=QUESTION, stream=True, max_tokens=100000),
            "context",
        )

    @unittest.skipUnless(os.environ.get("UNMASK_SERVE_KEY"), "the server requires no key")
    def test_a_wrong_key_is_refused(self):
        with self.assertRaises(openai.AuthenticationError):
            client(key="wrong-" + KEY).models.list()


if __name__ == "__main__":
    result = unittest.TextTestRunner(verbosity=2, stream=sys.stdout).run(unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__]))
    failed = len(result.failures) + len(result.errors)
    skipped = len(result.skipped)
    summary = {"passed": result.testsRun - failed - skipped, "failed": failed, "skipped": skipped, "total": result.testsRun}
    print("openai-client-tests: " + json.dumps(summary), flush=True)
    sys.exit(0 if failed == 0 else 1)
