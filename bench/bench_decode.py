"""Decoding the rows a walk enters: the runtime's ``decode_fragment`` on a build's own rows,
with each row decoder this runtime has (``format.DECODER``: the compiled ``_fragment`` and
numpy, the baseline), in one run on the same rows; every row must decode to the same arrays
with both.

Rows: a prefix rows stage's output (``<build>/prefix_rows/<vocab>/rows`` and its
``dictionary.bin``), by default the one ``bench/bench_e2e.py`` leaves in its work folder
(the realistic preset). ``--rows`` rows are drawn with probability proportional to their
facts (a leaf-weighted walk enters a row about that often) and each is timed ``--repeat``
times per decoder; the best of the repeats counts. Figures: per-row decode p50 / p90 / p99 /
mean per decoder, and the same for the rows' inflation alone (zstd against the build's
dictionary, the part both decoders share).

Run: .venv/bin/python bench/bench_decode.py [--stage build/bench_e2e/build-local2/wikidata/bench2/prefix_rows/qwen2.5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from refactx_index.tree import format as fmt
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STAGE = ROOT / "build" / "bench_e2e" / "build-local2" / "wikidata" / "bench2" / "prefix_rows" / "qwen2.5"
FIELDS = ("tokens", "child_start", "child_count", "ends", "external", "leaves")


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best * 1e6


def decode_with(decoder: str, row: bytes, dictionary):
    fmt.DECODER = decoder
    return fmt.decode_fragment(row, None, dictionary)


def inflate(row: bytes, dictionary) -> None:
    """The body's inflation alone (what decode_fragment does before either decoder runs)."""
    if row[1] & 4:
        dictionary.decompressor().decompress(row[14:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", default=str(DEFAULT_STAGE),
                        help="a prefix rows stage's output folder for one vocabulary (rows/ and dictionary.bin)")
    parser.add_argument("--rows", type=int, default=600, help="leaf-weighted rows to time")
    parser.add_argument("--repeat", type=int, default=5, help="timings per row and decoder (the best counts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    stage = Path(args.stage)
    if not (stage / "rows").is_dir():
        parser.error(f"{stage / 'rows'} is not a folder: run bench/bench_e2e.py first, or give --stage")
    dictionary_file = stage / "dictionary.bin"
    dictionary = fmt.PresetDictionary(dictionary_file.read_bytes()) if dictionary_file.exists() else None
    rows = [bytes(b) for b in pq.read_table(stage / "rows", columns=["node"]).column("node").to_pylist()]
    facts = np.array([int(fmt.decode_fragment(r, None, dictionary).leaves[0]) for r in rows], dtype=np.float64)
    picked = np.random.default_rng(args.seed).choice(len(rows), args.rows, p=facts / facts.sum())
    print(f"{len(rows):,} rows in {stage}; timing {args.rows} leaf-weighted rows, best of {args.repeat}", flush=True)
    default = fmt.DECODER

    decoders = sorted(fmt.DECODERS)
    times: dict[str, list[float]] = {d: [] for d in decoders}
    inflation, nodes = [], []
    try:
        for i in picked:
            frags = {d: decode_with(d, rows[i], dictionary) for d in decoders}
            first = frags[decoders[0]]
            assert all(np.array_equal(getattr(f, k), getattr(first, k)) for f in frags.values() for k in FIELDS)
            for d in decoders:
                times[d].append(best_of(lambda: decode_with(d, rows[i], dictionary), args.repeat))
            inflation.append(best_of(lambda: inflate(rows[i], dictionary), args.repeat))
            nodes.append(first.n_nodes)
    finally:
        fmt.DECODER = default

    def pct(a) -> dict[str, float]:
        a = np.asarray(a)
        return {f"p{q}_us": float(np.percentile(a, q)) for q in (50, 90, 99)} | {"mean_us": float(a.mean())}

    results = {"stage": str(stage), "rows_total": len(rows), "rows_timed": args.rows, "repeat": args.repeat,
               "nodes": pct(nodes) | {"max": int(max(nodes))}, "default_decoder": default,
               "decode": {d: pct(times[d]) for d in decoders}, "inflation_alone": pct(inflation)}
    print(f"{'per row':<30}{'p50':>9}{'p90':>9}{'p99':>9}{'mean':>9}")
    for label, r in [(f"decode, {d}", results["decode"][d]) for d in decoders] + [
            ("inflation alone (both)", results["inflation_alone"])]:
        print(f"{label:<30}" + "".join(f"{r[k]:>7.1f}us" for k in ("p50_us", "p90_us", "p99_us", "mean_us")))
    if {"numpy", "compiled"} <= set(decoders):
        ratio = {k: results["decode"]["numpy"][k] / results["decode"]["compiled"][k]
                 for k in ("p50_us", "p90_us", "p99_us", "mean_us")}
        results["numpy_over_compiled"] = ratio
        print("numpy / compiled: " + ", ".join(f"{k[:-3]} {v:.2f}x" for k, v in ratio.items()))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
