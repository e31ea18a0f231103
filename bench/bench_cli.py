"""CLI start-up benchmark: how long a user waits for `refactx complete` and
`refactx-pipeline builds`, beside `refactx --help` (interpreter start and the CLI's imports)
run the same way.

With --startup, only the start-up of the runtime's command: `refactx --help` and `import
refactx_index.cli` (which import no subcommand's modules), against the same import followed by
every module its subcommands use (what the command imported at its top before 0.2.0), each
in its own process, and `python -c pass` for the interpreter alone:

    .venv/bin/python bench/bench_cli.py --startup --rounds 15
    .venv/bin/python bench/bench_cli.py --startup --instructions

--instructions counts each start-up's instructions with valgrind's callgrind instead of timing
it: the same count for the same files whatever else the machine runs (one run each).

    .venv/bin/python bench/bench_cli.py --dsn postgresql://postgres@127.0.0.1/scratch \
        --index wikidata-qwen2.5 --vocabulary ../shared/tokenizers/qwen2.5 [--rounds 5]

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
    parser.add_argument("--vocabulary", default="../shared/tokenizers/qwen2.5")
    parser.add_argument("--wrong-vocabulary", default="../shared/tokenizers/llama3",
                        help="another vocabulary: complete must refuse it")
    parser.add_argument("--text", default=" <Northern Ireland")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--startup", action="store_true", help="only the runtime command's start-up")
    parser.add_argument("--instructions", action="store_true",
                        help="with --startup: instructions executed (valgrind --tool=callgrind), not seconds")
    args = parser.parse_args()
    if args.startup:
        return startup_instructions() if args.instructions else startup(args.rounds)

    runtime, pipeline = (shutil.which(name, path=str(Path(sys.executable).parent)) or name
                         for name in ("refactx", "refactx-pipeline"))
    dsn = ["--dsn", args.dsn] if args.dsn else []
    cases = {
        "refactx --help (baseline)": [runtime, "--help"],
        "complete": [runtime, "complete", *dsn, "--index", args.index, "--vocabulary", args.vocabulary, args.text],
        "complete, wrong vocabulary": [runtime, "complete", *dsn, "--index", args.index,
                                       "--vocabulary", args.wrong_vocabulary, args.text],
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


# the modules `refactx`'s subcommands use, which refactx_index/cli.py imported at its top
# before 0.2.0 (the server's back ends import fastapi/torch only when they run)
SUBCOMMAND_MODULES = ("refactx_index.display", "refactx_index.prompting.paths", "refactx_index.prompting.prompt",
                      "refactx_index.qa.ask", "refactx_index.qa.evaluation", "refactx_index.qa.models",
                      "refactx_index.server.app", "refactx_index.server.backend_transformers",
                      "refactx_index.server.backend_vllm", "refactx_index.tree.explore",
                      "refactx_index.tree.memory", "refactx_index.tree.pg", "refactx_index.vocab")


def startup_cases() -> dict[str, list[str]]:
    python = sys.executable
    runtime = shutil.which("refactx", path=str(Path(python).parent)) or "refactx"
    eager = "import refactx_index.cli; " + "; ".join(f"import {m}" for m in SUBCOMMAND_MODULES)
    return {
        "python -c pass (interpreter)": [python, "-c", "pass"],
        "import every subcommand module (baseline)": [python, "-c", eager],
        "import refactx_index.cli": [python, "-c", "import refactx_index.cli"],
        "refactx --help": [runtime, "--help"],
    }


def startup(rounds: int) -> int:
    baseline = None
    print(f"{'command':<44} {'median s':>9} {'min s':>7} {'x baseline':>11}  exit")
    for name, cmd in startup_cases().items():
        times, code = wall_times(cmd, rounds)
        median = statistics.median(times)
        if "baseline" in name:
            baseline = median
        ratio = f"{median / baseline:11.2f}" if baseline else f"{'':>11}"
        print(f"{name:<44} {median:9.3f} {min(times):7.3f} {ratio}  {code}")
    return 0


def startup_instructions() -> int:
    """Each start-up's instruction count under callgrind, with its ratio to the baseline's."""
    if shutil.which("valgrind") is None:
        print("valgrind is not installed (Debian: apt-get install valgrind)", file=sys.stderr)
        return 2
    baseline = None
    print(f"{'command':<44} {'instructions':>14} {'x baseline':>11}")
    for name, cmd in startup_cases().items():
        run = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
                             capture_output=True, text=True, check=False)
        refs = next(int(line.split(":")[1].replace(",", "")) for line in run.stderr.splitlines() if "I   refs:" in line)
        if "baseline" in name:
            baseline = refs
        ratio = f"{refs / baseline:11.2f}" if baseline else f"{'':>11}"
        print(f"{name:<44} {refs:14,d} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
