#!/usr/bin/env python3
"""Draws a diffusion model's canvas live while `unmask serve` denoises it.

Asks for a streamed chat completion with the `stream_steps` extension and redraws the
canvas after every step: `·` still masked, yellow = committed but revisable, green =
final, `∎` an end-of-text or end-of-turn token; the answer text (the stable left-to-right prefix) is printed below it.

    unmask serve &                                      # http://127.0.0.1:8080
    python3 docs/serve_canvas.py "What is 512+389?"
    python3 docs/serve_canvas.py --max-tokens 32 --steps 32 "Sort: b a c"
    python3 docs/serve_canvas.py --plain "What is 12+34?"   # one line per step (logs, pipes)

Python standard library only; `--api-key` (or $UNMASK_API_KEY) when the server wants one.
"""

import argparse
import json
import os
import sys
import urllib.request

MASKED = "·"


def events(url, key, body):
    """The JSON objects of a server-sent event stream, until `[DONE]`."""
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key or 'none'}"},
    )
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode("utf-8").rstrip("\r\n")
            if not line.startswith("data: "):
                continue  # blank separators and keep-alive comments
            data = line[len("data: "):]
            if data == "[DONE]":
                return
            yield json.loads(data)


def cell(token_text, state, color):
    # Special tokens (end of text, end of turn) as one glyph, so the canvas keeps its width.
    special = token_text.startswith("<|") and token_text.endswith("|>")
    text = "∎" if special else (token_text.replace("\n", "⏎") or " ")
    if not color:
        return text if state == "stable" else f"[{text}]"
    return f"\033[{'32' if state == 'stable' else '33'}m{text}\033[0m"


def draw(canvas, step, answer, plain, color):
    cells = "".join(MASKED if c is None else cell(*c, color) for c in canvas)
    line = f"step {step:>3} │ {cells} │ {answer}"
    if plain:
        print(line, flush=True)
    else:
        sys.stdout.write("\r\033[2K" + line)
        sys.stdout.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("prompt")
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--model", default="tiny-llada")
    p.add_argument("--api-key", default=os.environ.get("UNMASK_API_KEY"))
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--steps", type=int)
    p.add_argument("--plain", action="store_true", help="one line per step, no colours")
    args = p.parse_args()

    plain = args.plain or not sys.stdout.isatty()
    color = not plain and "NO_COLOR" not in os.environ
    unmask = {"stream_steps": True}
    if args.steps:
        unmask["steps"] = args.steps
    body = {"model": args.model, "stream": True, "messages": [{"role": "user", "content": args.prompt}], "unmask": unmask}
    if args.max_tokens:
        body["max_tokens"] = args.max_tokens

    canvas, answer, info = [], "", {}
    for chunk in events(args.url.rstrip("/"), args.api_key, body):
        if "error" in chunk:
            sys.exit(f"\nerror: {chunk['error']['message']}")
        ext = chunk.get("unmask") or {}
        if "gen_length" in ext:  # the first chunk: the canvas's shape
            canvas = [None] * ext["gen_length"]
        for choice in chunk.get("choices", []):
            answer += (choice.get("delta") or {}).get("content") or ""
        if "step" in ext:
            step = ext["step"]
            for ch in step["changes"]:
                if 0 <= ch["pos"] < len(canvas):
                    canvas[ch["pos"]] = None if ch["state"] == "masked" else (ch["text"], ch["state"])
            draw(canvas, step["step"], answer, plain, color)
        if "steps" in ext:  # the last chunk: what the run cost
            info = ext
    if not plain:
        print()
    print(f"answer: {answer}")
    if info:
        print(f"run {info.get('run_id')}: {info['steps']} steps, {info['forwards']} forwards, {info['wall_s'] * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
