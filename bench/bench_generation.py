"""Constrained generation with a real model: what the fact constraint adds per token.

SmolLM2-135M-Instruct (the packaged GGUF, float32 on CPU), the project's question prompt,
and the shared sample's facts (``./dev demo``'s verbalize output) served from a fresh
PostgreSQL database. For greedy and 3 beams, batch 1 and 4, it generates exactly
``--tokens`` new tokens per row with and without ``RefactxLogitsProcessor``, interleaved,
best of ``--rounds``, and prints: milliseconds per step both ways and the difference, the
processor's own time per step, the rows it constrained, index lookups and SQL round trips
per step.

Run: ./dev demo (once), then .venv/bin/python bench/bench_generation.py [--tokens 48] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from refactx_index.tree.memory import DEFAULT_MAX_SUBTREE_TOKENS, DEFAULT_SUBTREE_THRESHOLD  # noqa: E402

QUESTIONS = ["Which country is Northern Ireland part of?", "What is the capital of Germany?",
             "Which continent is Japan in?", "Which countries share a border with France?"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--facts", default=str(ROOT / "build/demo/wikidata/2018-sample500/verbalize/facts"),
                        help="the verbalize stage's facts dataset (default: ./dev demo's)")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="a server where a scratch database may be created and dropped")
    parser.add_argument("--tokens", type=int, default=48, help="new tokens per row (default 48)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args()

    import pyarrow.dataset as ds
    import torch
    from transformers import LogitsProcessorList

    from refactx_index.engines.transformers import RefactxLogitsProcessor
    from refactx_index.qa.models import load_model
    from refactx_index.tree.pg import open_index
    from refactx_index.prompting.prompt import Prompt
    from refactx_index.vocab import encode_facts, open_tokenizer
    from tests.pgtree import fresh_database, load_tree

    if not Path(args.facts).exists():
        sys.exit(f"{args.facts} is missing: run ./dev demo first (or give --facts)")
    texts = ds.dataset(args.facts, format="parquet").to_table(columns=["text"]).column("text").to_pylist()
    loaded = load_model("smollm2")
    tok = loaded.tokenizer
    encoded = encode_facts(open_tokenizer(str(loaded.tokenizer_file)), texts, ())
    seqs = {tuple(encoded.ids(i)) for i in range(len(texts))}
    prompts = [tok.apply_chat_template(Prompt().messages(q), tokenize=False, add_generation_prompt=True)
               for q in QUESTIONS]
    tok.padding_side = "left"
    print(f"SmolLM2-135M-Instruct, {len(seqs):,} facts in PostgreSQL, {args.tokens} new tokens per row, "
          f"torch threads {torch.get_num_threads()}")
    results = []
    with fresh_database(args.dsn, "refactx_bench_generation") as dsn:
        load_tree(dsn, "sample", seqs, threshold=DEFAULT_SUBTREE_THRESHOLD,
                  max_subtree_tokens=DEFAULT_MAX_SUBTREE_TOKENS, vocab_size=len(tok))
        with open_index(dsn, "sample") as index:
            for batch in (1, 4):
                enc = tok(prompts[:batch], return_tensors="pt", padding=True, add_special_tokens=False)
                for beams in (1, 3):
                    best = {"free": float("inf"), "constrained": float("inf")}
                    for _ in range(args.rounds):
                        for mode in ("free", "constrained"):
                            proc = RefactxLogitsProcessor(index, tok, eos_token_id=loaded.eos_token_ids)
                            trips, lookups = index.stats.round_trips, index.stats.lookups
                            started = time.perf_counter()
                            with torch.inference_mode():
                                loaded.model.generate(
                                    **enc, num_beams=beams, do_sample=False, max_new_tokens=args.tokens,
                                    min_new_tokens=args.tokens, pad_token_id=tok.pad_token_id,
                                    logits_processor=LogitsProcessorList([proc] if mode == "constrained" else []))
                            seconds = time.perf_counter() - started
                            if seconds < best[mode]:
                                best[mode] = seconds
                                if mode == "constrained":
                                    stats = {"processor_ms_per_step": 1000 * proc.seconds / proc.steps,
                                             "constrained_rows_per_step": proc.constrained_steps / proc.steps,
                                             "round_trips_per_step": (index.stats.round_trips - trips) / proc.steps,
                                             "lookups_per_step": (index.stats.lookups - lookups) / proc.steps}
                    free_ms = 1000 * best["free"] / args.tokens
                    con_ms = 1000 * best["constrained"] / args.tokens
                    row = {"batch": batch, "beams": beams, "free_ms_per_step": free_ms,
                           "constrained_ms_per_step": con_ms, "added_pct": 100 * (con_ms / free_ms - 1),
                           **stats}
                    row["processor_pct"] = 100 * row["processor_ms_per_step"] / free_ms
                    results.append(row)
                    print(f"batch {batch} beams {beams}: free {free_ms:6.1f} ms/step, constrained {con_ms:6.1f} "
                          f"({row['added_pct']:+.1f}%); processor {row['processor_ms_per_step']:.2f} ms/step "
                          f"({row['processor_pct']:.1f}% of a free step), {row['constrained_rows_per_step']:.1f} "
                          f"rows constrained, {row['lookups_per_step']:.1f} lookups and "
                          f"{row['round_trips_per_step']:.2f} round trips per step", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
