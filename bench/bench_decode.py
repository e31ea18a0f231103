"""Decoding the rows a walk enters: the runtime's ``decode_fragment`` on a build's own rows,
and its leaf-count pass (``format._plain_subtree_sums`` up to ``format._SMALL_FRAGMENT_NODES``
nodes, pointer doubling above: ``format._subtree_sums``) against the previous one (the plain
pass up to 512 nodes, ``np.add.at`` per BFS level above; kept here as the baseline), in one
run on the same rows.

Rows: a prefix rows stage's output (``<build>/prefix_rows/<vocab>/rows`` and its
``dictionary.bin``), by default the one ``bench/bench_e2e.py`` leaves in its work folder
(the realistic preset). ``--rows`` rows are drawn with probability proportional to their
facts (a leaf-weighted walk enters a row about that often) and each is timed ``--repeat``
times per method; the best of the repeats counts. Figures: per-row decode p50 / p90 / p99,
the leaf-count pass alone by each method, and the decode as it was with the baseline pass
(decode - pass now + pass before, per row).

Run: .venv/bin/python bench/bench_decode.py [--stage build/bench_e2e/build-local2/wikidata/bench2/prefix_rows/qwen2.5]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from refactx_index import format as fmt

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STAGE = ROOT / "build" / "bench_e2e" / "build-local2" / "wikidata" / "bench2" / "prefix_rows" / "qwen2.5"


PLAIN_BEFORE = 512  # the previous decode's plain pass went up to this many nodes


def level_by_level(own: np.ndarray, child_start: np.ndarray, child_count: np.ndarray) -> np.ndarray:
    """The baseline above PLAIN_BEFORE nodes: every node's leaves added into its parent's, a
    BFS level at a time, deepest first."""
    n = child_count.size
    leaves = own.copy()
    parent = np.repeat(np.arange(n), child_count)
    bounds = [(0, 1)]
    while True:
        s, e = bounds[-1]
        ns = int(child_start[s]) if s < n else n
        ne = int(child_start[e - 1] + child_count[e - 1])
        if ne <= ns:
            break
        bounds.append((ns, ne))
    for s, e in reversed(bounds[1:]):
        np.add.at(leaves, parent[s - 1 : e - 1], leaves[s:e])
    return leaves


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - started)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", default=str(DEFAULT_STAGE),
                        help="a prefix rows stage's output folder for one vocabulary (rows/ and dictionary.bin)")
    parser.add_argument("--rows", type=int, default=600, help="leaf-weighted rows to time")
    parser.add_argument("--repeat", type=int, default=5, help="timings per row and method (the best counts)")
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

    decode, now, before_pass, nodes = [], [], [], []
    for i in picked:
        frag = fmt.decode_fragment(rows[i], None, dictionary)
        own = frag.ends.astype(np.int64)
        own[frag.external] = frag.leaves[frag.external]
        n, cs, cc = frag.n_nodes, frag.child_start, frag.child_count
        parent = np.repeat(np.arange(n), cc)  # both decodes have it for their checks
        plain = lambda: fmt._plain_subtree_sums(own, parent)  # noqa: E731
        pass_now = plain if n <= fmt._SMALL_FRAGMENT_NODES else (lambda: fmt._subtree_sums(own, cs, n))
        pass_before = plain if n <= PLAIN_BEFORE else (lambda: level_by_level(own, cs, cc))
        assert np.array_equal(pass_now(), frag.leaves) and np.array_equal(pass_before(), frag.leaves)
        decode.append(best_of(lambda: fmt.decode_fragment(rows[i], None, dictionary), args.repeat))
        now.append(best_of(pass_now, args.repeat))
        before_pass.append(best_of(pass_before, args.repeat))
        nodes.append(n)
    decode, now, before_pass, nodes = np.array(decode), np.array(now), np.array(before_pass), np.array(nodes)
    before = decode - now + before_pass
    changed = nodes > fmt._SMALL_FRAGMENT_NODES  # the rows whose pass changed

    def pct(a: np.ndarray) -> dict[str, float]:
        return {f"p{q}_us": float(np.percentile(a, q)) for q in (50, 90, 99)} | {"mean_us": float(a.mean())}

    results = {"stage": str(stage), "rows_total": len(rows), "rows_timed": args.rows, "repeat": args.repeat,
               "rows_with_a_new_pass": int(changed.sum()),
               "decode_before": pct(before), "decode": pct(decode),
               "leaf_pass_before": pct(before_pass[changed]), "leaf_pass": pct(now[changed])}

    def before_p(key: str) -> float:
        return results["decode_before"][key] / results["decode"][key]

    print(f"{'per row':<34}{'p50':>9}{'p90':>9}{'p99':>9}{'mean':>9}")
    for key, label in (("decode_before", "decode, previous leaf pass"), ("decode", "decode, now"),
                       ("leaf_pass_before", "leaf pass alone, previous *"), ("leaf_pass", "leaf pass alone, now *")):
        r = results[key]
        print(f"{label:<34}" + "".join(f"{r[k]:>7.1f}us" for k in ("p50_us", "p90_us", "p99_us", "mean_us")))
    print(f"* over the {results['rows_with_a_new_pass']} of {args.rows} rows of more than "
          f"{fmt._SMALL_FRAGMENT_NODES} nodes (the others take the same plain pass in both)")
    print(f"decode, previous / now: p90 {before_p('p90_us'):.2f}x, p99 {before_p('p99_us'):.2f}x, "
          f"mean {before_p('mean_us'):.2f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
