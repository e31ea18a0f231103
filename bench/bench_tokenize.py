"""Tokenize throughput: the tokenize stage in Spark against the plain ``tokenizers`` batch encoder.

    .venv/bin/python bench/bench_tokenize.py [--size N] [--facts realistic|synthetic]
        [--vocab DIR_OR_NAME] [--cores 1,2] [--batch 10000] [--reps 2] [--json FILE]

One run, one input: ``--size`` fact texts (default 200,000 realistic Wikidata-like facts,
``bench/bench_walk.py``'s generator; ``synthetic`` is the older short-fact generator),
written once as ``verbalize/facts`` Parquet. For each ``local[N]`` of ``--cores``, in turns
(``--reps`` rounds, the best of each kept):

- **plain encoder**: a separate process loads the same texts, then times
  ``Tokenizer.encode_batch`` and ``encode_batch_fast`` of ``fact_prefix + text`` in
  ``--batch`` slices on N threads (``RAYON_NUM_THREADS=N``; one thread: parallelism off),
  with the process's default allocator (glibc malloc) and again with jemalloc preloaded;
- **tokenize stage**: ``refactx_pipeline.stages.tokenize.run`` as the pipeline runs it
  (Parquet in, one encoding job, tokens/rejects/meta/counts out) on ``local[N]``, its
  Python workers already started (a warm-up run on 1,000 facts first).

Prints wall seconds, facts/s, CPU seconds (the whole Spark process tree: JVM and Python
workers, and this driver) and the ratios stage/plain: the issue's target is stage >= 0.8x
the plain encoder on the same cores. Then a breakdown on one thread in plain processes:
where the stage's encoder time goes (context handling, id extraction, allocator, the
ASCII fast path).

The machine may be shared: absolute figures move with its load, which is printed; the
ratios are taken between runs made in turns within this one run.
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

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # the plain processes get theirs from run_plain

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = (
    "river north saint film album county village species house war party school station song church "
    "island football player national city district university river lake award born member game"
).split()
PROPS = ["date of birth", "country", "instance of", "population", "described at URL", "coordinate location"]


def make_facts(n: int, seed: int = 7) -> list[str]:
    """Short synthetic facts (the benchmark's original input)."""
    rng = random.Random(seed)

    def label() -> str:
        return " ".join(rng.choice(WORDS).capitalize() for _ in range(rng.randint(1, 4)))

    facts = []
    for i in range(n):
        obj = label() if i % 3 else f"{rng.randint(1000, 2020)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        facts.append(f"<{label()} {i}> <{rng.choice(PROPS)}> <{obj}> .")
    return facts


def fact_texts(kind: str, n: int) -> list[str]:
    if kind == "synthetic":
        return make_facts(n)
    from bench.bench_walk import realistic_facts

    # the generator drops repeated facts: ask for a little more, keep n
    texts = realistic_facts(int(n * 1.12) + 100)
    return random.Random(3).sample(texts, min(n, len(texts)))


# ------------------------------------------------------------------ plain process
def plain_process(args: argparse.Namespace) -> int:
    """Child mode: time one encoder over the texts of a facts Parquet; print JSON."""
    import pyarrow.parquet as pq

    from refactx_index.vocab import encode_facts, load_tokenizer, open_vocabulary

    texts = pq.read_table(args.plain_facts, columns=["text"]).column("text").to_pylist()
    prefixed = [" " + t for t in texts]
    vocab = open_vocabulary("bench", args.vocab)
    tok = load_tokenizer(vocab.file)
    step = args.batch
    if args.plain == "encode_batch":
        def one(i: int) -> None:
            tok.encode_batch(prefixed[i:i + step], add_special_tokens=False)
    elif args.plain == "encode_batch_fast":
        def one(i: int) -> None:
            tok.encode_batch_fast(prefixed[i:i + step], add_special_tokens=False)
    elif args.plain == "encode_batch_fast+context":
        in_context = ["Fact:" + t for t in prefixed]

        def one(i: int) -> None:
            tok.encode_batch_fast(in_context[i:i + step], add_special_tokens=False)
    elif args.plain == "encode_batch_fast+context+ids":
        in_context = ["Fact:" + t for t in prefixed]

        def one(i: int) -> None:
            [e.ids for e in tok.encode_batch_fast(in_context[i:i + step], add_special_tokens=False)]
    elif args.plain == "encode_facts":
        def one(i: int) -> None:
            encode_facts(tok, texts[i:i + step], vocab.forbidden_ids, " ", "")
    elif args.plain == "encode_facts+ascii":
        from refactx_index.vocab import tokenizer_for_ascii

        fast = tokenizer_for_ascii(tok)

        def one(i: int) -> None:
            encode_facts(tok, texts[i:i + step], vocab.forbidden_ids, " ", "", ascii_tokenizer=fast)
    else:
        raise SystemExit(f"unknown encoder {args.plain}")
    one(0)  # warm: thread pool, caches
    wall0, cpu0 = time.perf_counter(), time.process_time()
    for i in range(0, len(texts), step):
        one(i)
    print(json.dumps({"facts": len(texts), "wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0}))
    return 0


def run_plain(args: argparse.Namespace, facts_path: str, encoder: str, threads: int, preload: str | None) -> dict:
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads),
               TOKENIZERS_PARALLELISM="true" if threads > 1 else "false")
    env.pop("LD_PRELOAD", None)
    if preload:
        env["LD_PRELOAD"] = preload
    out = subprocess.run(
        [sys.executable, __file__, "--plain", encoder, "--plain-facts", facts_path, "--vocab", args.vocab,
         "--batch", str(args.batch)],
        env=env, capture_output=True, text=True, check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _preloaded_workers(jvm_pid: int, library: str) -> int:
    """Python processes under the JVM with ``library`` mapped (the tokenize workers)."""
    import psutil

    count = 0
    for proc in psutil.Process(jvm_pid).children(recursive=True):
        try:
            if library in Path(f"/proc/{proc.pid}/maps").read_text():
                count += 1
        except OSError:
            continue
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200_000, help="number of facts (default 200000)")
    parser.add_argument("--facts", choices=("realistic", "synthetic"), default="realistic")
    parser.add_argument("--vocab", default=str(ROOT.parent / "shared" / "tokenizers" / "qwen2.5"))
    parser.add_argument("--cores", default="1,2", help="Spark local[N] runs, comma-separated")
    parser.add_argument("--batch", type=int, default=10000, help="facts per encode call / Arrow batch")
    parser.add_argument("--reps", type=int, default=2, help="rounds of plain/stage in turns (best kept)")
    parser.add_argument("--no-breakdown", action="store_true", help="skip the one-thread breakdown")
    parser.add_argument("--json", help="write the figures here too")
    parser.add_argument("--plain", help=argparse.SUPPRESS)  # child mode
    parser.add_argument("--plain-facts", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.plain:
        return plain_process(args)

    from pyspark.sql import functions as F

    from bench.bench_e2e import ProcessTreeSampler
    from refactx_pipeline.stages.tokenize import WORKER_PRELOAD

    jemalloc = next((path for path in WORKER_PRELOAD if os.path.isfile(path)), None)  # as the stage finds it

    from refactx_pipeline.stages import tokenize as T
    from refactx_pipeline.common import spark_session
    from refactx_pipeline.config import Config, VocabularyConfig
    from refactx_index.vocab import encode_facts, open_vocabulary
    from refactx_pipeline.stages.contract import StageContext

    vocab = open_vocabulary("bench", args.vocab)
    started = time.perf_counter()
    texts = fact_texts(args.facts, args.size)
    sample = encode_facts(vocab.tokenizer(), texts[:20000], vocab.forbidden_ids)
    mean_tokens = float((sample.offsets[1:] - sample.offsets[:-1]).mean())
    ascii_share = sum(t.isascii() for t in texts) / len(texts)
    print(f"vocabulary {args.vocab} (sha256 {vocab.sha256[:12]}, {vocab.vocab_size} ids)")
    print(f"{len(texts):,} {args.facts} facts, {mean_tokens:.1f} tokens each on average, {ascii_share:.1%} ASCII "
          f"(made in {time.perf_counter() - started:.0f} s); batch {args.batch}; jemalloc: {jemalloc or 'not found'}")
    cores_list = [int(c) for c in args.cores.split(",") if c.strip()]
    results: dict = {"facts": len(texts), "kind": args.facts, "mean_tokens": mean_tokens, "vocab": args.vocab,
                     "batch": args.batch, "cpu_count": os.cpu_count(), "runs": {}}

    with tempfile.TemporaryDirectory(prefix="bench_tokenize_") as tmp:
        facts_dir = f"{tmp}/build/wikidata/bench/verbalize/facts"
        warm_dir = f"{tmp}/build/wikidata/warm/verbalize/facts"
        for cores in cores_list:
            cfg = Config().updated({
                "paths.build_root": f"{tmp}/build",
                "paths.dump_date": "bench",
                "spark.master": f"local[{cores}]",
                "spark.driver_memory": "4g",
                "spark.shuffle_partitions": cores * 2,
                "spark.conf": {
                    "spark.default.parallelism": str(cores),
                    "spark.sql.execution.arrow.maxRecordsPerBatch": str(args.batch),
                    "spark.ui.showConsoleProgress": "false",
                },
                "tokenize.vocabularies": [VocabularyConfig(name="bench", path=args.vocab)],
            })
            spark = spark_session(cfg, f"bench_tokenize_local{cores}")
            jvm_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())
            if not os.path.exists(facts_dir):
                frame = spark.createDataFrame([(t,) for t in texts], "text string")
                frame = frame.select(F.xxhash64("text").alias("fact_id"), "text", F.lit("statement").alias("kind"),
                                     F.lit("P1").alias("property"))
                frame.repartition(4).write.parquet(facts_dir)
                frame.limit(1000).coalesce(1).write.parquet(warm_dir)
            started = time.perf_counter()
            # starts the workers, parses the tokenizer
            T.run(StageContext(cfg.updated({"paths.dump_date": "warm"}), spark=spark))
            warm_s = time.perf_counter() - started
            workers = _preloaded_workers(jvm_pid, jemalloc) if jemalloc else 0

            # the baselines: the plain encoder as it comes (glibc malloc), and with jemalloc as the stage has it
            variants = {"encode_batch": None, "encode_batch_fast": None}
            if jemalloc:
                variants["encode_batch_fast, jemalloc"] = jemalloc
            plain: dict[str, list[dict]] = {name: [] for name in variants}
            stage: list[dict] = []
            for _ in range(args.reps):
                for name, preload in variants.items():
                    plain[name].append(run_plain(args, facts_dir, name.split(",")[0], cores, preload))
                # CPU of this driver, its JVM and the Python workers (sampled: a worker that exits
                # keeps what was last seen of it)
                with ProcessTreeSampler() as sampler:
                    cpu0, wall0 = sampler.cpu_seconds(), time.perf_counter()
                    counts = T.run(StageContext(cfg, spark=spark))
                    wall = time.perf_counter() - wall0
                    stage.append({"wall_s": wall, "cpu_s": sampler.cpu_seconds() - cpu0})
            spark.stop()
            assert counts["vocabularies"]["bench"]["facts_written"] + sum(
                counts["vocabularies"]["bench"]["rejected"].values()) == len(texts)
            n = len(texts)
            best_stage = min(stage, key=lambda r: r["wall_s"])
            print(f"\nlocal[{cores}] (plain encoder on {cores} thread{'s' * (cores > 1)}); "
                  f"stage warm-up {warm_s:.1f} s; workers with jemalloc: {workers}")
            print(f"  {'':34s} {'wall s':>8s} {'facts/s':>9s} {'CPU s':>7s} {'facts/CPU-s':>11s}")
            row = {"stage": {"best": best_stage, "all": stage}, "plain": {}, "ratio_wall": {}, "ratio_cpu": {},
                   "ratio_wall_median": {}, "jemalloc_workers": workers, "warmup_s": warm_s}
            for name, runs in plain.items():
                best = min(runs, key=lambda r: r["wall_s"])
                row["plain"][name] = {"best": best, "all": runs}
                print(f"  {'plain ' + name:34s} {best['wall_s']:8.2f} {n / best['wall_s']:9.0f} "
                      f"{best['cpu_s']:7.2f} {n / best['cpu_s']:11.0f}")
            print(f"  {'tokenize stage (tokenize_facts.run)':34s} {best_stage['wall_s']:8.2f} "
                  f"{n / best_stage['wall_s']:9.0f} {best_stage['cpu_s']:7.2f} {n / best_stage['cpu_s']:11.0f}")
            for name in plain:
                best = row["plain"][name]["best"]
                wall_ratio = best["wall_s"] / best_stage["wall_s"]
                cpu_ratio = best["cpu_s"] / best_stage["cpu_s"]
                per_round = sorted(p["wall_s"] / s["wall_s"] for p, s in zip(plain[name], stage))
                row["ratio_wall"][name] = wall_ratio
                row["ratio_cpu"][name] = cpu_ratio
                row["ratio_wall_median"][name] = per_round[len(per_round) // 2]
                print(f"  stage / plain {name:28s} x{wall_ratio:.2f} throughput (best of each; per round "
                      f"{', '.join(f'x{r:.2f}' for r in per_round)}), x{cpu_ratio:.2f} per CPU second")
            results["runs"][f"local[{cores}]"] = row
    if len(cores_list) > 1 and 1 in cores_list:
        one = results["runs"]["local[1]"]["stage"]["best"]["wall_s"]
        for cores in cores_list[1:]:
            print(f"stage local[{cores}] / local[1] throughput: "
                  f"x{one / results['runs'][f'local[{cores}]']['stage']['best']['wall_s']:.2f} (ideal x{cores}.00)")

    if not args.no_breakdown:
        with tempfile.TemporaryDirectory(prefix="bench_tokenize_bd_") as tmp:
            import pyarrow as pa
            import pyarrow.parquet as pq

            path = f"{tmp}/facts.parquet"
            pq.write_table(pa.table({"text": texts}), path)
            print("\nbreakdown, one thread, plain processes (CPU us per fact, best of 2):")
            breakdown: dict[str, float] = {}
            for encoder in ("encode_batch", "encode_batch_fast", "encode_batch_fast+context",
                            "encode_batch_fast+context+ids", "encode_facts", "encode_facts+ascii"):
                for preload in (None, jemalloc) if jemalloc else (None,):
                    cpu = min(run_plain(args, path, encoder, 1, preload)["cpu_s"] for _ in range(2))
                    key = encoder + (", jemalloc" if preload else "")
                    breakdown[key] = cpu / len(texts) * 1e6
                    print(f"  {key:44s} {breakdown[key]:7.1f}")
            results["breakdown_cpu_us_per_fact"] = breakdown

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\nmachine: {os.cpu_count()} logical cores, load average {load}; other processes skew absolute figures")
    results["load_average"] = os.getloadavg()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
