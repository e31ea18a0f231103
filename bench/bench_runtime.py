"""Runtime benchmark: next_tokens latency (cold/warm, wide nodes) and the cost of the
logits processor per generated token, beside unconstrained generation.

    .venv/bin/python bench/bench_runtime.py [--size N] [--dsn postgresql://postgres@127.0.0.1:5432/postgres]

Creates a temporary database on the server, loads a synthetic tree (``--size`` facts
plus a node with ``--wide`` children), and drops the database at the end.
Targets (DESIGN.md): mean <= 0.1 ms warm; p99 <= 2 ms on nodes with 10k+ children.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from refactx_index import open_index  # noqa: E402
from refactx_index.tree.memory import MemoryTreeIndex  # noqa: E402
from tests.pgtree import fresh_database, load_tree  # noqa: E402

WIDE_PREFIX = (1279,)


def synthetic_facts(size: int, wide: int, seed: int = 0) -> set[tuple[int, ...]]:
    """``size`` facts shaped like verbalized triples (shared subjects and properties),
    plus ``wide`` facts below WIDE_PREFIX, each with its own next token."""
    rng = np.random.default_rng(seed)
    subjects = rng.integers(2000, 50000, size=(max(1, size // 10), 3))
    props = rng.integers(2000, 50000, size=(40, 2))
    facts = set()
    for i in range(size):
        s = subjects[i % len(subjects)]
        p = props[rng.integers(len(props))]
        o = rng.integers(2000, 50000, size=rng.integers(1, 6))
        facts.add((1280, *s.tolist(), 29, 1279, *p.tolist(), 29, 1279, *o.tolist(), 29))
    tokens = rng.permutation(np.arange(2000, 50000))[:wide]
    for t in tokens.tolist():
        facts.add(WIDE_PREFIX + (t, 29, 13))
    return facts


def stats_ms(samples: list[float]) -> str:
    arr = np.asarray(samples) * 1e3
    return (f"mean {arr.mean():.4f} ms  p50 {np.percentile(arr, 50):.4f} ms  "
            f"p99 {np.percentile(arr, 99):.4f} ms  (n={arr.size})")


def time_lookups(index, prefixes, repeat: int = 1) -> list[float]:
    out = []
    for _ in range(repeat):
        for p in prefixes:
            t0 = time.perf_counter()
            index.next_tokens(p)
            out.append(time.perf_counter() - t0)
    return out


def bench_lookups(dsn: str, facts, args) -> None:
    rng = np.random.default_rng(1)
    ordered = sorted(facts)
    sample = [ordered[i] for i in rng.choice(len(ordered), min(300, len(ordered)), replace=False)]
    prefixes = [s[:k] for s in sample for k in range(len(s) + 1)]
    load_tree(dsn, "bench", facts, threshold=args.threshold, max_subtree_tokens=args.max_tokens, vocab_size=50257)
    with open_index(dsn, "bench") as index:
        print(f"[pg]     rows={index.info.rows} facts={index.info.facts} T={args.threshold} B={args.max_tokens}")
        cold = time_lookups(index, prefixes)
        print(f"[pg]     next_tokens cold (first touch of each prefix): {stats_ms(cold)}")
        warm = time_lookups(index, prefixes, repeat=3)
        print(f"[pg]     next_tokens warm:                             {stats_ms(warm)}")
        wide = index.next_tokens(WIDE_PREFIX)
        wide_cold = []
        for _ in range(50):  # cold: the root and the wide row fetched and decoded
            index.cache.clear()
            wide_cold += time_lookups(index, [WIDE_PREFIX])
        wide_warm = time_lookups(index, [WIDE_PREFIX], repeat=2000)
        print(f"[pg]     wide node ({wide.tokens.size} children) cold: {stats_ms(wide_cold)}")
        print(f"[pg]     wide node ({wide.tokens.size} children) warm: {stats_ms(wide_warm)}")
        batch = [p for p in prefixes if len(p) > 2][:256]
        index.cache.clear()
        t0 = time.perf_counter()
        index.next_tokens_batch(batch)
        print(f"[pg]     next_tokens_batch cold, {len(batch)} prefixes, one round trip: "
              f"{(time.perf_counter() - t0) * 1e3:.2f} ms")
    memory = MemoryTreeIndex.from_sequences(facts, threshold=args.threshold, max_subtree_tokens=args.max_tokens)
    time_lookups(memory, prefixes)
    print(f"[memory] next_tokens warm:                             "
          f"{stats_ms(time_lookups(memory, prefixes, repeat=3))}")


def bench_generation(args) -> None:
    try:
        import torch
        import transformers
        from tokenizers import Tokenizer
    except ImportError as exc:
        print(f"[gen]    skipped: {exc}")
        return
    from refactx_index.engines.transformers import RefactxLogitsProcessor

    tok_path = ROOT.parent / "shared" / "tokenizers" / "gpt2" / "tokenizer.json"
    if not tok_path.exists():
        print(f"[gen]    skipped: {tok_path} absent")
        return
    tokenizer = Tokenizer.from_file(str(tok_path))
    # intra-op threads spin-wait on a CPU shared with other jobs; one thread measures
    # the processor, not the scheduler (the same setting for every variant)
    torch.set_num_threads(args.torch_threads)
    texts = [f" <Company {i:04d}> <{p}> <value {i * 7 % 1000}> ." for i in range(2000)
             for p in ("industry", "country", "founded in", "chief executive")]
    index = MemoryTreeIndex.from_facts(texts, tokenizer)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=50257, n_positions=512, n_embd=64, n_layer=2, n_head=2)).eval()
    eos = 50256
    n_new = args.gen_tokens

    def per_token(prompt: str, make_processors) -> float:
        ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False).ids])
        t0 = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids),
                                 logits_processor=transformers.LogitsProcessorList(make_processors()),
                                 do_sample=False, max_new_tokens=n_new, min_new_tokens=n_new,
                                 pad_token_id=eos, eos_token_id=eos)
        return (time.perf_counter() - t0) / (out.shape[1] - ids.shape[1])

    free_prompt, fact_prompt = "Some text about companies and", "Known facts about companies. Fact:"

    def fresh():  # a new processor per call: its state cache starts empty
        return [RefactxLogitsProcessor(index, tokenizer, eos_token_id=eos)]

    variants = {"base": (fact_prompt, list), "constrained": (fact_prompt, fresh),
                "free": (free_prompt, fresh)}
    for prompt, make in variants.values():  # warm-up
        per_token(prompt, make)
    best = {k: float("inf") for k in variants}
    for _ in range(args.rounds):  # interleaved, best of rounds: the machine is shared
        for k, (prompt, make) in variants.items():
            best[k] = min(best[k], per_token(prompt, make))
    base, constrained, free = best["base"], best["constrained"], best["free"]
    print(f"[gen]    unconstrained generation: {base * 1e3:.3f} ms/token "
          f"(tiny GPT-2, {n_new} new tokens, torch threads={args.torch_threads})")
    print(f"[gen]    with processor, constrained steps: {constrained * 1e3:.3f} ms/token "
          f"(+{(constrained - base) * 1e3:.3f} ms, x{constrained / base:.2f})")
    print(f"[gen]    with processor, free steps:        {free * 1e3:.3f} ms/token "
          f"(+{(free - base) * 1e3:.3f} ms, x{free / base:.2f})")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=20000, help="facts (besides the wide node)")
    parser.add_argument("--wide", type=int, default=12000, help="children of the wide node")
    parser.add_argument("--max-tokens", type=int, default=4096, help="tree.max_subtree_tokens (B)")
    parser.add_argument("--threshold", type=int, default=16)
    parser.add_argument("--gen-tokens", type=int, default=12, help="tokens per generate() call")
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5, help="generation timing rounds")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres")
    args = parser.parse_args(argv)

    facts = synthetic_facts(args.size, args.wide)
    with fresh_database(args.dsn, "refactx_bench") as dsn:
        bench_lookups(dsn, facts, args)
    bench_generation(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
