"""Row bodies and decode cost per row with and without the build's preset dictionary.

Builds the rows of ``--facts`` Wikidata-like facts (``bench_walk.realistic_facts``, Qwen2.5
tokens) with the cut rule at each ``--configs`` T:B, in Python (``memory.build_rows``: the rows
the Spark job writes), then compresses them against their dictionary as the job does
(``memory.compress_rows``: format version 4, zstd) and prints, for both, row body bytes per fact and
the time of ``format.decode_fragment`` per row over every row (best of ``--passes`` interleaved
passes: a busy neighbour slows both alike). No database: ``bench_storage.py`` measures the
loaded sizes.

Run: .venv/bin/python bench/bench_dictionary.py [--facts 50000] [--configs 16:32768,1024:32768] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_walk import realistic_facts  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=50_000)
    parser.add_argument("--configs", default="16:32768,1024:32768", help="T:B pairs of the cut rule")
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--json")
    args = parser.parse_args()

    from refactx_index.tree import format as fmt
    from refactx_index.tree.memory import build_rows, compress_rows
    from refactx_index.vocab import encode_facts, open_tokenizer

    texts = realistic_facts(args.facts)
    tok = open_tokenizer(str(ROOT.parent / "shared" / "tokenizers" / "qwen2.5"))
    encoded = encode_facts(tok, texts, ())
    seqs = {tuple(encoded.ids(i)) for i in range(len(texts))}
    n = len(seqs)
    figures: dict = {"facts": n, "configs": {}}
    for config in args.configs.split(","):
        threshold, max_tokens = map(int, config.split(":"))
        plain = build_rows(seqs, threshold=threshold, max_subtree_tokens=max_tokens)
        packed, dictionary = compress_rows(plain)
        variants = {"no dictionary": (list(plain.values()), None), "dictionary": (list(packed.values()), dictionary)}
        best = {name: float("inf") for name in variants}
        for _ in range(args.passes):
            for name, (rows, preset) in variants.items():
                t0 = time.perf_counter()
                for node in rows:
                    fmt.decode_fragment(node, fmt.FORMAT_VERSION, preset)
                best[name] = min(best[name], (time.perf_counter() - t0) / len(rows) * 1e6)
        row = {"rows": len(plain)}
        for name, (rows, _) in variants.items():
            row[name] = {"node_bytes_per_fact": sum(map(len, rows)) / n, "decode_us_per_row": best[name]}
        figures["configs"][config] = row
        print(f"T:B {config}: {n:,} facts, {len(plain):,} rows; row bodies "
              f"{row['no dictionary']['node_bytes_per_fact']:.1f} -> {row['dictionary']['node_bytes_per_fact']:.1f} "
              f"B/fact; decode {best['no dictionary']:.1f} -> {best['dictionary']:.1f} µs/row", flush=True)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
