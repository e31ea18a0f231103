"""The fact server under load: requests per second and latency, constrained and not.

Starts ``refactx serve``'s application in process (uvicorn on a loopback port) with
SmolLM2-135M-Instruct and an index of the shared sample's facts, then for 1, 4 and 16
concurrent clients (each sending ``--requests`` chat completions one after the other,
``--max-tokens`` each, greedy) prints requests per second and p50/p99 latency, with the
constraint and without it (``"refactx": {"index": null}``) in the same run. Then the
exploration calls (entities, relations, objects, facts) on the busiest entities: latency
and index lookups per call.

``--engine vllm`` serves the same with ``refactx serve --engine vllm`` started from the vLLM
virtual environment (``.venv-vllm``, 0.25 of its 2 GiB KV cache, eager) instead of the
transformers engine in process; the exploration calls are the same either way (not run again).

Run: ./dev demo --no-question (once), then .venv/bin/python bench/bench_server.py
[--engine vllm] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_engines import DEMO_FACTS, fact_texts  # noqa: E402

QUESTIONS = ["What is the capital of Germany?", "Which country is Northern Ireland part of?",
             "Which continent is Japan in?", "Which countries share a border with France?"]


def _pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", default=str(DEMO_FACTS))
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--requests", type=int, default=4, help="requests per client (default 4)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--engine", choices=["transformers", "vllm"], default="transformers")
    parser.add_argument("--json")
    args = parser.parse_args()

    import httpx
    import uvicorn

    from refactx_index.tree import explore
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import load_model
    from refactx_index.server.app import ServerSettings, create_app
    from refactx_index.server.backend_transformers import TransformersEngine

    texts = fact_texts(args.facts)
    loaded = load_model("smollm2")
    index = MemoryTreeIndex.from_facts(texts, str(loaded.tokenizer_file))
    if args.engine == "vllm":
        url, stop = _vllm_server(index, loaded.directory, args.max_tokens)
    else:
        engine = TransformersEngine(loaded, {"sample": index}, max_batch=16)
        app = create_app(engine, ServerSettings(default_index="sample", max_new_tokens=args.max_tokens,
                                                max_concurrent=64))
        started = threading.Event()
        app.router.on_startup.append(started.set)
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        started.wait(60)

        def stop() -> None:
            server.should_exit = True
            thread.join(30)
            engine.close()
    figures: dict = {"engine": args.engine, "facts": len(texts), "max_tokens": args.max_tokens,
                     "load": {}, "explore": {}}

    def one(client: httpx.Client, question: str, index) -> float:
        t = time.perf_counter()
        r = client.post(url + "/v1/chat/completions", json={
            "model": "smollm2", "messages": [{"role": "user", "content": question}],
            "max_tokens": args.max_tokens, "refactx": {"index": index}})
        r.raise_for_status()
        return time.perf_counter() - t

    with httpx.Client(timeout=600) as warm:
        one(warm, QUESTIONS[0], "sample")
    for clients in [int(c) for c in args.clients.split(",")]:
        for label, idx in (("constrained", "sample"), ("free", None)):
            latencies: list[float] = []

            def client_run(k: int) -> None:
                with httpx.Client(timeout=600) as http:
                    for j in range(args.requests):
                        latencies.append(one(http, QUESTIONS[(k + j) % len(QUESTIONS)], idx))

            t = time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                list(pool.map(client_run, range(clients)))
            wall = time.perf_counter() - t
            row = {"rps": len(latencies) / wall, "p50_s": _pct(latencies, 0.5), "p99_s": _pct(latencies, 0.99)}
            figures["load"][f"{clients}/{label}"] = row
            print(f"{clients:3d} clients, {label:11s}: {row['rps']:6.2f} req/s, p50 {row['p50_s']:6.2f} s, "
                  f"p99 {row['p99_s']:6.2f} s", flush=True)

    stop()
    if args.engine == "vllm":
        _write(args.json, figures)
        return
    import re

    triples = [re.match(r"^<(.*?)> <(.*?)> <(.*)> \.$", t).groups() for t in texts]
    busiest = [s for s, _ in Counter(s for s, _, _ in triples).most_common(5)]
    tok = loaded.tokenizer
    calls = {
        "entities": lambda s: explore.entities(index, tok, s[:4]),
        "relations": lambda s: explore.relations(index, tok, s),
        "objects": lambda s: explore.objects(index, tok, s, explore.relations(index, tok, s)[0].label),
        "facts(50)": lambda s: explore.facts_page(index, tok, f"<{s}> <", limit=50),
    }
    for name, call in calls.items():
        times, lookups = [], []
        for subject in busiest:
            before = index.stats.lookups
            t = time.perf_counter()
            call(subject)
            times.append(time.perf_counter() - t)
            lookups.append(index.stats.lookups - before)
        row = {"median_ms": statistics.median(times) * 1e3, "max_ms": max(times) * 1e3,
               "lookups_median": statistics.median(lookups)}
        figures["explore"][name] = row
        print(f"explore {name:10s}: median {row['median_ms']:7.1f} ms, max {row['max_ms']:7.1f} ms, "
              f"{row['lookups_median']:.0f} lookups", flush=True)
    _write(args.json, figures)


def _write(path: str | None, figures: dict) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(figures, indent=1))


def _vllm_server(index, model_dir: Path, max_tokens: int):
    """``refactx serve --engine vllm`` in the vLLM environment on a free port: its URL and a stop."""
    work = Path(tempfile.mkdtemp(prefix="bench-server-vllm-"))
    index.save(work / "sample.rfx")
    port = free_port()
    env = dict(os.environ, VLLM_CPU_KVCACHE_SPACE="2")
    return start_serve(
        [str(ROOT / ".venv-vllm" / "bin" / "python"), "-m", "refactx_index.cli", "serve", "--engine", "vllm",
         "--model", str(model_dir), "--model-name", "smollm2", "--index-file", f"sample={work / 'sample.rfx'}",
         "--port", str(port), "--max-new-tokens", str(max_tokens), "--max-concurrent", "64",
         "--gpu-memory-utilization", "0.25", "--max-model-len", "2048", "--enforce-eager"],
        port, cwd=work, env=env, wait_s=900)


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def start_serve(cmd: list[str], port: int, *, cwd: Path | None = None, env: dict[str, str] | None = None,
                wait_s: float = 600) -> tuple[str, Callable[[], None]]:
    """Start a ``refactx serve`` command line and wait for its ``refactx: serving`` line: its URL
    and a stop (its own process group, so an engine's child processes go with it)."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                            start_new_session=True)
    ready = threading.Event()
    lines: list[str] = []

    def watch() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if "refactx: serving" in line:
                ready.set()
        ready.set()

    threading.Thread(target=watch, daemon=True).start()
    if not ready.wait(wait_s) or proc.poll() is not None:
        raise SystemExit(f"{' '.join(cmd[:4])} ... did not start:\n" + "".join(lines)[-4000:])

    def stop() -> None:
        proc.terminate()
        proc.wait(60)
        with contextlib.suppress(ProcessLookupError):  # any engine process its shutdown left
            os.killpg(proc.pid, signal.SIGKILL)

    return f"http://127.0.0.1:{port}", stop

if __name__ == "__main__":
    main()
