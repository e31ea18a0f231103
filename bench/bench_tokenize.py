"""Tokenization throughput: facts per second per core inside Spark vs one plain process.

    .venv/bin/python bench/bench_tokenize.py [--size N] [--vocab DIR_OR_NAME] [--cores 1,2]

Same facts, same run: first the baseline, ``refactx_index.vocab.encode_facts`` (one
``encode_batch_fast`` call per Arrow-sized batch, single-threaded) and a bare
``Tokenizer.encode_batch_fast`` with no context handling; then the tokenize job's
encoding pass (``refactx_pipeline.tokenize_facts.encode_all``: Parquet scan -> mapInArrow -> the same
encoder) on ``local[1]`` and ``local[2]``, forced to completion with the ``noop``
sink. A warm-up run first starts the Python workers and parses the tokenizer,
which the timed run then finds cached. Prints facts/s, facts/s per core, and ratios.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

os.environ["TOKENIZERS_PARALLELISM"] = "false"  # per-core figures: one thread per process/task

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from refactx_pipeline.config import Config  # noqa: E402
from refactx_index.vocab import encode_facts, open_vocabulary  # noqa: E402

WORDS = (
    "river north saint film album county village species house war party school station song church "
    "island football player national city district university river lake award born member game"
).split()
PROPS = ["date of birth", "country", "instance of", "population", "described at URL", "coordinate location"]


def make_facts(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)

    def label() -> str:
        return " ".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(1, 4)))

    facts = []
    for i in range(n):
        obj = label() if i % 3 else f"{rng.randint(1000, 2020)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        facts.append(f"<{label()} {i}> <{rng.choice(PROPS)}> <{obj}> .")
    return facts


def time_call(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=40000, help="number of facts (default 40000)")
    parser.add_argument("--vocab", default=str(ROOT.parent / "shared" / "tokenizers" / "qwen2.5"))
    parser.add_argument("--cores", default="1,2", help="Spark local[N] runs, comma-separated")
    parser.add_argument("--batch", type=int, default=10000, help="facts per encode call / Arrow batch")
    args = parser.parse_args(argv)

    vocab = open_vocabulary("bench", args.vocab)
    tok = vocab.tokenizer()
    facts = make_facts(args.size)
    print(f"vocabulary {args.vocab} (sha256 {vocab.sha256[:12]}, {vocab.vocab_size} ids); {len(facts)} facts")

    def baseline() -> None:
        for i in range(0, len(facts), args.batch):
            encode_facts(tok, facts[i : i + args.batch], vocab.forbidden_ids, " ", "")

    def bare() -> None:
        for i in range(0, len(facts), args.batch):
            tok.encode_batch_fast([" " + f for f in facts[i : i + args.batch]], add_special_tokens=False)

    baseline()  # warm-up
    t_base = min(time_call(baseline) for _ in range(2))
    t_bare = min(time_call(bare) for _ in range(2))
    base_rate = len(facts) / t_base
    print(f"{'plain process, encode_facts':40s} {t_base:7.2f}s {base_rate:10.0f} facts/s (1 core)")
    print(
        f"{'plain process, bare encode_batch_fast':40s} {t_bare:7.2f}s {len(facts) / t_bare:10.0f} facts/s (1 core)"
        f"   context handling costs x{t_base / t_bare:.2f}"
    )

    from refactx_pipeline.common import spark_session
    from refactx_pipeline.tokenize_facts import encode_all

    rates: dict[int, float] = {}
    with tempfile.TemporaryDirectory(prefix="bench_tokenize_") as tmp:
        for cores in [int(c) for c in args.cores.split(",") if c.strip()]:
            cfg = Config().updated({
                "spark.master": f"local[{cores}]",
                "spark.driver_memory": "2g",
                "spark.shuffle_partitions": cores * 2,
                "spark.conf": {
                    "spark.default.parallelism": str(cores),
                    "spark.sql.execution.arrow.maxRecordsPerBatch": str(args.batch),
                    "spark.ui.showConsoleProgress": "false",
                },
            })
            spark = spark_session(cfg, f"bench_tokenize_local{cores}")
            path = f"{tmp}/facts_{cores}"
            spark.createDataFrame([(i, t) for i, t in enumerate(facts)], "fact_id long, text string").repartition(
                cores
            ).write.mode("overwrite").parquet(path)
            frame = spark.read.parquet(path)

            def job(df=frame) -> None:
                encode_all(df, [vocab], " ", "").write.format("noop").mode("overwrite").save()

            t_warm = time_call(lambda: job(frame.limit(1000)))
            t_spark = min(time_call(job) for _ in range(3))
            rate = len(facts) / t_spark
            rates[cores] = rate
            print(
                f"{'spark local[' + str(cores) + '] encode_all':40s} {t_spark:7.2f}s {rate:10.0f} facts/s "
                f"{rate / cores:8.0f} facts/s/core   per core vs plain: {rate / cores / base_rate:.2f}"
                f"   (warm-up run {t_warm:.1f}s)"
            )
            spark.stop()
    if 1 in rates and 2 in rates:
        print(f"local[2] / local[1] throughput: x{rates[2] / rates[1]:.2f} (ideal x2.00)")
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"machine: {os.cpu_count()} logical cores, load average {load}; other processes skew these figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
