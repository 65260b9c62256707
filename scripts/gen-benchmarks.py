#!/usr/bin/env python3
"""Writes docs/benchmarks.md from bench/results/*.json, so no benchmark number is typed by hand.

Usage (from anywhere; Python 3 standard library only):
    python3 scripts/gen-benchmarks.py            # rewrite docs/benchmarks.md
    python3 scripts/gen-benchmarks.py --check    # exit 1 if docs/benchmarks.md is stale
    python3 scripts/gen-benchmarks.py --results DIR --out FILE

`bench/run SUITE` (or `unmask bench SUITE`) writes bench/results/SUITE.json; rerun this script
afterwards and commit both. `scripts/test-all.sh` (and so CI) runs `--check`.

The output is a pure function of the JSON files: suites in a fixed order (unknown suites after
them, alphabetically), keys sorted wherever their order carries no meaning, floats printed with
fixed formats. Any figure whose key or section says simulated / sim_ is labelled SIMULATED.
"""
import argparse
import datetime
import difflib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_RESULTS = os.path.join(ROOT, "bench", "results")
DEFAULT_OUT = os.path.join(ROOT, "docs", "benchmarks.md")

# The order `unmask bench --all` runs them in (cli/src/bench_cmd.rs).
ORDER = ["forward", "kernels", "npu", "decoding", "ablation", "quality", "store"]
TITLES = {
    "forward": "one denoising step at LLaDA-8B layer shapes",
    "kernels": "GEMM kernels per weight format",
    "npu": "virtual NPU: cost-model calibration and simulated phones",
    "decoding": "reference decoding vs KV caches vs confidence threshold",
    "ablation": "NPU-aware decoding (speculative windows, progressive revision)",
    "quality": "embedded models on the held-out tasks",
    "store": "persisting step traces",
    "robustness": "hostile inputs",
    "serve": "the OpenAI-compatible server under load and faults",
    "specar": "speculative decoding of autoregressive models (measured)",
    "moe": "MoE prefill on NPUs: CPU only vs naive per-expert dispatch vs static tiers + groups + residency",
}
TASKS = ["add", "sub", "reverse", "sort", "copy", "kv", "count", "continue", "next"]
SIM = "**SIMULATED**"
NA = "–"


# ----------------------------------------------------------------------------- formatting

def fx(v, nd=2):
    """Fixed decimals; None -> dash; ints stay ints."""
    if v is None:
        return NA
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return str(v)
    return f"{v:.{nd}f}"


def g(v):
    """Generic number: 4 significant digits."""
    if v is None:
        return NA
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, str):
        return v.replace("|", "\\|").replace("\n", " ")
    return "`" + json.dumps(v, sort_keys=True, ensure_ascii=False) + "`"


def pct(v, nd=1):
    return NA if v is None else f"{100 * v:.{nd}f} %"


def gb(v):
    return NA if v is None else f"{v / 1e9:.2f} GB"


# Simulated headline keys whose names the issues fixed without a sim_ prefix.
SIMULATED_KEYS = {"cpu_busy_ratio_vs_cpu"}


def is_sim_key(key):
    k = str(key).lower()
    return k.startswith("sim_") or "_sim_" in k or k.endswith("_sim") or "simulated" in k or k in SIMULATED_KEYS


def table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        out.append("| " + " | ".join(r) + " |")
    return "\n".join(out) + "\n"


def kv_table(d, sim_all=False):
    """Two-column table of a flat dict (sorted keys); nested values as compact JSON."""
    rows = []
    for k in sorted(d):
        v = d[k]
        label = f"{SIM} " if (sim_all or is_sim_key(k)) and not isinstance(v, bool) else ""
        rows.append([f"`{k}`", label + g(v)])
    return table(["key", "value"], rows)


def settings_line(s):
    """The decode settings that matter for reading a table, in a fixed order."""
    if not isinstance(s, dict):
        return ""
    keys = ["gen_length", "block_length", "steps", "temperature", "remasking", "cache", "threshold",
            "alg"]
    parts = [f"{k} {g(s[k])}" for k in keys if k in s and s[k] is not None]
    return "Decode settings: " + ", ".join(parts) + "."


def ordered(keys, preferred):
    keys = list(keys)
    return [k for k in preferred if k in keys] + sorted(k for k in keys if k not in preferred)


def task_table(named):
    """named: list of (label, tasks-dict). Columns: the tasks in TASKS order, then unknown ones."""
    cols = []
    for _, t in named:
        for k in t or {}:
            if k not in cols:
                cols.append(k)
    cols = ordered(cols, TASKS)
    rows = []
    for label, t in named:
        t = t or {}
        rows.append([label] + [fx(t[c].get("accuracy"), 2) if c in t else NA for c in cols])
    return table(["", *cols], rows)


# ----------------------------------------------------------------------------- per suite

def header(name, d):
    lines = [f"## {name}\n", f"*{TITLES.get(name, name)}*\n"]
    quick = d.get("quick")
    m = d.get("machine") or {}
    q = " --quick" if quick else ""
    lines.append(f"- Command: `bench/run {name}{q}` (or `unmask bench {name}{q}`), writes `bench/results/{name}.json`.")
    if quick:
        lines.append("- **Quick run** (`quick: true`): a shortened suite; its numbers are not "
                     "comparable with a full run's.")
    else:
        lines.append("- Full run (`quick: false`).")
    mach = ", ".join(f"{k} {g(m[k])}" for k in sorted(m)) if m else "not recorded"
    lines.append(f"- Machine: {mach}.")
    lines.append(f"- Elapsed: {fx(d.get('elapsed_s'), 1)} s.")
    return "\n".join(lines) + "\n"


def headline(name, d):
    h = d.get("headline")
    if not isinstance(h, dict) or not h:
        return ""
    rows = []
    for k in sorted(h):
        v = h[k]
        kind = SIM if is_sim_key(k) else ""
        rows.append([f"`{k}`", g(v), kind])
    note = ""
    if h.get("simulated") is True:
        note = ("This headline carries `simulated: true`: its `sim_*` figures come from the "
                "virtual NPU's cost model, not from a phone.\n\n")
    return f"### {name}: headline\n\n" + note + table(["key", "value", ""], rows)


def render_forward(d):
    out = []
    s = d.get("shape") or {}
    if s:
        out.append(f"A block of {g(s.get('block'))} tokens over a {g(s.get('prefix'))}-token cached "
                   f"prefix, logits for every block row, on a model with LLaDA-8B layer shapes (hidden "
                   f"{g(s.get('hidden'))}, FFN {g(s.get('ffn'))}, {g(s.get('heads'))} heads, vocab "
                   f"{g(s.get('vocab'))}) and {g(s.get('layers'))} layers of random weights.\n")
    p = d.get("peaks") or {}
    fma, vnni = p.get("fma_f32_flops"), p.get("vnni_int8_ops")
    rows = []
    for key, label, peak, peak_name in [("f32", "f32", fma, "FMA"), ("q8_0", "Q8_0", vnni, "VNNI"),
                                        ("int8_per_row", "f32 requantised to int8 (per-row scales)", vnni, "VNNI")]:
        r = d.get(key)
        if not isinstance(r, dict):
            continue
        gf = r.get("gflops")
        frac = f"{gf * 1e9 / peak:.2f} of {peak_name} peak" if gf is not None and peak else NA
        rows.append([label, fx(r.get("step_s"), 3) + " s", fx(gf, 1), frac])
    if rows:
        out.append(table(["weights", "step", "GFLOP/s (GOP/s for int8)", "fraction of measured peak"], rows))
    if fma or vnni:
        out.append(f"Peaks measured in the same run ({g(p.get('threads'))} threads): AVX-512 FMA "
                   f"{fx(fma / 1e9 if fma else None, 1)} GFLOP/s, VNNI int8 {fx(vnni / 1e9 if vnni else None, 1)} GOP/s.\n")
    notes = [f"- {label}: {d[k]['weights' if k == 'f32' else 'note']}" for k, label in
             [("f32", "f32"), ("q8_0", "Q8_0"), ("int8_per_row", "int8")]
             if isinstance(d.get(k), dict) and (d[k].get("weights") or d[k].get("note"))]
    if notes:
        out.append("\n".join(notes) + "\n")
    mem = d.get("memory") or {}
    if mem:
        rows = [[f"`{k}`", gb(mem[k])] for k in sorted(mem) if isinstance(mem[k], (int, float))]
        out.append("### forward: memory\n\n" + table(["", "bytes"], rows))
        if mem.get("note"):
            out.append("Note (from the JSON): " + mem["note"] + ".\n")
    return "\n".join(out)


KERNEL_ORDER = ["int8_per_row", "q8_0", "q8_0_avx2", "q8_0_scalar", "q4_0", "q4_0_as_int4", "q4_0_as_int8",
                "q4_k", "f32_own_avx512", "f32_gemm_crate"]


def render_kernels(d):
    out = []
    if d.get("int8_isa"):
        out.append(f"Detected int8 ISA: `{d['int8_isa']}`. Shapes are m × (n × k) with LLaDA-8B projection "
                   "sizes; rates in GOP/s (int8 / quantised) and GFLOP/s (f32).\n")
    res = d.get("results") or []
    names = []
    for r in res:
        for k in r.get("kernels", {}):
            if k not in names:
                names.append(k)
    names = ordered(names, KERNEL_ORDER)
    if res:
        rows = []
        for r in res:
            kk = r.get("kernels", {})
            rows.append([g(r.get("m")), f"{g(r.get('n'))}×{g(r.get('k'))}"] +
                        [fx(kk[n].get("gops"), 0) if n in kk else NA for n in names])
        out.append(table(["m", "n×k", *[f"`{n}`" for n in names]], rows))
        rows = []
        for r in res:
            kk = r.get("kernels", {})
            rows.append([g(r.get("m")), f"{g(r.get('n'))}×{g(r.get('k'))}"] +
                        [fx(kk[n].get("peak_fraction"), 2) if n in kk else NA for n in names])
        out.append("### kernels: fraction of the measured peak\n\n" +
                   table(["m", "n×k", *[f"`{n}`" for n in names]], rows))
    p = d.get("peaks") or {}
    if p:
        rows = []
        for when in ("before", "after"):
            if isinstance(p.get(when), dict):
                rows.append([when, fx(p[when].get("fma", 0) / 1e9, 1), fx(p[when].get("vnni", 0) / 1e9, 1)])
        rows.append(["used", fx((p.get("fma_f32_flops") or 0) / 1e9, 1), fx((p.get("vnni_int8_ops") or 0) / 1e9, 1)])
        # Results before the int8 stream was recorded all came from AVX-512 VNNI machines.
        avx2 = p.get("int8_stream") == "Avx2Int8"
        fma_col = "FMA GFLOP/s (AVX2)" if avx2 else "AVX-512 FMA GFLOP/s"
        int8_col = "int8 GOP/s (AVX2 maddubs+madd+add)" if avx2 else "VNNI GOP/s"
        out.append(f"### kernels: peaks ({g(p.get('threads'))} threads)\n\n" +
                   table(["probe", fma_col, int8_col], rows))
    bpw = d.get("bytes_per_weight") or {}
    if bpw:
        out.append("### kernels: bytes per weight in memory\n\n" +
                   table(["format", "bytes / weight"], [[f"`{k}`", fx(bpw[k], 3)] for k in sorted(bpw)]))
    if d.get("notes"):
        out.append("Notes (from the JSON): " + d["notes"] + ".\n")
    if d.get("load_avg_before"):
        out.append(f"Load average before the run: {d['load_avg_before']}.\n")
    return "\n".join(out)


def render_npu(d, all_results):
    out = []
    v = d.get("validation") or {}
    if v:
        out.append("### npu: validation against published phone measurements\n")
        out.append(f"Every row of `{g(v.get('source'))}` (published prefill/decode rates of AR models; each row cites "
                   "its source and table cell) predicted by the product's simulator. Published values are "
                   f"measurements; predictions are {SIM}. Fit rows set the fitted profile parameters; held-out rows "
                   "were never used to set anything. Goal: " + g(v.get("goal")) + ".\n")
        prof = v.get("profiles") or {}
        goal = v.get("goal_met") or {}
        rows = []
        for name in sorted(prof):
            p = prof[name]
            h, f, hn, hc = p.get("heldout") or {}, p.get("fit") or {}, p.get("heldout_npu") or {}, p.get("heldout_cpu") or {}
            if not (h.get("rows") or f.get("rows")):
                rows.append([f"`{name}`", "0", NA, NA, "0", NA, "no published rows: all rate fields are unvalidated estimates"])
                continue
            met = goal.get(name)
            u = p.get("heldout_untouched") or {}
            seen = (h.get("rows") or 0) - (u.get("rows") or 0) if u else 0
            note = ""
            if seen > 0:
                note = (f"; {seen} of them seen before a later modelling change (the other {g(u.get('rows'))}: "
                        f"median {pct(u.get('median_rel_error'))}, worst "
                        + (fx(u.get("max_factor"), 2) + "×" if u.get("max_factor") else NA) + ")")
            rows.append([f"`{name}`", g(h.get("rows")), pct(h.get("median_rel_error")),
                         fx(h.get("max_factor"), 2) + "×" if h.get("max_factor") else NA, g(f.get("rows")),
                         pct(f.get("median_rel_error")),
                         f"NPU {g(hn.get('rows'))} / CPU {g(hc.get('rows'))} held-out rows; goal "
                         + ("met" if met else "**not met**" if met is False else NA) + note])
        out.append(table(["profile", "held-out rows", "held-out median error", "held-out worst (factor)",
                          "fit rows", "fit median error", ""], rows))
        fresh_rows = [r for r in (v.get("rows") or []) if r.get("added_after_split")]
        for name in sorted(prof):
            fr = (prof[name] or {}).get("heldout_fresh") or {}
            if not fr.get("rows"):
                continue
            mine = sorted((r for r in fresh_rows if r.get("profile") == name), key=lambda r: r.get("id", ""))
            out.append(f"**`{name}`: fresh held-out rows (added after the profile change)**: {g(fr.get('rows'))} rows, "
                       f"median error {pct(fr.get('median_rel_error'))}, worst "
                       + (fx(fr.get("max_factor"), 2) + "×" if fr.get("max_factor") else NA)
                       + ". Added after the split and after every profile change, never used to fit; the independent "
                       "check of the profile's NPU values (counted in the table above too):\n\n" + table(
                           ["fresh row", "published", f"predicted ({SIM})", "error", "factor"],
                           [[f"`{g(r.get('id'))}`", fx(r.get("published"), 2), fx(r.get("predicted"), 2),
                             pct(r.get("rel_error")), fx(r.get("factor"), 2) + "×"] for r in mine]))
        rr = [r for r in (v.get("rows") or [])]
        if rr:
            rr.sort(key=lambda r: (r.get("profile", ""), r.get("split", ""), r.get("id", "")))
            out.append("All rows (tokens/s; factor = max(p/m, m/p)):\n\n" + table(
                ["row", "split", "published", f"predicted ({SIM})", "factor"],
                [[f"`{g(r.get('id'))}`", g(r.get("split")) + (" (seen before a later change)" if r.get("seen_before_change") else "")
                  + (" (added after the split)" if r.get("added_after_split") else ""),
                  fx(r.get("published"), 2), fx(r.get("predicted"), 2),
                  fx(r.get("factor"), 2) + "×"] for r in rr]))
        for rt in v.get("runtimes") or []:
            out.append(f"Third-party NPU runtime `{g(rt.get('name'))}`: matrix-efficiency factor "
                       f"{fx(rt.get('matrix_efficiency_factor'), 3)} of the vendor runtime's, fitted on "
                       + ", ".join(f"`{x}`" for x in rt.get("rows") or []) + ".\n")
        for c in v.get("changes_after_split") or []:
            out.append(f"Change after the split: {c}\n")
        for k in ("scope", "not_found", "split_rule"):
            if v.get(k):
                out.append(f"{k.replace('_', ' ').capitalize()}: {v[k]}\n")
    ms = d.get("measured_schedule") or {}
    if ms:
        out.append("### npu: the measured schedule\n")
        out.append(f"{g(ms.get('model'))}: {g(ms.get('runs'))} held-out prompts decoded in this run, "
                   f"{g(ms.get('answer_tokens'))} answer tokens in {g(ms.get('forwards'))} forwards = "
                   f"**{fx(ms.get('answer_tokens_per_forward'), 3)} answer tokens per forward** (canvas tokens per "
                   f"forward, EOS padding included: {fx(ms.get('canvas_tokens_per_forward'), 3)}); exact-match accuracy "
                   f"{fx(ms.get('accuracy'), 3)} vs {fx(ms.get('reference_schedule_accuracy'), 3)} for the reference "
                   "schedule (one token per step). " + g(ms.get("note")) + ".\n")
    comps = [("comparison_measured_schedule", "measured schedule (replayed exactly)"),
             ("comparison_published_schedule", "published tokens per forward (Fast-dLLM)")]
    rows = []
    for key, label in comps:
        c = d.get(key) or {}
        if not c:
            continue
        b = c.get("error_bands") or {}
        lat = lambda k: fx((c.get(k) or {}).get("simulated_latency_s"), 2)
        band = lambda k: (f"{fx(b[k][0], 2)}–{fx(b[k][1], 2)}×" if b.get(k) else NA)
        rows.append([label, lat("cpu_prefix_kv"), lat("npu_naive"), lat("npu_memory_runtime"), lat("llama3_8b_ar_npu"),
                     fx(c.get("speedup_vs_cpu_prefix"), 2) + "×", band("vs_cpu_median_band"), band("vs_cpu_worst_band"),
                     fx(c.get("speedup_vs_ar"), 2) + "×", band("vs_ar_median_band"), band("vs_ar_worst_band")])
    if rows:
        out.append(f"### npu: LLaDA-8B on SM8750, {SIM}\n")
        if d.get("baseline"):
            out.append("Baseline: " + d["baseline"] + ".\n")
        out.append(table(["scenario", "phone CPU, prefix KV (s)", "NPU naive (s)", "NPU + memory runtime (s)",
                          "Llama-3-8B AR on NPU (s)", "vs CPU", "band (median)", "band (worst)", "vs AR",
                          "band (median)", "band (worst)"], rows))
        for key, label in comps:
            w = (d.get(key) or {}).get("workload") or {}
            if w:
                out.append(f"- {label}: " + "; ".join(f"{k.replace('_', ' ')}: {g(w[k])}" for k in sorted(w)) + "\n")
        if d.get("error_band_note"):
            out.append("Error bands: " + d["error_band_note"] + ".\n")
        pdv = ((d.get("per_device") or {}).get("results")) or {}
        if pdv:
            out.append(f"The measured schedule on each validated Snapdragon profile ({SIM}):\n\n" + table(
                ["device", "vs CPU", "vs AR", "vs naive offload", "held-out NPU / CPU rows"],
                [[f"`{dev}`", fx(r.get("speedup_vs_cpu_prefix"), 2) + "×", fx(r.get("speedup_vs_ar"), 2) + "×",
                  fx(r.get("speedup_vs_naive"), 2) + "×", f"{g(r.get('heldout_npu_rows'))} / {g(r.get('heldout_cpu_rows'))}"]
                 for dev, r in sorted(pdv.items())]))
        out.append("For scale, the paper this design follows reports 17–42× over the phone CPU with prefix KV reuse "
                   "and (unconfirmed) up to 3.9× over AR decoding (docs/sources.md §D7).\n")
    ab = (d.get("memory_runtime_ablation") or {})
    if ab.get("results"):
        out.append(f"### npu: memory runtime, each part switched off, {SIM}\n")
        out.append(f"{g(ab.get('schedule'))} on `{g(ab.get('device'))}`; budget: {g(ab.get('budget'))}.\n")
        rows = []
        for model in sorted(ab["results"]):
            for r in ab["results"][model]:
                res = r.get("result") or {}
                rows.append([model, g(r.get("label")), fx(res.get("simulated_latency_s"), 3),
                             fx(r.get("slowdown_vs_full"), 3) + "×", gb(res.get("streamed_bytes")),
                             fx(res.get("dma_busy_s"), 3), g(res.get("map_calls")), gb(res.get("peak_resident_bytes"))])
        out.append(table(["model", "variant", "latency (s)", "vs full runtime", "streamed", "DMA busy (s)",
                          "map calls", "peak NPU-visible"], rows))
    tr = d.get("trace") or {}
    if tr:
        dl, nl = tr.get("dma_lane") or {}, tr.get("npu_lane") or {}
        out.append(f"Trace: {g(tr.get('what'))}: {g(tr.get('forwards'))} forwards, NPU lane {g(nl.get('events'))} events "
                   f"({fx(nl.get('busy_s'), 3)} s), DMA lane {g(dl.get('events'))} events ({fx(dl.get('busy_s'), 3)} s), "
                   f"{SIM}; file `{g(tr.get('file'))}`. {g(tr.get('wall_note'))}.\n")
    c = d.get("calibration") or {}
    if c:
        out.append(f"### npu: cost-model calibration on this machine (profile `{g(c.get('profile'))}`, "
                   f"{g(c.get('threads'))} threads; host only, not validation)\n")
        out.append("A synthetic LLaDA-shaped model timed here (medians of interleaved samples, min–max in brackets) "
                   "and predicted by the profile's cost model; \"probe-adjusted\" takes the GEMM rate from a probe "
                   f"sampled in the same loop ({fx(c.get('probe_gemm_gflops'), 1)} GFLOP/s, "
                   f"{pct(c.get('probe_peak_fraction'))} of the profile's {fx(c.get('peak_gflops'), 1)} GFLOP/s peak; "
                   f"{g(c.get('probe_samples'))} samples).\n")
        rows = [[g(pt.get("tokens")), g(pt.get("context")),
                 f"{fx(pt.get('measured_s'), 3)} [{fx(pt.get('measured_min_s'), 3)}–{fx(pt.get('measured_max_s'), 3)}]",
                 fx(pt.get("predicted_s"), 3), pct(pt.get("rel_error")), fx(pt.get("probe_adjusted_s"), 3),
                 pct(pt.get("probe_adjusted_rel_error"))] for pt in c.get("points", [])]
        if rows:
            out.append(table(["block tokens", "context", "measured s", "predicted s", "error",
                              "probe-adjusted s", "error"], rows))
        if d.get("calibration_note"):
            out.append(d["calibration_note"] + ".\n")
    return "\n".join(out)


DECODING_ORDER = ["reference", "prefix_cache", "dual_cache", "prefix_cache_threshold_0.9"]


def render_decoding(d):
    out = []
    t = d.get("tiny_llada") or {}
    if t:
        n = d.get("examples_per_task")
        out.append(f"### decoding: embedded model\n\nThe embedded tiny-llada on the held-out task prompts "
                   f"({g(n)} per task), CPU. {settings_line(d.get('settings'))}\n")
        names = ordered(t, DECODING_ORDER)
        rows = [[f"`{k}`", fx(t[k].get("accuracy"), 3), g(t[k].get("forwards")),
                 fx(t[k].get("canvas_tokens_per_forward"), 2), fx(t[k].get("wall_s"), 1) + " s",
                 fx(t[k].get("speedup_vs_reference"), 2) + "×", fx(t[k].get("token_agreement_vs_reference"), 3)]
                for k in names]
        out.append(table(["variant", "exact match", "forwards", "canvas tokens / forward", "wall",
                          "speedup", "token agreement with reference"], rows))
        out.append("Caching is approximate for bidirectional models: the drift shows as the token agreement.\n")
        out.append("Per task (exact match):\n\n" + task_table([(f"`{k}`", t[k].get("tasks")) for k in names]))
    big = d.get("llada8b_2layer") or {}
    v = big.get("variants") or {}
    if v:
        out.append(f"### decoding: LLaDA-8B layer shapes\n\n2 layers, random weights (timing only), "
                   f"{g(big.get('prompt_tokens'))}-token prompt. {settings_line(big.get('settings'))}\n")
        ref = (v.get("reference") or {}).get("wall_s")
        names = ordered(v, DECODING_ORDER)
        rows = [[f"`{k}`", g(v[k].get("forwards")), fx(v[k].get("wall_s"), 2) + " s",
                 (fx(ref / v[k]["wall_s"], 2) + "×") if ref and v[k].get("wall_s") else NA] for k in names]
        out.append(table(["variant", "forwards", "wall", "speedup vs reference"], rows))
        if big.get("note"):
            out.append("Note (from the JSON): " + big["note"] + ".\n")
    return "\n".join(out)


ABLATION_ORDER = ["reference", "prefix_cache", "sliding_window", "speculative", "revision", "spec_revision",
                  "spec_revision_lockstep", "spec_aggressive", "spec_aggressive_revision", "spec_aggressive_revision_eager",
                  "revision_margin_0.05", "revision_margin_0.4", "revision_visible_0.5", "searched_control",
                  "spec_searched", "spec_searched_revision"]


def pts(v):
    return "—" if v is None else f"{v:+.2f}"


def paired_cell(p):
    if not isinstance(p, dict):
        return "—"
    lo, hi = p.get("ci95_points") or [None, None]
    return f"{pts(p.get('points'))} [{pts(lo)}, {pts(hi)}] (+{g(p.get('gained'))} / −{g(p.get('lost'))})"


def render_ablation_search(d):
    s = d.get("search") or {}
    if not s:
        return []
    spec_n = s.get("speculation_grid_examples")
    spec_n = f" (the speculation grid and its controls on the first {spec_n})" if spec_n and spec_n != s.get("examples") else ""
    out = ["### ablation: the search (tuning split)\n",
           f"Chosen on {g(s.get('split'))}, {g(s.get('examples'))} prompts{spec_n}, before anything ran on the "
           f"evaluation set. Rule (from the JSON): {g(s.get('rule'))}.\n"]
    rows = []
    for c in s.get("controls") or []:
        rows.append([f"control: {c.get('name')}", fx(c.get("accuracy"), 3), "—", fx(c.get("forwards_ratio_vs_prefix_cache"), 3),
                     fx(c.get("sim_8b_latency_ratio_vs_prefix_cache"), 3)])
    for p in s.get("speculation_grid") or []:
        rows.append([p.get("name"), fx(p.get("accuracy"), 3), pts(p.get("accuracy_change_vs_prefix_cache_points")),
                     fx(p.get("forwards_ratio_vs_prefix_cache"), 3), fx(p.get("sim_8b_latency_ratio_vs_prefix_cache"), 3)])
    out.append("Speculation grid (change, forwards and latency against each point's control: prefix-cache decoding on "
               "the same schedule without speculation):\n\n" +
               table(["point", "accuracy", "change (points)", "forwards ratio", f"{SIM} 8B latency ratio"], rows))
    ch = s.get("chosen_speculation") or {}
    for gr in s.get("revision_grids") or []:
        sp = gr.get("speculation") or {}
        rows = [[p.get("name", "").split(" + ", 1)[-1], fx(p.get("accuracy"), 3), pts(p.get("accuracy_change_vs_prefix_cache_points")),
                 g(p.get("revisions")), " / ".join(g(x) for x in p.get("revisions_fixed_broke_neutral") or []),
                 g(p.get("cpu_path_forwards")), fx(p.get("forwards_ratio_vs_prefix_cache"), 3),
                 fx(p.get("sim_8b_latency_ratio_vs_prefix_cache"), 3)]
                for p in gr.get("points") or []]
        if rows:
            out.append(f"Revision grid on **{g(sp.get('name'))}** (on the whole split: accuracy {fx(sp.get('accuracy'), 3)}, "
                       f"{pts(sp.get('accuracy_change_vs_prefix_cache_points'))} points against its control"
                       f"{' ' + fx((gr.get('control') or {}).get('accuracy'), 3) if gr.get('control') else ''}). Change "
                       "against that control; re-check forwards: the CPU path's, or the dense device's for the inline "
                       "schedule and final passes, which the forwards ratio then includes:\n\n" +
                       table(["revision", "accuracy", "change (points)", "revisions", "fixed / broke / neutral",
                              "re-check forwards", "forwards ratio", f"{SIM} 8B latency ratio"], rows))
    rev = s.get("chosen_revision") or {}
    out.append(f"Chosen: **{g(ch.get('name'))}**, {pts(s.get('chosen_speculation_loss_points'))} points lost against "
               f"its control on the whole tuning split, with revision "
               f"`{', '.join(f'{k} {json.dumps(v)}' for k, v in rev.items())}`.\n")
    return out


def render_ablation_answer(d):
    h = d.get("headline") or {}
    pr = d.get("paired") or {}
    if "speculation_loss_points" not in h:
        return []
    out = ["### ablation: the answer (evaluation set)\n"]
    rows = [[k.replace("_", " "), paired_cell(v)] for k, v in pr.items() if isinstance(v, dict)]
    out.append(f"{g(d.get('examples_per_task'))} prompts per task of `{g(d.get('eval_set'))}` (never used by the "
               "search). Paired differences over the same prompts, second minus first, in points, 95 % interval, "
               "(prompts gained / lost):\n\n" + table(["comparison", "points"], rows))
    verdict = "met" if h.get("goal_met") else "**not met**"
    out.append(f"Goal (speculation alone loses ≥ 2 points, speculation + revision within 0.5 point of the reference, "
               f"≤ 0.8× forwards and ≤ 0.85× {SIM} latency of prefix-cache decoding): {verdict}. Searched point: "
               f"reference {fx(h.get('accuracy_reference'), 3)}, control {fx(h.get('accuracy_searched_control'), 3)}, "
               f"speculative {fx(h.get('accuracy_speculative'), 3)}, + revision {fx(h.get('accuracy_spec_revision'), 3)}; "
               f"{g(h.get('revisions'))} revisions ({g(h.get('revisions_fixed'))} fixed / {g(h.get('revisions_harmed'))} "
               f"harmed); forwards {fx(h.get('forwards_ratio'), 3)}×, {SIM} latency {fx(h.get('sim_latency_ratio'), 3)}×; "
               f"host wall (measured) {fx(h.get('host_wall_ratio_spec_revision'), 3)}×"
               + (f"; revision schedule `{h['spec_revision_schedule']}`, {g(h.get('inline_forwards'))} re-check "
                  f"forwards on the dense device and {g(h.get('final_pass_forwards'))} final-pass forwards (in the "
                  f"forwards ratio)" if h.get("spec_revision_schedule") else "") + ".\n")
    m = d.get("moe") or {}
    if m.get("variants"):
        rows = [[f"`{k}`", fx(v.get("accuracy"), 3), " – ".join(fx(x, 3) for x in v.get("accuracy_ci95") or []),
                 g(v.get("forwards")), g(v.get("revisions")),
                 " / ".join(g(x) for x in v.get("revisions_fixed_broke_neutral") or [])]
                for k, v in m["variants"].items()]
        src = f" of `{m['eval_set']}` ({m.get('eval_set_note') or 'its own prompts'})" if m.get("eval_set") else ""
        out.append(f"The same settings on `{g(m.get('model'))}` (not searched on it; {g(m.get('examples'))} prompts{src}; "
                   f"canvas: {g(m.get('canvas'))}; timing: {g(m.get('timing'))}); speculation {paired_cell(m.get('speculation_loss'))} "
                   f"(control minus speculative), revision {paired_cell(m.get('revision_recovery'))}:\n\n" +
                   table(["variant", "accuracy", "95 % interval", "forwards", "revisions", "fixed / broke / neutral"], rows))
    return out


def render_ablation(d):
    out = []
    v = d.get("variants") or {}
    kind = ("unseen-word, paraphrased-instruction prompts" if d.get("prompts") == "unseen"
            else "held-out prompts")
    tune = f"; the search tunes on `{d['tune_set']}`" if d.get("tune_set") else ""
    out.append(f"The embedded model on the virtual NPU, {g(d.get('examples_per_task'))} {kind} per task"
               f"{' of `' + d['eval_set'] + '`' if d.get('eval_set') else ''}{tune}. {settings_line(d.get('settings'))}\n")
    out += render_ablation_answer(d)
    out += render_ablation_search(d)
    if d.get("timing"):
        out.append("Timing (from the JSON): " + d["timing"] + ".\n")
    if v:
        names = ordered(v, ABLATION_ORDER)
        devs = []
        for k in names:
            for r in v[k].get("sim_8b_replay") or []:
                if r.get("device") not in devs:
                    devs.append(r.get("device"))

        def rep(k, key):
            by = {r.get("device"): r.get(key) for r in v[k].get("sim_8b_replay") or []}
            return " / ".join(fx(by.get(dv), 0) for dv in devs)
        rows = []
        for k in names:
            x = v[k]
            rows.append([f"`{k}`", fx(x.get("accuracy"), 3), g(x.get("forwards")), fx(x.get("wall_s"), 1) + " s",
                         fx(x.get("sim_8b_sm8750_s"), 0) + " s", fx(x.get("sim_8b_latency_ratio_vs_prefix_cache"), 3),
                         rep(k, "simulated_latency_s"), rep(k, "async_latency_s"),
                         g(x.get("accepted_drafts")),
                         f"{g(x.get('cpu_path_forwards'))} ({g(x.get('cpu_path_jobs_deferred'))} / {g(x.get('cpu_path_busy_steps'))})",
                         g(x.get("revisions")), fx(x.get("token_agreement_vs_reference"), 3)])
        d_names = " / ".join(str(x) for x in devs)
        out.append(table(["variant", "accuracy", "forwards", "host wall",
                          f"{SIM} 8B SM8750 (the loop's clock)", f"{SIM} ratio vs prefix cache",
                          f"{SIM} replay lockstep {d_names} (s)", f"{SIM} replay async {d_names} (s)",
                          "drafts accepted", "CPU-path jobs (deferred / busy steps)", "revisions",
                          "token agreement"], rows))
        rf = [[f"`{k}`"] + [g(x) for x in (v[k].get("revisions_fixed_broke_neutral") or [None] * 3)]
              for k in names]
        out.append("Revisions that fixed / broke / left neutral an answer:\n\n" +
                   table(["variant", "fixed", "broke", "neutral"], rf))
        lm = [[f"`{k}`", g(v[k].get("lm_head_rows")), g(v[k].get("lm_head_rows_saved")), g(v[k].get("lm_head_rows_cpu_path"))]
              for k in names if v[k].get("lm_head_rows") is not None]
        if lm:
            out.append("LM-head rows of the NPU-aware loop (dense rows computed; rows saved against computing every "
                       "position of each forward's window; rows of the CPU path's checks):\n\n" +
                       table(["variant", "dense rows", "rows saved", "CPU-path rows"], lm))
        out.append("Per task (accuracy):\n\n" + task_table([(f"`{k}`", v[k].get("tasks")) for k in names]))
        h = d.get("headline") or {}
        sr, pc = v.get("spec_revision"), v.get("prefix_cache")
        if sr and pc and h:
            out.append(f"Reading it: with both features on at their defaults, forwards are "
                       f"{fx(h.get('forwards_ratio_default', h.get('forwards_ratio')), 3)}× and the "
                       f"loop's {SIM} LLaDA-8B latency on SM8750 "
                       f"{fx(h.get('sim_latency_ratio_default', h.get('sim_latency_ratio')), 3)}× those of "
                       f"prefix-cache decoding, at accuracy {fx(sr.get('accuracy'), 3)} vs "
                       f"{fx(pc.get('accuracy'), 3)}; the CPU path in lockstep costs "
                       f"{fx(h.get('sim_latency_ratio_lockstep_cpu_path'), 3)}× ({SIM}). Revisions made: "
                       f"{g(sr.get('revisions'))}. The host wall column of this table runs the \"NPU\" and the CPU path "
                       "on the same cores; the measured split (dense path on one core, CPU path on the other) is "
                       "the host wall table below.\n")
            ag, agr = v.get("spec_aggressive"), v.get("spec_aggressive_revision_eager")
            if ag and agr:
                fb = agr.get("revisions_fixed_broke_neutral") or [None] * 3
                out.append(f"Aggressive speculation (drafts accepted by their own confidence ≥ 0.5, lookahead on "
                           f"every step): {g(ag.get('forwards'))} forwards vs {g(pc.get('forwards'))} for the prefix "
                           f"cache, {SIM} latency {fx(ag.get('sim_8b_latency_ratio_vs_prefix_cache'), 3)}×, accuracy "
                           f"{fx(ag.get('accuracy'), 3)} vs {fx(pc.get('accuracy'), 3)} (reference "
                           f"{fx(v.get('reference', {}).get('accuracy'), 3)}); with eager revision "
                           f"{fx(agr.get('accuracy'), 3)}, {g(agr.get('revisions'))} revisions "
                           f"({g(fb[0])} fixed / {g(fb[1])} broke / {g(fb[2])} neutral).\n")
            accs = {round(x.get("accuracy") or 0, 9) for x in v.values()}
            if len(accs) == 1 and all(not x.get("revisions") for x in v.values()):
                out.append("In this run every variant has the same accuracy and no revision changed a token: "
                           "speculation cost no accuracy, and revision had nothing to recover. At 8B shapes one "
                           "CPU-path forward on the phone's cores lasts several dense NPU forwards, so the async "
                           "schedule runs a job on only some of the steps with Visible tokens and its verdicts land "
                           "after the block has moved on.\n")
    hw = d.get("host_wall") or {}
    if hw.get("variants"):
        hv = hw["variants"]
        rows = [[f"`{k}`", fx(x.get("wall_s"), 2) + " s", fx(x.get("wall_ratio_vs_prefix_cache"), 3),
                 fx(x.get("accuracy"), 3), g(x.get("dense_forwards")), g(x.get("cpu_path_forwards")),
                 f"{g(x.get('cpu_path_jobs_deferred'))} / {g(x.get('cpu_path_busy_steps'))} / {g(x.get('cpu_path_jobs_drained'))}",
                 g(x.get("revisions"))] for k, x in hv.items()]
        out.append("### ablation: host wall time (measured)\n\n"
                   f"Measured on this machine, {g(hw.get('examples'))} prompts, {g(hw.get('backend'))} backend; threads: "
                   f"{g(hw.get('threads'))}. Variants interleaved per prompt.\n\n" +
                   table(["variant", "wall", "ratio vs prefix cache", "accuracy", "dense forwards", "CPU-path forwards",
                          "jobs deferred / busy steps / drained", "revisions"], rows))
    cal = d.get("confidence_calibration_prefix_cache") or []
    if cal:
        out.append("### ablation: confidence calibration (prefix cache)\n\n" +
                   table(["confidence", "precision", "tokens"],
                         [[g(r.get("confidence")), fx(r.get("precision"), 3), g(r.get("tokens"))] for r in cal]))
    cfg = []
    for key in ("speculative", "revision"):
        if isinstance(d.get(key), dict):
            cfg.append(f"- `{key}`: " + ", ".join(f"{k} {g(d[key][k])}" for k in sorted(d[key])))
    if d.get("token_buckets") is not None:
        cfg.append(f"- token buckets of the profile: {g(d['token_buckets'])}")
    if cfg:
        out.append("Settings:\n\n" + "\n".join(cfg) + "\n")
    for key in ("note",):
        if d.get(key):
            out.append(f"Note (from the JSON): {d[key]}.\n")
    rp = d.get("replay") or {}
    if rp.get("note"):
        out.append(f"Replay ({SIM if rp.get('simulated') else 'measured'}, {g(rp.get('model'))}): {rp['note']}.\n")
    return "\n".join(out)


def ci_cell(tasks, family):
    """A family's accuracy with its 95 % interval, or a dash when the family was not run."""
    if family not in tasks:
        return NA
    lo, hi = (tasks[family].get("ci95") or [None, None])
    return f"{fx(tasks[family].get('accuracy'), 2)} ({fx(lo, 2)}-{fx(hi, 2)})"


def family_rows(models, names, key, per_key, families, tail):
    """One row per model that ran the `key` set: name, examples per family, each family's accuracy
    with its interval, then `tail(result)`."""
    rows = []
    for n in names:
        x = models[n] or {}
        u = x.get(key)
        if u:
            t = u.get("tasks") or {}
            rows.append([f"`{n}`", g(x.get(per_key))] + [ci_cell(t, f) for f in families] + tail(u))
    return rows


def render_quality(d):
    out = []
    m = d.get("models") or {}
    out.append(f"The embedded models (`models/README.md`) run by our Rust engine on the held-out test split: "
               f"dLLMs with LLaDA reference decoding, AR models greedy; prose metrics on "
               f"{g(d.get('prose_windows'))} held-out windows. {settings_line(d.get('settings'))}\n")
    if m:
        names = sorted(m)
        cols = ordered({k for n in names if m[n] for k in (m[n].get("tasks") or {})}, TASKS)
        rows = []
        for n in names:
            x = m[n]
            if not x:
                rows.append([f"`{n}`", NA, NA] + [NA] * len(cols) + [NA, NA, NA])
                continue
            t = x.get("tasks") or {}
            p = x.get("prose") or {}
            if "perplexity" in p:
                prose = f"perplexity {fx(p['perplexity'].get('perplexity'), 0)}"
            elif "masked_token" in p:
                mt = p["masked_token"]
                prose = "masked acc " + " / ".join(f"{pct(mt[k].get('acc'))} ({k[4:]})" for k in sorted(mt))
            else:
                prose = NA
            ts = x.get("evaluated_at_unix")
            when = (datetime.datetime.fromtimestamp(ts, datetime.timezone.utc).strftime("%Y-%m-%d")
                    if isinstance(ts, (int, float)) else NA)
            rows.append([f"`{n}`", g(x.get("arch")), g(x.get("examples_per_task"))] +
                        [fx(t[c].get("accuracy"), 2) if c in t else NA for c in cols] +
                        [fx(x.get("accuracy"), 3), prose, when])
        out.append(table(["model", "arch", "per task", *cols, "overall", "prose", "evaluated (UTC)"], rows))
        out.append("`null` models in the JSON (model missing) show as dashes. `UNMASK_QUALITY_MODELS=a,b bench/run "
                   "quality` reruns some models and keeps the others' entries; `UNMASK_QUALITY_PER_TASK=n` sets "
                   "the examples per task.\n")
        srows = []
        for n in names:
            x = m[n] or {}
            sd = x.get("shipped_decoding")
            if not sd:
                continue
            ss = sd.get("settings") or {}
            lo, hi = sd.get("ci95") or [None, None]
            rlo, rhi = sd.get("reference_ci95") or [None, None]
            srows.append([f"`{n}`", f"{g(ss.get('gen_length'))} / {g(ss.get('block_length'))} / {g(ss.get('steps'))}",
                          f"{fx(x.get('accuracy'), 3)} ({fx(rlo, 2)}-{fx(rhi, 2)})",
                          f"{fx(sd.get('accuracy'), 3)} ({fx(lo, 2)}-{fx(hi, 2)})",
                          fx(sd.get("same_answer_as_reference"), 3), fx(x.get("wall_s"), 1), fx(sd.get("wall_s"), 1)])
        if srows:
            out.append("**Shipped decoding**: a dLLM whose `generation_config.json` decodes the test split's canvas "
                       "differently from the reference above, run with those settings (as `unmask generate` and "
                       "`unmask serve` apply them, early stop at end-of-text included) on the same prompts, same run. "
                       "Overall exact match, 95 % Wilson interval in brackets.\n")
            out.append(table(["model", "shipped gen / block / steps", "reference accuracy", "shipped accuracy",
                              "same answer", "reference decode s", "shipped decode s"], srows))
        fams = ["add", "sub", "reverse", "sort", "copy", "kv", "count", "chat"]
        urows = family_rows(m, names, "unseen", "unseen_examples_per_family", fams,
                            lambda u: [fx(u.get("wall_s"), 0), fx(u.get("correct_per_s"), 2)])
        if urows:
            out.append("**Unseen words and paraphrased instructions** (`models/data/unseen.jsonl`, written by "
                       "`python -m models.train.skills`): words, names and made-up words no training task used, "
                       "instructions worded differently from training, 1-4 digit arithmetic; `chat` is the exact "
                       "reply of the intent (greeting, who are you, thanks, out of scope, ...). Exact match, 95 % "
                       f"Wilson interval in brackets. {settings_line(d.get('unseen_settings'))}\n")
            out.append(table(["model", "per family", *fams, "decode s", "right answers / s"], urows))
            out.append("`UNMASK_QUALITY_PER_FAMILY=n` sets the unseen examples per family (decode s: the whole "
                       "unseen set's decoding time in this run; right answers / s: exact matches over all families "
                       "divided by that time, the measure that picks the default dLLM).\n")
        trows = family_rows(m, names, "unseen_second_turn", "unseen_second_turn_examples_per_family", fams,
                            lambda u: [fx(u.get("accuracy"), 3)])
        if trows:
            out.append("**Second turns**: the first messages per family of the unseen set, each asked after one "
                       "earlier exchange (another unseen message and its right answer, mostly of another family: "
                       "`models/train/eval.py --history 1` pairs them the same way), as `unmask chat` renders a "
                       "conversation. A chat must answer its later turns as it answers a first one. Same settings "
                       "as the unseen set.\n")
            out.append(table(["model", "per family", *fams, "overall"], trows))
            out.append("`UNMASK_QUALITY_TURN2_PER_FAMILY=n` sets the examples per family (100 by default, 0 "
                       "skips).\n")
        lfams = ["long_reverse", "long_sort", "long_count", "long_add_steps", "long_copy"]
        lrows = family_rows(m, names, "unseen_long", "unseen_long_examples_per_family", lfams,
                            lambda u: [fx(u.get("wall_s"), 0)])
        if lrows:
            out.append("**Long answers** (`models/data/unseen_long.jsonl`: answers of 60-260 tokens with held-out "
                       "words, instructions and test-split paragraphs; models with a 512-token context; decoding stops "
                       "after a block that ends in end-of-text). Exact "
                       f"match, 95 % Wilson interval in brackets. {settings_line(d.get('unseen_long_settings'))}\n")
            out.append(table(["model", "per family", *lfams, "decode s"], lrows))
            out.append("`UNMASK_QUALITY_LONG_PER_FAMILY=n` sets the long-answer examples per family (all 300 "
                       "by default).\n")
    h = d.get("headline") or {}
    if "default_dllm_by_unseen_correct_per_s" in h:
        pick = h.get("default_dllm_by_unseen_correct_per_s")
        out.append("Default dLLM by right unseen answers per second (both candidates evaluated in the same run): "
                   + (f"`{pick}`." if pick else "- (not both evaluated in one run).") + "\n")
    if h.get("docs_examples_total") is not None:
        out.append(f"Answers that README.md and docs/ promise (a quoted prompt, the word answers, the answer), run through `unmask generate`: "
                   f"{g(h.get('docs_examples_passed'))} of {g(h.get('docs_examples_total'))} hold.\n")
    if d.get("note"):
        out.append("Note (from the JSON): " + d["note"] + ".\n")
    return "\n".join(out)


def median(xs):
    s = sorted(xs)
    n = len(s)
    if not n:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def render_store(d):
    out = []
    w = d.get("writes") or {}
    if w:
        out.append(f"### store: write patterns\n\nSynthetic frames with {g(w.get('changes_per_frame'))} changes each, "
                   f"{g(w.get('steps_per_repetition'))} steps per repetition, {g(w.get('database'))}; median over "
                   "repetitions (min–max):\n")
        rows = []
        for key, label in [("unbatched_s_per_step", "one transaction per step"),
                           ("batched_s_per_step", f"one transaction per {g(w.get('batch_frames'))} steps (the recorder's default)"),
                           ("record_call_s_per_step", "`RunRecorder::record` on the decoding thread (batches go to a background writer)")]:
            xs = w.get(key) or []
            if xs:
                rows.append([label, f"{median(xs) * 1e6:.2f} µs", f"{min(xs) * 1e6:.2f}–{max(xs) * 1e6:.2f} µs", g(len(xs))])
        out.append(table(["write pattern", "per step", "range", "repetitions"], rows))
    dc = d.get("decode") or {}
    if dc:
        out.append(f"### store: real decodes\n\n`{g(dc.get('model'))}`, {g(dc.get('prompts'))} prompts × "
                   f"{g(dc.get('repetitions'))} repetitions, batching {g(dc.get('batching'))}, "
                   f"{g(dc.get('frames_recorded'))} frames recorded. {settings_line(dc.get('settings'))}\n")
        rows = []
        for key, label in [("recorded_over_plain_p10_p50_p90", "recorded ÷ plain decode"),
                           ("plain_again_over_plain_p10_p50_p90", "plain again ÷ plain (A/A control: the noise floor)"),
                           ("ignoring_frames_over_plain_p10_p50_p90", "plain, callback ignoring frames ÷ plain")]:
            xs = dc.get(key)
            if isinstance(xs, list) and len(xs) == 3:
                rows.append([label] + [fx(x, 3) for x in xs])
        if rows:
            out.append(table(["ratio of decode wall times", "p10", "p50", "p90"], rows))
        rows = [[f"`{k}`", fx(dc[k], 3) + " s"] for k in sorted(dc) if k.endswith("_total_s")]
        if rows:
            out.append(table(["total", "seconds"], rows))
    h = d.get("headline") or {}
    if h:
        out.append(f"Time inside `record`: {pct(h.get('record_callback_fraction_of_decode'), 3)} of the decode's wall "
                   f"time; the writer's database time {pct(h.get('writer_db_time_fraction_of_decode'), 3)} (on another "
                   f"thread); compressed traces take {fx(h.get('trace_bytes_per_frame'), 2)} bytes per frame.\n")
    if d.get("note"):
        out.append("Note (from the JSON): " + d["note"] + "\n")
    return "\n".join(out)


def render_serve(d):
    out = []
    mdl = (d.get("setup") or {}).get("model")
    if isinstance(mdl, dict):
        out.append(f"Served model: `{g(mdl.get('name'))}` (its generation_config.json: gen_length "
                   f"{g(mdl.get('gen_length'))}, block {g(mdl.get('block_length'))}, {g(mdl.get('steps'))} steps; "
                   "`UNMASK_SERVE_MODEL=NAME bench/run serve` serves another embedded model).\n")
    elif mdl:
        out.append(f"Served model: {mdl}.\n")
    rows = []
    single = (d.get("one_at_a_time") or {}).get("levels") or []
    configs = [("batched (default)", d.get("levels") or [])]
    if single:
        configs.append(("one at a time (`--batch 1`)", single))
    for name, levels in configs:
        for lv in levels:
            t, lat = lv.get("ttft_ms") or {}, lv.get("latency_ms") or {}
            rows.append([name, g(lv.get("clients")), g(lv.get("completed")), fx(lv.get("requests_per_s"), 2),
                         fx(t.get("p50"), 0), fx(t.get("p99"), 0), fx(lat.get("p50"), 0), fx(lat.get("p99"), 0),
                         g(lv.get("rejected_429")), g(lv.get("errors"))])
    if rows:
        out.append(table(["server", "clients", "completed", "req/s", "TTFT p50 ms", "TTFT p99 ms",
                          "latency p50 ms", "latency p99 ms", "429", "errors"], rows))
    b = d.get("batch") or {}
    if b.get("packed_forwards"):
        out.append(f"Batched server: {g(b.get('sequence_forwards'))} sequence forwards in {g(b.get('packed_forwards'))} "
                   f"packed forwards (mean {fx(b.get('mean_sequences_per_forward'), 2)} over all levels, the "
                   f"1-client level included; largest {g(b.get('largest'))}).\n")
    f = d.get("fault") or {}
    sc = f.get("store_check") or {}
    if f:
        r = f.get("requests") or {}
        out.append(f"Fault run ({fx(f.get('seconds'), 0)} s, 16 clients, {pct(f.get('drop_chance'), 0)} hang up "
                   f"mid-stream, server SIGKILLed: {g(f.get('server_killed'))}): {g(r.get('completed'))} completed, "
                   f"{g(r.get('dropped_by_client'))} hung up, {g(r.get('server_gone'))} lost the server; after the "
                   f"restart {g(f.get('served_after_restart'))} served. Store: {g(sc.get('rows'))} runs "
                   f"{g(sc.get('by_status'))}, {g(sc.get('lost'))} lost, {g(sc.get('duplicated'))} duplicated, "
                   f"integrity {'ok' if sc.get('integrity_ok') else 'FAILED'}.\n")
    if d.get("note"):
        out.append("Note (from the JSON): " + d["note"] + "\n")
    return "\n".join(out)


def render_generic(d):
    """Suites without a dedicated renderer: their top-level scalars."""
    skip = {"suite", "quick", "machine", "elapsed_s", "headline"}
    flat = {k: v for k, v in d.items() if k not in skip and not isinstance(v, (dict, list))}
    out = []
    if flat:
        out.append("### Other figures\n\n" + kv_table(flat))
    nested = sorted(k for k, v in d.items() if k not in skip and isinstance(v, (dict, list)))
    if nested:
        out.append("Further sections in the JSON: " + ", ".join(f"`{k}`" for k in nested) + ".\n")
    return "\n".join(out)


def render_specar(d):
    out = []
    if d.get("method"):
        out.append("Method (from the JSON): " + d["method"] + ".\n")
    for key in ["tiny", "smollm2", "sweep_tiny"]:
        p = d.get(key) or {}
        if p.get("skipped"):
            out.append(f"**{key}**: skipped ({p['skipped']}).\n")
            continue
        ms = p.get("methods") or {}
        if not ms:
            continue
        out.append(f"### specar: {p.get('pair', key)}{' (sweep)' if key.startswith('sweep') else ''}\n")
        out.append(f"Target {g(p.get('target_layers'))} layers; draft: {p.get('draft')}; {g(p.get('prompts'))} prompts, "
                   f"up to {g(p.get('gen_length'))} tokens each, greedy.\n")
        rows = []
        for name, m in ms.items():
            rows.append([f"`{name}`", fx(m.get("tokens_per_s"), 1), fx(m.get("speedup_vs_ar"), 2),
                         f"{g(m.get('identical_outputs'))}/{g(m.get('runs'))}",
                         pct(m.get("acceptance_rate")) if name != "ar" else NA,
                         fx(m.get("tokens_per_target_forward"), 2) if name != "ar" else NA,
                         g(m.get("wasted_drafts")) if name != "ar" else NA,
                         fx(m.get("mean_queue_depth"), 1) if name.startswith("async") else NA])
        out.append(table(["method", "tokens/s", "vs AR", "identical to AR", "acceptance", "tokens/target forward",
                          "wasted drafts", "mean queue depth"], rows))
        vc = (p.get("verify_cost") or {}).get("tokens") or {}
        if vc:
            out.append(f"Target forward of 1 + k tokens after a {g(p['verify_cost'].get('context'))}-token context, "
                       "relative to one token (measured; a perfect draft's ceiling is tokens / ratio): " +
                       ", ".join(f"{k} tokens {fx(v.get('ratio_to_one_token'), 2)}x ({fx(1e3 * v.get('median_s', 0), 1)} ms)"
                                 for k, v in sorted(vc.items(), key=lambda kv: int(kv[0]))) + ".\n")
        per_task = p.get("per_task") or {}
        if per_task:
            names = [n for n in ms if n != "ar"]
            out.append("Acceptance per task family (accepted / judged drafts; tokens/s relative to AR on the same prompts):\n")
            rows = [[t, g(v.get("prompts"))] + [f"{pct((v['methods'].get(n) or {}).get('acceptance_rate'))} "
                                                 f"({fx((v['methods'].get(n) or {}).get('speedup_vs_ar'), 2)}x)" for n in names]
                    for t, v in per_task.items()]
            out.append(table(["task", "prompts"] + [f"`{n}`" for n in names], rows))
        tuning = p.get("tuning") or {}
        if tuning.get("methods"):
            out.append(f"Draft length per schedule chosen on {g(tuning.get('prompts'))} prompts of `{tuning.get('split')}` "
                       f"(not the reported ones): {g(tuning.get('chosen_draft_len'))}; fastest schedule there: "
                       f"{g(tuning.get('fastest_schedule'))}. " + ", ".join(
                           f"`{n}` {fx(m.get('speedup_vs_ar'), 2)}x ({pct(m.get('acceptance_rate'))})"
                           for n, m in tuning["methods"].items() if n != "ar") + ".\n")
        probe = p.get("self_draft_probe") or {}
        if probe:
            out.append("Self-draft depth probe: " + "; ".join(
                f"{k}: sync {fx(v.get('speedup_sync_vs_ar'), 2)}x vs AR, acceptance {pct(v.get('acceptance_rate'))}"
                for k, v in probe.items()) + ".\n")
    sim = d.get("simulated_sm8750") or {}
    if sim:
        out.append(f"### specar: simulated phone ({SIM})\n")
        out.append(f"{sim.get('device')}; target {sim.get('target')}, draft {sim.get('draft')}; prompt "
                   f"{g(sim.get('prompt'))}, answer {g(sim.get('answer'))} tokens. Acceptance: "
                   f"{sim.get('alpha_source')}. {sim.get('note')}.\n")
        rows = []
        for run in [sim.get("at_measured_alpha") or {}] + (sim.get("alpha_sweep") or []):
            for name, x in sorted((run.get("schedules") or {}).items()):
                rows.append([fx(run.get("alpha"), 3), f"`{name}`", fx(x.get("tokens_per_s"), 2),
                             fx(x.get("j_per_token"), 3), fx(x.get("npu_busy_s"), 2), fx(x.get("pim_busy_s"), 2),
                             g(x.get("verifications")), g(x.get("wasted_drafts"))])
        out.append(table(["alpha", "schedule", "tokens/s (sim)", "J/token (sim)", "NPU busy s", "PIM busy s",
                          "verifications", "wasted drafts"], rows))
        knobs = sim.get("knob_sweep_at_measured_alpha") or []
        if knobs:
            base = next((x for x in knobs if x.get("name") == "sync-pim-draft-8"), {})
            out.append(f"### specar: each schedule's knob at the measured outcomes ({SIM})\n")
            out.append("The synchronous draft length, and the fewest drafts the asynchronous verifier waits for "
                       "(`min_batch`), with and without the drafting control; ratios against `sync-pim-draft-8` "
                       "(SpecPIM's fixed length, the headline's baseline).\n")
            rows = []
            for x in knobs:
                tps, j = x.get("tokens_per_s"), x.get("j_per_token")
                rows.append([f"`{x.get('name')}`", fx(tps, 2), fx(j, 3),
                             fx(tps / base["tokens_per_s"], 2) if base and tps else "",
                             fx(base["j_per_token"] / j, 2) if base and j else "",
                             g(x.get("verifications")), g(x.get("drafted")), g(x.get("wasted_drafts"))])
            out.append(table(["schedule", "tokens/s (sim)", "J/token (sim)", "throughput vs sync-8",
                              "energy eff. vs sync-8", "verifications", "drafted", "wasted drafts"], rows))
        front = sim.get("knob_frontier_iid") or []
        if front:
            out.append(f"Each family at its best setting per i.i.d. acceptance ({SIM}): the fastest setting and the one "
                       "with the least energy per token.\n")
            rows = [[fx(x.get("alpha"), 2), f"`{x.get('family')}`",
                     f"{fx(x['fastest'].get('tokens_per_s'), 2)} (`{x['fastest'].get('name')}`)",
                     f"{fx(x['leanest'].get('j_per_token'), 3)} (`{x['leanest'].get('name')}`)"] for x in front]
            out.append(table(["alpha", "family", "best tokens/s (setting)", "least J/token (setting)"], rows))
    return "\n".join(out)


def render_moe(d):
    out = []
    s = d.get("simulated") or {}
    if s:
        hc = s.get("headline_config") or {}
        out.append(f"### moe: simulated prefill ({SIM})\n")
        out.append("Time to first token of one prompt through every layer, from the virtual NPU's cost model "
                   "(`engine/src/backend/vnpu/moe_prefill/`); routing from a seeded synthetic router (estimates), "
                   f"the static plan calibrated on seed {g((s.get('setup') or {}).get('calibration_seed'))} and judged on seed "
                   f"{g((s.get('setup') or {}).get('evaluation_seed'))}. Headline configuration: {hc.get('model')} on "
                   f"`{hc.get('device')}`, {g(hc.get('prompt_tokens'))} tokens. What each policy means: docs/moe.md.\n")
        goals = s.get("goals") or {}
        parts = []
        for k in ["speedup_vs_naive_npu", "cpu_busy_ratio_vs_cpu"]:
            x = goals.get(k) or {}
            if x:
                bound = (f"; the naive prefill spends {pct(x.get('naive_moe_share'))} in its MoE part, so even a free "
                         f"MoE part would give at most {fx(x.get('bound_if_moe_free'), 2)}x") if "bound_if_moe_free" in x else ""
                parts.append(f"`{k}` goal {fx(x.get('goal'), 2)}x, got {fx(x.get('got'), 2)}x "
                             f"({'met' if x.get('met') else 'not met'}{bound})")
        if parts:
            out.append("Goals: " + "; ".join(parts) + ".\n")
        rows = []
        for r in s.get("results") or []:
            p = r.get("policies") or {}
            c, n, o = p.get("cpu-only") or {}, p.get("naive-npu") or {}, p.get("static-tiers-grouped") or {}
            rows.append([r.get("model", ""), f"`{r.get('device')}`", g(r.get("prompt_tokens")),
                         fx(c.get("prefill_s"), 3), fx(n.get("prefill_s"), 3), fx(o.get("prefill_s"), 3),
                         fx(r.get("speedup_vs_naive_npu"), 2), fx(r.get("speedup_vs_cpu"), 2),
                         fx(n.get("energy_j"), 2), fx(o.get("energy_j"), 2), fx(r.get("cpu_busy_ratio_vs_cpu"), 1),
                         f"{g(n.get('expert_launches'))} / {g(o.get('expert_launches'))}",
                         g(o.get("cpu_groups")), pct(r.get("drop_rate"), 2), fx(r.get("speedup_bound_if_moe_free"), 2)])
        out.append(table(["model", "device", "prompt", "CPU-only s", "naive NPU s", "ours s", "vs naive", "vs CPU",
                          "naive J", "ours J", "CPU busy ratio", "expert launches naive / ours", "groups on CPU",
                          "dropped", "bound if MoE free"], rows))
        rg = s.get("ranges") or {}
        if rg:
            out.append("Over all configurations: " + "; ".join(
                f"`{k}` {fx(v.get('min'), 3)}–{fx(v.get('max'), 3)}" for k, v in sorted(rg.items()) if isinstance(v, dict))
                + f"; drop rate over all pairs {pct(rg.get('drop_rate_all_configs'), 2)}.\n")
        sw = s.get("group_size_sweep") or {}
        if sw.get("results"):
            out.append(f"Group size ({sw.get('model')} on `{sw.get('device')}`, {g(sw.get('prompt_tokens'))} tokens, "
                       f"{SIM}):\n")
            out.append(table(["experts per group", "groups per layer", "ours s", "vs naive", "expert launches",
                              "groups on CPU", "padded rows", "dropped"],
                             [[g(x.get("group_size")), g(x.get("groups_per_layer")), fx(x.get("ours_prefill_s"), 3),
                               fx(x.get("speedup_vs_naive_npu"), 2), g(x.get("expert_launches")), g(x.get("cpu_groups")),
                               g(x.get("padded_rows")), pct(x.get("drop_rate"), 2)] for x in sw["results"]]))
        st = s.get("setup") or {}
        notes = [st.get(k) for k in ["router_note", "cpu_lane", "sync_note", "budget_note"] if st.get(k)]
        if notes:
            out.append("Setup (from the JSON): " + "; ".join(notes) + ".\n")
    m = d.get("measured")
    if isinstance(m, dict) and m:
        cal = m.get("calibration") or {}
        out.append(f"### moe: measured (this machine, `{m.get('model')}`)\n")
        out.append(f"Real wall time and real math. Static plan calibrated on {g(cal.get('prompts'))} prompts of "
                   f"`{cal.get('split')}`; {g((m.get('plan') or {}).get('distinct_expert_shapes'))} distinct expert "
                   "shapes. Prefill = one forward over the prompt, median of interleaved repetitions; per-expert = one "
                   "launch per active expert, grouped = one launch per group of experts (capacity dropping on), "
                   "dynamic = every expert on its exact rows in one parallel pass.\n")
        out.append(table(["tokens", "per-expert ms", "grouped ms", "dynamic ms", "grouped vs per-expert",
                          "launches per-expert / grouped", "grouped dropped pairs"],
                         [[g(r.get("tokens")), fx(1e3 * (r.get("per_expert_s") or 0), 2), fx(1e3 * (r.get("grouped_s") or 0), 2),
                           fx(1e3 * (r.get("cpu_dynamic_s") or 0), 2), fx(r.get("grouped_speedup_vs_per_expert"), 2),
                           f"{g(r.get('launches_per_expert'))} / {g(r.get('launches_grouped'))}",
                           f"{g(r.get('grouped_dropped_pairs'))} of {g(r.get('grouped_routed_pairs'))}"]
                          for r in m.get("prefill") or []]))
        acc = m.get("accuracy") or {}
        ex = acc.get("exact_routing") or {}
        vs = acc.get("variants") or {}
        tasks = sorted((ex.get("tasks") or {}).keys())
        def cell(t):
            return f"{fx(t.get('accuracy'), 3)} [{fx((t.get('ci95') or [None, None])[0], 2)}, {fx((t.get('ci95') or [None, None])[1], 2)}]" if t else ""
        rows = [["exact routing (no drops)", fx(ex.get("accuracy"), 3), "", ""] + [cell((ex.get("tasks") or {}).get(k)) for k in tasks]]
        for name, v in sorted(vs.items()):
            ci = v.get("drop_points_ci95") or [None, None]
            rows.append([name.replace("_", " "), fx(v.get("accuracy"), 3), pct(v.get("drop_rate"), 2),
                         f"{fx(v.get('drop_points_vs_exact'), 2)} [{fx(ci[0], 2)}, {fx(ci[1], 2)}]"]
                        + [cell((v.get("tasks") or {}).get(k)) for k in tasks])
        out.append(f"Exact match on `{acc.get('set')}` ({g(acc.get('per_task'))} prompts per task; Wilson 95 % intervals; "
                   "accuracy drop in points vs exact routing, paired 95 % interval):\n")
        out.append(table(["execution", "accuracy", "pairs dropped", "drop (points)"] + tasks, rows))
        res = m.get("residency") or {}
        if res:
            first = next(iter(res.values()))
            out.append(f"Load-aware residency in real decoding runs on `vnpu:{first.get('profile')}` ({g(first.get('prompts'))} "
                       "held-out prompts, static tiers, every group launched vs cold groups on a CPU-lane thread; "
                       f"device time and energy {SIM}):\n")
            rows = []
            for name, r in sorted(res.items()):
                off, on = r.get("all_groups_launched") or {}, r.get("cold_groups_on_cpu_lane") or {}
                rows.append([name.replace("_", " "), pct(r.get("groups_moved_share"), 1),
                             f"{g(off.get('launches'))} / {g(on.get('launches'))}",
                             f"{fx(1e3 * (off.get('simulated_s') or 0), 1)} / {fx(1e3 * (on.get('simulated_s') or 0), 1)}",
                             fx(r.get("sim_speedup"), 3), fx(r.get("sim_energy_ratio"), 3),
                             "yes" if r.get("identical_answers") else "NO"])
            out.append(table(["plan", "groups on the CPU lane", "launches off / on", "simulated ms off / on",
                              "simulated speedup", "simulated energy ratio", "identical answers"], rows))
            out.append("Measured wall time of the same runs on this machine (real math; both lanes share its 2 cores): " + "; ".join(
                f"{name.replace('_', ' ')}: {fx((r.get('all_groups_launched') or {}).get('measured_wall_s'), 2)} s off vs "
                f"{fx((r.get('cold_groups_on_cpu_lane') or {}).get('measured_wall_s'), 2)} s on"
                for name, r in sorted(res.items())) + ".\n")
        pm = m.get("prose_masked_token") or {}
        if pm:
            ex_p, st_p = pm.get("exact_routing") or {}, pm.get("static_tiers") or {}
            out.append("Masked-token accuracy on held-out prose: " + "; ".join(
                f"{k}: {fx((ex_p.get(k) or {}).get('acc'), 3)} exact vs {fx((st_p.get(k) or {}).get('acc'), 3)} with tiers"
                for k in sorted(ex_p)) + f" (tiers dropped {pct(pm.get('drop_rate'), 2)} of pairs).\n")
    return "\n".join(out)


RENDER = {"forward": render_forward, "kernels": render_kernels, "decoding": render_decoding,
          "ablation": render_ablation, "quality": render_quality, "store": render_store,
          "serve": render_serve, "specar": render_specar, "moe": render_moe}


# ----------------------------------------------------------------------------- document

def load(results_dir):
    out = {}
    for f in sorted(os.listdir(results_dir)):
        if not f.endswith(".json"):
            continue
        with open(os.path.join(results_dir, f), encoding="utf-8") as fh:
            d = json.load(fh)
        out[d.get("suite") or f[:-5]] = d
    return out


def generate(results_dir):
    res = load(results_dir)
    names = [n for n in ORDER if n in res] + sorted(n for n in res if n not in ORDER)
    parts = ["# Benchmarks\n",
             "<!-- Generated by scripts/gen-benchmarks.py from bench/results/*.json. Do not edit by hand: "
             "rerun the script (scripts/test-all.sh fails when this file is stale). -->\n",
             "Every number on this page is read from `bench/results/SUITE.json`, written by `bench/run SUITE "
             "[--quick]` (suites: `bench/run --list`; `unmask bench SUITE` runs the same harness). After a run, "
             "`python3 scripts/gen-benchmarks.py` regenerates this page. Each section names the machine it ran on "
             "(CPU, threads, load average); the build machine is shared, so absolute times swing with its load: "
             "compare ratios measured in the same run. "
             f"Figures from the virtual NPU's cost model are marked {SIM}; no number here was measured on a phone.\n",
             "Suites: " + ", ".join(f"[{n}](#{n})" for n in names) + ".\n"]
    for n in names:
        d = res[n]
        body = [header(n, d)]
        if n == "npu":
            body.append(render_npu(d, res))
        elif n in RENDER:
            body.append(RENDER[n](d))
        else:
            body.append(render_generic(d))
        body.append(headline(n, d))
        parts.append("\n".join(b for b in body if b))
    text = "\n".join(parts)
    while "\n\n\n" in text:
        text = text.replace("\n\n\n", "\n\n")
    return text.rstrip("\n") + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the output file differs from what would be generated")
    ap.add_argument("--results", default=DEFAULT_RESULTS, help="folder of SUITE.json files (default bench/results)")
    ap.add_argument("--out", default=DEFAULT_OUT, help="markdown file (default docs/benchmarks.md)")
    a = ap.parse_args()
    text = generate(a.results)
    rel = os.path.relpath(a.out, ROOT)
    if a.check:
        try:
            with open(a.out, encoding="utf-8") as f:
                cur = f.read()
        except FileNotFoundError:
            cur = ""
        if cur != text:
            diff = list(difflib.unified_diff(cur.splitlines(), text.splitlines(), rel, "generated", lineterm="", n=1))
            print("\n".join(diff[:40]), file=sys.stderr)
            print(f"{rel} is stale: it is not what scripts/gen-benchmarks.py makes of bench/results/*.json. "
                  "Run `python3 scripts/gen-benchmarks.py` and commit the result.", file=sys.stderr)
            return 1
        print(f"{rel} is up to date with bench/results")
        return 0
    with open(a.out, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)
    print(f"wrote {rel}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
