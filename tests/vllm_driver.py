"""Runs vLLM for tests/runtime/test_engine_vllm.py, in the vLLM virtual environment (.venv-vllm).

vLLM pins its own transformers, so it lives in a virtual environment of its own with the
runtime wheel; this script is what the tests run there. It reads a JSON spec (argv[1]),
starts each engine of the spec in turn (with or without the refactx logits processor),
runs its generations and writes what came out (argv[2]): token ids and text per prompt,
plus the Model Runner V2 processor driven directly through vLLM's own interface types.

Spec: {"model": DIR, "indexes": {NAME: FILE.rfx}, "engines": [{"name": ..., "processor":
bool, "dtype": str, "prefix_caching": bool, "max_model_len": int, "kv_blocks": int, "runs": [{"name": ..., "prompts": [str], "chat": bool,
"alone": bool, "params": {SamplingParams keywords}} or {"name": ..., "prompts": [str], "beams": {"index":
NAME, "width": int, "max_tokens": int}}]}], "v2": {"index": NAME, "prompt": str, "tokens": [int]},
"v1": {the same}}
"""

from __future__ import annotations

import gc
import json
import os
import sys

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")

PROCESSOR = "refactx_index.engines.vllm:RefactxLogitsProcessor"


def _engine(spec: dict, engine: dict):
    from vllm import LLM

    # no prefix caching: a run must not reuse the KV blocks of an earlier run of the same
    # engine, so that what a request writes does not depend on which runs came before it (the
    # engines compared run different runs first)
    kwargs = dict(model=spec["model"], dtype=engine.get("dtype", "bfloat16"), gpu_memory_utilization=0.25,
                  max_model_len=engine.get("max_model_len", 2048), enforce_eager=True, seed=0,
                  max_num_seqs=engine.get("max_num_seqs", 16), enable_prefix_caching=engine.get("prefix_caching", False))
    if engine.get("kv_blocks"):  # a KV cache of this many blocks of 32 tokens: requests get preempted
        kwargs.update(block_size=32, num_gpu_blocks_override=engine["kv_blocks"], disable_log_stats=False)
    if engine["processor"]:
        kwargs["logits_processors"] = [PROCESSOR]
        kwargs["additional_config"] = {"refactx": {"indexes": spec["indexes"]}}
    return LLM(**kwargs)


def _beams(llm, spec: dict, run: dict) -> list[dict]:
    """Constrained beam search (engines/vllm_beams.py) over the run's prompts."""
    from refactx_index.engines.vllm_beams import beam_search
    from refactx_index.tree.memory import MemoryTreeIndex

    tok = llm.get_tokenizer()
    beams = run["beams"]
    index = MemoryTreeIndex.load(spec["indexes"][beams["index"]])
    prompt_ids = [tok.encode(p, add_special_tokens=False) for p in run["prompts"]]
    # the end ids: the engine's model directory's vocabulary (config and generation config)
    results = beam_search(llm, prompt_ids, index, beam_width=beams["width"], max_tokens=beams["max_tokens"])
    return [{"prompt_ids": ids, "ids": hyps[0].tokens, "score": hyps[0].score,
             "facts": [list(f) for f in hyps[0].facts]} for ids, hyps in zip(prompt_ids, results)]


def _run(llm, spec: dict, run: dict) -> list[dict]:
    from vllm import SamplingParams

    if run.get("beams"):
        return _beams(llm, spec, run)
    tok = llm.get_tokenizer()
    prompts = run["prompts"]
    if run.get("chat"):
        from refactx_index.prompting.prompt import Prompt

        prompts = [tok.apply_chat_template(Prompt().messages(q), tokenize=False, add_generation_prompt=True)
                   for q in prompts]
    params = SamplingParams(**run["params"])
    if run.get("alone"):
        outputs = [llm.generate([p], params, use_tqdm=False)[0] for p in prompts]
    else:
        outputs = llm.generate(prompts, params, use_tqdm=False)
    return [{"prompt_ids": list(o.prompt_token_ids), "ids": list(o.outputs[0].token_ids),
             "text": o.outputs[0].text, "finish": o.outputs[0].finish_reason} for o in outputs]


def _v2(spec: dict) -> dict:
    """The V2 processor through vLLM's own LogitsContext, on CPU tensors: each step feeds
    the token the request wrote, as the V2 runner does, and reads the mask back."""
    from types import SimpleNamespace

    import numpy as np
    import torch
    from tokenizers import Tokenizer
    from vllm import SamplingParams
    from vllm.v1.worker.gpu.sample.logits_processor import LogitsContext

    from refactx_index.engines.vllm import RefactxLogitsProcessorV2

    v2 = spec["v2"]
    tokenizer = Tokenizer.from_file(os.path.join(spec["model"], "tokenizer.json"))
    prompt = tokenizer.encode(v2["prompt"], add_special_tokens=False).ids
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    slots, slot = 4, 2
    all_ids = torch.zeros(slots, 256, dtype=torch.int64)
    all_ids[slot, : len(prompt)] = torch.tensor(prompt)
    prompt_len = np.zeros(slots, dtype=np.int64)
    prompt_len[slot] = len(prompt)
    req_states = SimpleNamespace(device=torch.device("cpu"), max_num_reqs=slots, vocab_size=vocab,
                                 all_token_ids=SimpleNamespace(gpu=all_ids),
                                 prompt_len=SimpleNamespace(np=prompt_len),
                                 prefill_len=SimpleNamespace(np=prompt_len.copy()))
    config = SimpleNamespace(additional_config={"refactx": {"indexes": spec["indexes"]}},
                             model_config=SimpleNamespace(tokenizer=spec["model"], model=spec["model"],
                                                          hf_config=SimpleNamespace(eos_token_id=2),
                                                          hf_generation_config={}))
    proc = RefactxLogitsProcessorV2(config, req_states)
    assert proc.add_request(slot, SamplingParams(extra_args={"refactx_index": v2["index"]}))
    assert not proc.add_request(0, SamplingParams())
    allowed: list[list[int]] = []
    written = list(prompt)
    for tok in [None] + v2["tokens"]:
        if tok is not None:
            written.append(tok)
        fed = written[-1]
        ctx = LogitsContext(expanded_idx_mapping=torch.tensor([0, slot]), idx_mapping=torch.tensor([0, slot]),
                            idx_mapping_np=np.asarray([0, slot]), expanded_local_pos=torch.zeros(2, dtype=torch.int64),
                            input_ids=torch.tensor([5, fed]), pos=torch.tensor([3, len(written) - 1]),
                            seq_lens_upper_bound_np=np.asarray([4, len(written)]))
        logits = torch.zeros(2, vocab)
        proc.apply(logits, ctx)
        if not torch.isfinite(logits[0]).all():
            raise AssertionError("the unconstrained request's row was masked")
        allowed.append(torch.isfinite(logits[1]).nonzero().flatten().tolist())
    # preempted after two ids and resumed in slot 3: MRV2 adds it again, its prefill the prompt
    # and the ids it had written; the mask is the tree's after those ids
    resumed, written = 3, list(prompt) + v2["tokens"][:2]
    all_ids[resumed, : len(written)] = torch.tensor(written)
    prompt_len[resumed] = len(prompt)
    req_states.prefill_len.np[resumed] = len(written)
    proc.constraint.remove([slot])
    assert proc.add_request(resumed, SamplingParams(extra_args={"refactx_index": v2["index"]}))
    ctx = LogitsContext(expanded_idx_mapping=torch.tensor([resumed]), idx_mapping=torch.tensor([resumed]),
                        idx_mapping_np=np.asarray([resumed]), expanded_local_pos=torch.zeros(1, dtype=torch.int64),
                        input_ids=torch.tensor([written[-1]]), pos=torch.tensor([len(written) - 1]),
                        seq_lens_upper_bound_np=np.asarray([len(written)]))
    logits = torch.zeros(1, vocab)
    proc.apply(logits, ctx)
    return {"allowed": allowed, "prompt_ids": prompt,
            "resumed_allowed": torch.isfinite(logits[0]).nonzero().flatten().tolist()}


def _v1(spec: dict) -> dict:
    """The V1 processor through vLLM's own BatchUpdate, as the runner drives it under async
    scheduling (which vLLM's CPU platform switches off): each output id first a placeholder
    (-1) at update_state, written in place before apply; the request preempted (removed) and
    resumed in another slot with the ids it wrote (a new list); moved by a swap; ids taken
    back (the list shrinks) and written again. At every apply its row's mask is compared with
    the mask of the same request added fresh with its ids so far."""
    from types import SimpleNamespace

    import torch
    from tokenizers import Tokenizer
    from vllm import SamplingParams
    from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality

    from refactx_index.engines.vllm import RefactxLogitsProcessor

    v1 = spec["v1"]
    tokenizer = Tokenizer.from_file(os.path.join(spec["model"], "tokenizer.json"))
    prompt = tokenizer.encode(v1["prompt"], add_special_tokens=False).ids
    vocab = tokenizer.get_vocab_size(with_added_tokens=True)
    config = SimpleNamespace(additional_config={"refactx": {"indexes": spec["indexes"]}},
                             model_config=SimpleNamespace(tokenizer=spec["model"], model=spec["model"]))
    proc = RefactxLogitsProcessor(config, torch.device("cpu"), False)
    fresh = RefactxLogitsProcessor(config, torch.device("cpu"), False)
    on, off = SamplingParams(extra_args={"refactx_index": v1["index"]}), SamplingParams()
    out_a, out_b = [], []
    slot_a, size = 2, 3
    proc.update_state(BatchUpdate(size, [], [(0, off, [5, 6], out_b), (slot_a, on, prompt, out_a)], []))
    checks, mismatches, events = 0, [], []

    def check() -> None:
        nonlocal checks
        logits = torch.zeros(size, vocab)
        proc.apply(logits)
        if not torch.isfinite(logits[0 if slot_a != 0 else 1]).all():
            mismatches.append(("unconstrained row masked", len(out_a)))
        fresh.update_state(BatchUpdate(1, [0], [(0, on, prompt, list(out_a))], []))
        alone = torch.zeros(1, vocab)
        fresh.apply(alone)
        got = torch.isfinite(logits[slot_a]).nonzero().flatten().tolist()
        expected = torch.isfinite(alone[0]).nonzero().flatten().tolist()
        checks += 1
        if got != expected:
            mismatches.append((len(out_a), got[:8], expected[:8]))

    check()
    walk = list(v1["tokens"])
    taken_back = False
    k = 0
    while k < len(walk):
        update = None
        if k == 3 and "preempted" not in events:  # preempted: out of the batch for a step
            events.append("preempted")
            proc.update_state(BatchUpdate(size, [slot_a], [], []))
            proc.apply(torch.zeros(size, vocab))
            out_a = list(out_a)  # resumed: the runner's new list of the ids it had written
            slot_a = 1
            update = BatchUpdate(size, [], [(slot_a, on, prompt, out_a)], [])
        elif k == 5 and "swapped" not in events:
            events.append("swapped")
            update = BatchUpdate(size, [], [], [(1, 0, MoveDirectionality.SWAP)])
            slot_a = 0
        elif k == 7 and not taken_back:  # the runner takes two ids back
            events.append("taken back")
            taken_back = True
            del out_a[-2:]
            k -= 2
        out_a.append(-1)  # async scheduling: sampled, not yet on the host
        out_b.append(7)
        proc.update_state(update)
        out_a[-1] = walk[k]  # written in place before the logits processors run
        check()
        k += 1
    return {"checks": checks, "mismatches": mismatches, "events": events}


def main() -> None:
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    result: dict = {"engines": {}}
    for engine in spec["engines"]:
        llm = _engine(spec, engine)
        result["engines"][engine["name"]] = {run["name"]: _run(llm, spec, run) for run in engine["runs"]}
        if engine.get("kv_blocks"):  # how many times the scheduler preempted a request
            result["engines"][engine["name"]]["preemptions"] = sum(
                getattr(m, "value", 0) for m in llm.get_metrics() if m.name == "vllm:num_preemptions")
        del llm
        gc.collect()
    if spec.get("v2"):
        result["v2"] = _v2(spec)
    if spec.get("v1"):
        result["v1"] = _v1(spec)
    with open(sys.argv[2], "w") as f:
        json.dump(result, f)


if __name__ == "__main__":  # vLLM starts its engine in a child process
    main()
