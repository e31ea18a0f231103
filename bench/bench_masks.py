"""Masking the scores of a constrained row: an index list or a bitmask, at real vocabulary sizes.

For every vocabulary in ../shared/tokenizers and a range of allowed-token counts, times
per constrained row (scores of one row set to -inf except at the allowed ids):

* ``index list`` -- what ``refactx_index.constraint.masking`` does on CPU, per row here (the engines do
  it for all rows of a step at once, ``bench/bench_engines.py``): gather the allowed
  scores, ``fill(-inf)`` through a numpy view, scatter them back (calling thread only);
* ``bitmask`` -- the xgrammar-style alternative: a packed bit per vocabulary entry,
  built from the allowed ids, unpacked and applied with ``np.putmask``;
* ``torch fill_`` -- the previous implementation (gather, ``scores[r].fill_``, scatter)
  with torch's default intra-op threads, and with one thread.

With ``--models`` (named models of ``refactx_index.qa.models``, e.g. ``smollm2,gemma3-270m``:
SmolLM2's 49,152 ids against Gemma 3's 262,144) it times instead, per model and in one run,
the fact constraint's whole step as the engines take it: the batch matcher's step, the
step's allowed ids (``BatchMatcher.mask``) and the mask on a ``rows x logits`` float32 score
matrix (``MaskApplier``), for 1, 4, 16 and 64 rows inside facts (warm, best of ``--walks``
walks), over an index of the first ``--facts`` MetaQA triples (``../shared/data/metaqa/kb.txt``,
rendered ``<s> <relation> <o> .``) built with the model's own vocabulary; and the ratio of each
model's time per step to the first model's.

Run: .venv/bin/python bench/bench_masks.py [--rows 4] [--repeat 200]
     .venv/bin/python bench/bench_masks.py --models smollm2,gemma3-270m [--facts 20000] [--walks 5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "tokenizers"
METAQA_KB = SHARED.parent / "data" / "metaqa" / "kb.txt"
ROWS = (1, 4, 16, 64)


def vocab_sizes() -> dict[str, int]:
    from tokenizers import Tokenizer

    sizes = {}
    for path in sorted(SHARED.glob("*/tokenizer.json")):
        sizes[path.parent.name] = Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True)
    return sizes or {"qwen2.5 (size only)": 151_665}


def index_list(view: np.ndarray, rows: list[int], allowed: np.ndarray) -> None:
    for r in rows:
        row = view[r]
        kept = row[allowed]
        row.fill(-np.inf)
        row[allowed] = kept


def bitmask(view: np.ndarray, rows: list[int], allowed: np.ndarray) -> None:
    vocab = view.shape[1]
    for r in rows:
        bits = np.zeros((vocab + 7) // 8, dtype=np.uint8)  # built per row, as a matcher would
        np.bitwise_or.at(bits, allowed >> 3, (1 << (7 - (allowed & 7))).astype(np.uint8))
        keep = np.unpackbits(bits, count=vocab).view(bool)
        np.putmask(view[r], ~keep, -np.inf)


def torch_fill(scores: torch.Tensor, rows: list[int], allowed: np.ndarray) -> None:
    cols = torch.from_numpy(allowed)
    for r in rows:
        kept = scores[r, cols]
        scores[r].fill_(float("-inf"))
        scores[r, cols] = kept


def time_per_row(fn, repeat: int, rows: int) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(repeat):
            fn()
        best = min(best, (time.perf_counter() - started) / (repeat * rows))
    return best * 1e6


def measured() -> dict:
    """Date, commit, machine and command of this run (a figure's ``measured`` key)."""
    import os
    import platform
    import subprocess
    import sys

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parents[1]).stdout.strip() or "unknown"
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
            "machine": f"{platform.node()}: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, "
                       f"torch threads {torch.get_num_threads()}",
            "command": " ".join(["bench/bench_masks.py", *sys.argv[1:]])}


def metaqa_facts(limit: int) -> list[str]:
    facts = []
    with METAQA_KB.open(encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split("|")
            if len(parts) == 3 and all(parts):
                facts.append(f"<{parts[0]}> <{parts[1].replace('_', ' ')}> <{parts[2]}> .")
                if len(facts) >= limit:
                    break
    return facts


def bench_models(names: list[str], n_facts: int, repeat: int) -> list[dict]:
    """The constraint's step per model vocabulary (module doc, ``--models``)."""
    import random

    from refactx_index.constraint.batch import BatchMatcher
    from refactx_index.constraint.masking import MaskApplier
    from refactx_index.constraint.matcher import FactMatcher
    from refactx_index.qa.models import model_vocabulary
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.vocab import encode_facts

    texts = metaqa_facts(n_facts)
    results = []
    for name in names:
        vocab = model_vocabulary(name)
        tok = vocab.tokenizer()
        started = time.perf_counter()
        index = MemoryTreeIndex.from_facts(texts, vocab)
        built_s = time.perf_counter() - started
        encoded = encode_facts(tok, texts, ())
        facts = [tuple(encoded.ids(i)) for i in range(len(texts))]
        trigger = [tok.encode(t, add_special_tokens=False).ids for t in ("Fact:", " Fact:")]
        prompt = tok.encode("Question? Fact:", add_special_tokens=False).ids
        width = vocab.logits_size
        applier = MaskApplier()
        for rows in ROWS:
            slots = np.arange(rows)
            bm = BatchMatcher(FactMatcher(index, trigger, list(vocab.eos_ids)))
            logits = torch.randn(rows, width)
            best = None
            for phase in range(repeat + 1):  # phase 0 warms the index's cache
                rng = random.Random(rows * 100 + phase)
                walks = [facts[rng.randrange(len(facts))] for _ in range(rows)]
                steps = min(len(w) for w in walks) - 1
                cols = [np.asarray([w[s] for w in walks], dtype=np.int64) for s in range(steps)]
                bm.add(slots, [prompt] * rows)
                step_s = ids_s = mask_s = 0.0
                for col in cols:
                    t0 = time.perf_counter()
                    bm.step(slots, col)
                    t1 = time.perf_counter()
                    mask = bm.mask(slots, width)
                    t2 = time.perf_counter()
                    applier(logits, mask)
                    t3 = time.perf_counter()
                    step_s, ids_s, mask_s = step_s + t1 - t0, ids_s + t2 - t1, mask_s + t3 - t2
                figure = {"step_us": step_s / steps * 1e6, "allowed_ids_us": ids_s / steps * 1e6,
                          "mask_us": mask_s / steps * 1e6}
                figure["total_us"] = figure["step_us"] + figure["allowed_ids_us"] + figure["mask_us"]
                if phase and (best is None or figure["total_us"] < best["total_us"]):
                    best = figure
            results.append({"model": name, "vocab_size": vocab.vocab_size, "logits": width, "facts": len(texts),
                            "tokens_per_fact": float(np.mean([len(f) for f in facts])), "index_s": built_s,
                            "rows": rows, **best})
    base = {r["rows"]: r["total_us"] for r in results if r["model"] == names[0]}
    print(f"the fact constraint per step, warm, best of {repeat} walks, {len(texts):,} MetaQA facts; "
          f"torch threads {torch.get_num_threads()}")
    print(f"{'model':<14}{'logits':>9}{'tok/fact':>9}{'rows':>6}{'step µs':>10}{'ids µs':>9}{'mask µs':>10}"
          f"{'total µs':>10}{'µs/row':>8}{'x ' + names[0]:>16}")
    for r in results:
        r["ratio_to_first"] = r["total_us"] / base[r["rows"]]
        print(f"{r['model']:<14}{r['logits']:>9}{r['tokens_per_fact']:>9.1f}{r['rows']:>6}{r['step_us']:>10.1f}"
              f"{r['allowed_ids_us']:>9.1f}{r['mask_us']:>10.1f}{r['total_us']:>10.1f}"
              f"{r['total_us'] / r['rows']:>8.1f}{r['ratio_to_first']:>16.2f}")
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4, help="constrained rows per step (default 4)")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", help="write the results here too")
    parser.add_argument("--models", help="comma-separated named models (e.g. smollm2,gemma3-270m): the "
                        "constraint's step at each one's vocabulary instead (module doc)")
    parser.add_argument("--facts", type=int, default=20_000, help="--models: MetaQA triples indexed (default 20000)")
    parser.add_argument("--walks", type=int, default=5, help="--models: walks per batch size, the best kept (default 5)")
    args = parser.parse_args()
    if args.models:
        results = bench_models(args.models.split(","), args.facts, args.walks)
        if args.json:
            Path(args.json).write_text(json.dumps({"measured": measured(), "results": results}, indent=1) + "\n")
        return
    rng = np.random.default_rng(0)
    default_threads = torch.get_num_threads()
    results = []
    print(f"microseconds per constrained row ({args.rows} rows per step; best of 3); "
          f"torch threads: {default_threads} by default")
    print(f"{'vocabulary':<18}{'size':>8}{'allowed':>9}{'index list':>12}{'bitmask':>10}"
          f"{'torch fill_':>13}{'1 thread':>10}")
    for name, size in vocab_sizes().items():
        for n_allowed in (1, 16, 1024, 12_000):
            allowed = np.sort(rng.choice(size, size=min(n_allowed, size), replace=False)).astype(np.int64)
            scores = torch.randn(args.rows, size)
            view = scores.numpy()
            rows = list(range(args.rows))
            fig = {
                "vocabulary": name, "size": size, "allowed": int(allowed.size),
                "index_list_us": time_per_row(lambda: index_list(view, rows, allowed), args.repeat, args.rows),
                "bitmask_us": time_per_row(lambda: bitmask(view, rows, allowed), args.repeat, args.rows),
            }
            torch.set_num_threads(default_threads)
            fig["torch_fill_us"] = time_per_row(lambda: torch_fill(scores, rows, allowed), args.repeat, args.rows)
            torch.set_num_threads(1)
            fig["torch_fill_1thread_us"] = time_per_row(lambda: torch_fill(scores, rows, allowed),
                                                        args.repeat, args.rows)
            torch.set_num_threads(default_threads)
            results.append(fig)
            print(f"{name:<18}{size:>8}{allowed.size:>9}{fig['index_list_us']:>12.1f}{fig['bitmask_us']:>10.1f}"
                  f"{fig['torch_fill_us']:>13.1f}{fig['torch_fill_1thread_us']:>10.1f}")
    ratio = np.median([r["bitmask_us"] / r["index_list_us"] for r in results])
    print(f"median bitmask / index list: {ratio:.2f}x")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
