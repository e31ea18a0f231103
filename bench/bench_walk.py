"""Generation's lookup pattern on realistic facts: a cursor advanced one token per step,
against a lookup of the whole prefix from the root at every step (the baseline), in one run.

Facts: ``--facts`` (default 1,000,000) Wikidata-like facts, ``<Label (description)>
<property> <value> .`` with long-tailed subjects, a Zipf mix of properties and hot
objects, dates and quantities; about 31 Qwen2.5 tokens each. They are tokenized with
Qwen2.5 (../shared), built into rows by the reference cut rule (``build_rows``, by default
T=1024, B=32768, the defaults) and loaded into a fresh PostgreSQL database.

Walk: ``--walks`` (default 300) facts, each step choosing a child with probability
proportional to its leaf count, until a fact ends; default cache (256 MB), opened cold.
Per step it times (1) ``next_tokens(prefix)`` from the root, (2) a cursor advanced by
the chosen token (``advance`` + ``next_tokens``) fetching only the row it reaches
(``prefetch_leaves=0``, the default), (3) the same cursor fetching every row below a node of
at most ``--prefetch-leaves`` (2,048) facts in the same round trip as the row, (4) the same
cursor fetching its own row and the rows below on another connection
(``prefetch_in_background=True``), (5) the matcher's step as generation runs it (``FactMatcher.step_batch`` for one
row: cursor, net of generated facts; default index). Prints mean / p50 / p99 per step, round
trips on the steps' path and in the background. The walks here go on at once; in generation a
model's forward pass (tens of ms) separates two steps, so a background fetch has landed
before the next step needs it far more often than here.

Run: .venv/bin/python bench/bench_walk.py [--facts 1000000] [--walks 300] [--dsn postgresql://...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from refactx_index.tree.memory import DEFAULT_MAX_SUBTREE_TOKENS, DEFAULT_SUBTREE_THRESHOLD  # noqa: E402

WORDS = ("river mountain north south saint new old great little red black white green upper lower "
         "national royal central western eastern university church castle lake island valley bridge "
         "station school museum park street house tower county district province village city "
         "battle treaty company football club album song film novel series species genus family "
         "john mary william james george elizabeth henry charles anne thomas margaret robert").split()
DESCRIPTIONS = ("village in Poland", "species of insect", "scholarly article", "human settlement",
                "family name", "American politician", "Wikimedia category", "painting by an unknown artist",
                "river in Russia", "album by a rock band", "commune in France", "football player",
                "street in Berlin", "church building", "mountain in the Alps", "asteroid")
PROPERTIES = ("instance of", "country", "located in the administrative territorial entity", "part of",
              "date of birth", "occupation", "country of citizenship", "sex or gender", "genre",
              "publication date", "population", "follows", "followed by", "inception", "named after",
              "shares border with", "member of", "author", "cites work", "main subject", "language of work")
HOT_OBJECTS = ("human", "scholarly article", "France", "United States of America", "Germany", "English",
               "male", "female", "taxon", "village", "Poland", "film", "album", "painting", "asteroid")


def realistic_facts(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    n_subjects = max(1, n // 7)
    words = np.array(WORDS)
    lengths = rng.integers(1, 5, n_subjects)
    labels = [" ".join(w.capitalize() for w in rng.choice(words, k)) for k in lengths]
    descs = rng.choice(len(DESCRIPTIONS), n_subjects)
    subjects = [f"{labels[i]} ({DESCRIPTIONS[descs[i]]})" if i % 3 else f"{labels[i]} {i}"
                for i in range(n_subjects)]
    # long tail of statements per subject
    subj = np.minimum((rng.pareto(1.2, n) * n_subjects / 40).astype(np.int64), n_subjects - 1)
    zipf_p = 1.0 / np.arange(1, len(PROPERTIES) + 1)
    props = rng.choice(len(PROPERTIES), n, p=zipf_p / zipf_p.sum())
    hot = rng.zipf(1.5, n) - 1
    kind = rng.random(n)
    facts = set()
    for i in range(n):
        p = PROPERTIES[props[i]]
        if kind[i] < 0.2:
            value = f"{1800 + int(rng.integers(0, 224))}-{int(rng.integers(1, 13)):02d}-{int(rng.integers(1, 29)):02d}"
        elif kind[i] < 0.3:
            value = str(int(rng.integers(1, 10_000_000)))
        elif kind[i] < 0.7 and hot[i] < len(HOT_OBJECTS):
            value = HOT_OBJECTS[hot[i]]
        else:
            value = subjects[int(rng.integers(0, n_subjects))]
        facts.add(f"<{subjects[subj[i]]}> <{p}> <{value}> .")
    return sorted(facts)


def summarize(samples: list[float]) -> dict[str, float]:
    arr = np.asarray(samples) * 1e6
    return {"mean_us": float(arr.mean()), "p50_us": float(np.percentile(arr, 50)),
            "p99_us": float(np.percentile(arr, 99)), "steps": int(arr.size)}


def draw_walks(dsn: str, name: str, n: int, rng: np.random.Generator, schema: str = "refactx") -> list[list[int]]:
    """``n`` walks from the root, each step choosing a child with probability proportional to
    its leaf count, until a fact ends: drawn once, replayed identically by every method."""
    from refactx_index.tree.pg import open_index

    walks = []
    with open_index(dsn, name, schema=schema, follow=False) as index:
        for _ in range(n):
            cur, path = index.root(), []
            while True:
                step = cur.next_tokens()
                if step.tokens.size == 0 or (step.ends and rng.random() < 1 / (1 + step.leaves.sum())):
                    break
                t = int(rng.choice(step.tokens, p=step.leaves / step.leaves.sum()))
                path.append(t)
                cur = index.advance(cur, t)
            walks.append(path)
    return walks


WALK_METHODS = ("from_root", "cursor_row_only", "cursor", "cursor_background", "matcher")


def time_walks(dsn: str, name: str, walks: list[list[int]], method: str, prefetch_leaves: int,
               schema: str = "refactx") -> dict:
    """Replay ``walks`` with one method (``WALK_METHODS``) on a freshly opened index (cold
    cache): time per step and the round trips they paid."""
    from refactx_index.tree.index import PREFETCH_LEAVES
    from refactx_index.constraint.matcher import FactMatcher
    from refactx_index.tree.pg import open_index

    # the row-only cursor never fetches the rows below; the root lookups and the matcher use
    # the runtime's default
    prefetch = {"cursor_row_only": 0, "cursor": prefetch_leaves,
                "cursor_background": prefetch_leaves}.get(method, PREFETCH_LEAVES)
    with open_index(dsn, name, schema=schema, follow=False, prefetch_leaves=prefetch,
                    prefetch_in_background=method == "cursor_background") as index:
        samples: list[float] = []
        matcher = FactMatcher(index, [(0,)], [1])
        for path in walks:
            if method == "from_root":
                for j in range(len(path) + 1):
                    t0 = time.perf_counter()
                    index.next_tokens(path[:j])
                    samples.append(time.perf_counter() - t0)
            elif method.startswith("cursor"):
                t0 = time.perf_counter()
                cur = index.root()
                cur.next_tokens()
                samples.append(time.perf_counter() - t0)
                for t in path:
                    t0 = time.perf_counter()
                    cur = index.advance(cur, t)
                    cur.next_tokens()
                    samples.append(time.perf_counter() - t0)
            else:
                t0 = time.perf_counter()
                st = matcher.start_batch([[0]])[0]
                samples.append(time.perf_counter() - t0)
                for t in path:
                    t0 = time.perf_counter()
                    st = matcher.step_batch([st], [t], [[t]])[0]
                    samples.append(time.perf_counter() - t0)
        out = {**summarize(samples), "round_trips": index.stats.round_trips,
               "rows_fetched": index.stats.rows_fetched, "rows_decoded": index.stats.rows_decoded,
               "ahead_round_trips": index.stats.ahead_round_trips}
    out["round_trips_per_step"] = out["round_trips"] / out["steps"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", type=int, default=1_000_000)
    parser.add_argument("--walks", type=int, default=300)
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server where a scratch database may be created and dropped")
    parser.add_argument("--threshold", type=int, default=DEFAULT_SUBTREE_THRESHOLD, help="tree.subtree_threshold (T)")
    parser.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_SUBTREE_TOKENS,
                        help="tree.max_subtree_tokens (B)")
    parser.add_argument("--prefetch-leaves", type=int, default=2048,
                        help="the prefetching cursors' prefetch_leaves (methods cursor and cursor_background; "
                             "the runtime's default, 0, is cursor_row_only)")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    from refactx_index.vocab import encode_facts, open_tokenizer
    from tests.pgtree import fresh_database, load_tree

    started = time.perf_counter()
    texts = realistic_facts(args.facts)
    tok = open_tokenizer(str(ROOT.parent / "shared" / "tokenizers" / "qwen2.5"))
    encoded = encode_facts(tok, texts, ())
    seqs = [tuple(encoded.ids(i)) for i in range(len(texts))]
    mean_len = float(np.mean([len(s) for s in seqs]))
    print(f"{len(seqs):,} facts, {mean_len:.1f} Qwen2.5 tokens on average "
          f"(generated and tokenized in {time.perf_counter() - started:.0f} s)", flush=True)

    results: dict[str, dict] = {}
    with fresh_database(args.dsn, "refactx_bench_walk") as dsn:
        started = time.perf_counter()
        build_id = load_tree(dsn, "walk", seqs, threshold=args.threshold, max_subtree_tokens=args.max_tokens,
                             vocab_size=151_665)
        print(f"rows built and loaded in {time.perf_counter() - started:.0f} s", flush=True)
        with psycopg.connect(dsn) as conn:
            relation = f"refactx.tree_b{build_id}"
            table, index_bytes = conn.execute("SELECT pg_table_size(%s::regclass), pg_indexes_size(%s::regclass)",
                                              (relation, relation)).fetchone()
            (rows,) = conn.execute(f"SELECT count(*) FROM {relation}").fetchone()
        size = {"table_bytes_per_fact": table / len(seqs), "index_bytes_per_fact": index_bytes / len(seqs),
                "rows_per_fact": float(rows) / len(seqs)}
        print(f"index: {(table + index_bytes) / len(seqs):.1f} bytes/fact (table {size['table_bytes_per_fact']:.1f} "
              f"+ B-tree {size['index_bytes_per_fact']:.1f}), {size['rows_per_fact']:.3f} rows/fact", flush=True)
        walks = draw_walks(dsn, "walk", args.walks, np.random.default_rng(1))
        for method in WALK_METHODS:
            results[method] = time_walks(dsn, "walk", walks, method, args.prefetch_leaves)
    base = results["from_root"]["mean_us"]
    print(f"\nper step over {args.walks} walks (PostgreSQL index, default cache, cold at start):")
    print(f"{'method':<16}{'mean':>10}{'p50':>10}{'p99':>10}{'steps':>8}{'round trips':>13}{'behind':>8}"
          f"{'decoded':>9}{'vs root':>9}")
    for method, r in results.items():
        print(f"{method:<16}{r['mean_us']:>8.1f}us{r['p50_us']:>8.1f}us{r['p99_us']:>8.1f}us{r['steps']:>8}"
              f"{r['round_trips']:>13}{r['ahead_round_trips']:>8}{r['rows_decoded']:>9}{base / r['mean_us']:>8.1f}x")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"facts": len(seqs), "mean_tokens": mean_len, "threshold": args.threshold,
                                               "max_subtree_tokens": args.max_tokens, "size": size, **results}, indent=2))


if __name__ == "__main__":
    main()
