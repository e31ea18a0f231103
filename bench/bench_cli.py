"""CLI start-up benchmark: how long a user waits for `refactx complete` and
`refactx-pipeline builds`, beside `refactx --help` (interpreter start and the CLI's imports)
run the same way.

    .venv/bin/python bench/bench_cli.py --dsn postgresql://postgres@127.0.0.1/scratch \
        --index wikidata-qwen2.5 --tokenizer ../shared/tokenizers/qwen2.5 [--rounds 5]

`refactx complete` reads --dsn (default: $REFACTX_DSN). Without --dsn, `refactx-pipeline
builds` uses the configured database (an embedded one in .pgdata when pg.dsn is empty), which
adds its start to every call. Needs an active index under --index (``./dev demo`` builds
``wikidata-qwen2.5``). Each command runs --rounds times as its own process; the median wall
time is printed with its ratio to --help's.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


def wall_times(cmd: list[str], rounds: int) -> tuple[list[float], int]:
    times, code = [], 0
    for _ in range(rounds):
        started = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        times.append(time.perf_counter() - started)
        code = done.returncode
    return times, code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dsn", help="PostgreSQL DSN (default: the configured or embedded database)")
    parser.add_argument("--index", default="wikidata-qwen2.5")
    parser.add_argument("--tokenizer", default="../shared/tokenizers/qwen2.5")
    parser.add_argument("--wrong-tokenizer", default="../shared/tokenizers/llama3",
                        help="another vocabulary: complete must refuse it")
    parser.add_argument("--text", default=" <Northern Ireland")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()

    runtime, pipeline = (shutil.which(name, path=str(Path(sys.executable).parent)) or name
                         for name in ("refactx", "refactx-pipeline"))
    dsn = ["--dsn", args.dsn] if args.dsn else []
    cases = {
        "refactx --help (baseline)": [runtime, "--help"],
        "complete": [runtime, "complete", *dsn, "--index", args.index, "--tokenizer", args.tokenizer, args.text],
        "complete, wrong vocabulary": [runtime, "complete", *dsn, "--index", args.index,
                                       "--tokenizer", args.wrong_tokenizer, args.text],
        "refactx-pipeline --help": [pipeline, "--help"],
        "builds": [pipeline, "builds", *dsn],
    }
    baseline = None
    print(f"{'command':<30} {'median s':>9} {'min s':>7} {'x --help':>9}  exit")
    for name, cmd in cases.items():
        times, code = wall_times(cmd, args.rounds)
        median = statistics.median(times)
        baseline = baseline or median
        print(f"{name:<30} {median:9.2f} {min(times):7.2f} {median / baseline:9.1f}  {code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
