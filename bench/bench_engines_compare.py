"""The fact constraint's processor, two installs compared in one run: ``bench_engines.py``'s
transformers and vLLM sections (SmolLM2-135M-Instruct on this CPU, every row inside a fact)
run with one pair of environments (``--before-python``, ``--before-vllm-python``: another
checkout's ``.venv`` and ``.venv-vllm``, its installed runtime the code measured), then with
this checkout's, back to back on the same machine. The figure is the processor's own time per
step (transformers: all of its ``__call__``; vLLM: ``update_state`` + ``apply`` replayed over the
tokens the engine wrote) at each batch size, before and after, and their ratio.

Run: python bench/bench_engines_compare.py --before-python ../main/.venv/bin/python \\
         --before-vllm-python ../main/.venv-vllm/bin/python --json docs/figures/engines-before-after.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(python: str, vllm_python: str, facts: str, batches: str, tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "figures.json"
        env = dict(os.environ, REFACTX_VLLM_PYTHON=vllm_python)
        subprocess.run([python, str(ROOT / "bench/bench_engines.py"), "--sections", "transformers,vllm",
                        "--facts", facts, "--model-batches", batches, "--tokens", str(tokens), "--json", str(out)],
                       check=True, env=env)
        return json.loads(out.read_text())


def commit_of(python: str) -> str:
    """The commit of the checkout an environment's python lies in (``<checkout>/.venv/bin/python``)."""
    checkout = Path(python).absolute().parents[2]
    found = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return found.stdout.strip() or f"unknown ({checkout} is no git checkout)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before-python", required=True, help="the python of the environment measured first")
    parser.add_argument("--before-vllm-python", required=True, help="its vLLM environment's python")
    parser.add_argument("--after-python", default=str(ROOT / ".venv/bin/python"))
    parser.add_argument("--after-vllm-python", default=str(ROOT / ".venv-vllm/bin/python"))
    parser.add_argument("--facts", default=str(ROOT / "tests/golden/sample_facts.txt"),
                        help="the facts indexed (default: the shared sample's, one a line)")
    parser.add_argument("--model-batches", default="1,4,16,64")
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    before = run(args.before_python, args.before_vllm_python, args.facts, args.model_batches, args.tokens)
    after = run(args.after_python, args.after_vllm_python, args.facts, args.model_batches, args.tokens)
    ratios: dict = {}
    for section in ("transformers", "vllm"):
        ratios[section] = {}
        for rows, fig in after.get(section, {}).get("rows", {}).items():
            was = before[section]["rows"][rows]["processor_ms_per_step"]
            ratios[section][rows] = fig["processor_ms_per_step"] / was
            print(f"{section:12s} rows {rows:>3}: processor {was:.3f} -> {fig['processor_ms_per_step']:.3f} ms/step "
                  f"({ratios[section][rows]:.2f}x)", flush=True)
    figures = {"measured": {"date": started, "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}",
                            "load_avg_at_end": os.getloadavg(),
                            "before_commit": commit_of(args.before_python), "after_commit": commit_of(args.after_python)},
               "command": shlex.join([Path(sys.executable).name, *sys.argv]), "before": before, "after": after,
               "processor_ratio_after_over_before": ratios}
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
