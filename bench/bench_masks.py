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

Run: .venv/bin/python bench/bench_masks.py [--rows 4] [--repeat 200]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "tokenizers"


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=4, help="constrained rows per step (default 4)")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
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
