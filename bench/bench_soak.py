"""Soak benchmark: a served index under readers in threads while builds are loaded, activated
and dropped by retention, as a scheduled rebuild does.

    .venv/bin/python bench/bench_soak.py [--dsn postgresql://postgres@127.0.0.1:5432/postgres]
        [--activations 20] [--readers 8] [--facts 2000] [--modes follow,refresher,alone]
        [--cache-bytes 32768]

Creates a temporary database, loads alternately two different trees of ``--facts`` facts as
new builds of one index name, activates each (NOTIFY: the index follows by itself) and at once
applies retention, as the activate stage does (keep 1, no grace: the build readers just left
is dropped under them). Readers
check every answer against the build it must come from: an answer is wrong when it is neither
tree's answer, or the old tree's after the index reported the switch. Prints lookups, errors
by type and wrong answers (target: 0 wrong, 0 raw errors, 0 ``BuildRetired``: plain lookups
switch and retry), and lookup throughput beside a baseline run with no rebuilds in the same
process. Each of ``--modes`` is one soak, the ways an index may switch builds (each must
keep plain lookups free of ``BuildRetired``): ``follow`` (``follow=True``: the follower
thread switches), ``refresher`` (``follow=False``, one more thread calling ``refresh()``),
``alone`` (``follow=False``: only the lookups that meet a dropped build switch). The row
cache is small by default (``--cache-bytes``, 32 kB), so that most lookups reach the database
as on a large index: with every row cached, no lookup would ever meet a dropped table.
"""

from __future__ import annotations

import argparse
import collections
import random
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402

from refactx_index import open_index  # noqa: E402
from refactx_index.errors import RefactxError  # noqa: E402
from refactx_pipeline.stages.activate import apply_retention  # noqa: E402
from tests.pgtree import expected_next, fresh_database, load_tree  # noqa: E402


def tree(seed: int, facts: int) -> set[tuple[int, ...]]:
    rng = random.Random(seed)
    return {tuple(rng.randrange(2, 400) for _ in range(rng.randint(3, 12))) for _ in range(facts)}


MODES = ("follow", "refresher", "alone")


def run(dsn: str, trees: list[set[tuple[int, ...]]], activations: int, readers: int,
        hold_s: float = 0.0, mode: str = "follow", cache_bytes: int = 32 << 10) -> dict:
    prefixes = sorted({s[:i] for t in trees for s in t for i in range(len(s) + 1)})
    rng = random.Random(0)
    sample = rng.sample(prefixes, min(len(prefixes), 3000))
    answers = [{p: expected_next(t, p) for p in sample} for t in trees]
    load_tree(dsn, "soak", trees[0], threshold=8)
    stop = threading.Event()
    stats = collections.Counter(lookups=0, wrong=0, checked_after_switch=0, dropped=0)
    errors: collections.Counter[str] = collections.Counter()
    switches = {"done": 0}

    with open_index(dsn, "soak", check_interval_s=5.0, follow=mode == "follow",
                    cache_bytes=cache_bytes) as index:
        def refresher() -> None:  # another thread that switches the index (mode refresher)
            while not stop.wait(0.005):
                try:
                    index.refresh()
                except RefactxError as exc:
                    errors[f"refresh: {type(exc).__name__}"] += 1

        def reader(offset: int) -> None:
            i = offset
            while not stop.is_set():
                batch = [sample[(i + k * 17) % len(sample)] for k in range(4)]
                i += 7
                try:
                    got = index.next_tokens_batch(batch)
                except RefactxError as exc:
                    errors[type(exc).__name__] += 1
                    continue
                except Exception as exc:  # a raw driver error: what must never happen
                    errors[f"RAW {type(exc).__module__}.{type(exc).__name__}"] += 1
                    continue
                for p, step in zip(batch, got):
                    got_answer = (dict(zip(step.tokens.tolist(), step.leaves.tolist())), bool(step.ends))
                    stats["lookups"] += 1
                    if got_answer not in (answers[0][p], answers[1][p]):
                        stats["wrong"] += 1

        threads = [threading.Thread(target=reader, args=(n * 101,)) for n in range(readers)]
        if mode == "refresher":
            threads.append(threading.Thread(target=refresher))
        started = time.perf_counter()
        for t in threads:
            t.start()
        try:
            for switch in range(1, activations + 1):
                build = load_tree(dsn, "soak", trees[switch % 2], threshold=8)
                switches["done"] += 1
                # retention at once, as the activate stage runs it: lookups that took the old
                # build just before the switch meet its table dropped
                with psycopg.connect(dsn, autocommit=True) as conn:
                    stats["dropped"] += len(apply_retention(conn, "refactx", "soak", keep=1, grace_s=0,
                                                            lock_timeout_ms=500))
                # alone, the index switches when a lookup meets the dropped build
                if mode != "alone":
                    if not index.wait_for_build(build, timeout_s=30):
                        errors["index did not follow the activation within 30 s"] += 1
                    # after the switch: every answer is the new tree's
                    for p, step in zip(sample[:300], index.next_tokens_batch(sample[:300])):
                        got_answer = (dict(zip(step.tokens.tolist(), step.leaves.tolist())), bool(step.ends))
                        stats["checked_after_switch"] += 1
                        if got_answer != answers[switch % 2][p]:
                            stats["wrong"] += 1
            time.sleep(hold_s)  # the baseline: readers alone for as long as the soak ran
        finally:
            stop.set()
            for t in threads:
                t.join()
        elapsed = time.perf_counter() - started
    return {"seconds": elapsed, "lookups_per_s": stats["lookups"] / elapsed, **stats,
            "errors": dict(errors), "activations": switches["done"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--activations", type=int, default=20)
    parser.add_argument("--readers", type=int, default=8)
    parser.add_argument("--facts", type=int, default=2000)
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"comma-separated, of {', '.join(MODES)} (see the module doc)")
    parser.add_argument("--cache-bytes", type=int, default=32 << 10,
                        help="the index's row cache (small: lookups reach the database)")
    args = parser.parse_args()
    modes = [m for m in args.modes.split(",") if m]
    if not modes or any(m not in MODES for m in modes):
        parser.error(f"--modes: choose from {', '.join(MODES)}")
    trees = [tree(1, args.facts), tree(2, args.facts)]
    failed = False
    for mode in modes:
        with fresh_database(args.dsn, "refactx_soak") as dsn:
            soak = run(dsn, trees, args.activations, args.readers, mode=mode,
                       cache_bytes=args.cache_bytes)
        with fresh_database(args.dsn, "refactx_soak") as dsn:
            baseline = run(dsn, trees, 0, args.readers, hold_s=soak["seconds"], mode=mode,
                           cache_bytes=args.cache_bytes)  # no rebuilds
        print(f"soak ({mode}): {soak['activations']} activations, {soak['dropped']} builds dropped "
              f"under {args.readers} readers in {soak['seconds']:.1f} s (retention keep 1, grace 0)")
        print(f"  lookups {soak['lookups']} ({soak['lookups_per_s']:.0f}/s), checked after a switch "
              f"{soak['checked_after_switch']}, wrong answers {soak['wrong']}")
        print(f"  errors by type: {soak['errors'] or 'none'}")
        raw = sum(n for k, n in soak["errors"].items() if k.startswith("RAW"))
        retired = soak["errors"].get("BuildRetired", 0)
        print(f"  raw driver errors: {raw}; BuildRetired from plain lookups: {retired}")
        print(f"  baseline (no rebuilds): {baseline['lookups_per_s']:.0f} lookups/s; soak/baseline "
              f"{soak['lookups_per_s'] / max(baseline['lookups_per_s'], 1):.2f}x")
        failed |= soak["wrong"] > 0 or raw > 0 or retired > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
