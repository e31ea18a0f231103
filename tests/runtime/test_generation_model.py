"""Constrained generation for real: SmolLM2-135M-Instruct (the packaged GGUF), its own
tokenizer, the project's ReFactX-style prompt (a system message that explains ``Fact:``
and two worked examples that write ``Fact:`` lines), and an index of the shared
sample's facts as the verbalize stage writes them.

The assertions are on facts, never on the model's free text.
"""

from __future__ import annotations

import pytest

from refactx_index.qa.policies import PLAIN

from ..conftest import shared_path

pytestmark = [pytest.mark.slow]

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

QUESTIONS = [
    "Which country is Northern Ireland part of?",
    "What is the capital of Germany?",
    "Which continent is Japan in?",
    "Which countries share a border with France?",
]
MAX_NEW_TOKENS = 64


@pytest.fixture(scope="module")
def loaded():
    from refactx_index.qa.models import load_model

    return load_model("smollm2")


@pytest.fixture(scope="module")
def index(loaded, sample_fact_texts):
    from refactx_index.tree.memory import MemoryTreeIndex

    return MemoryTreeIndex.from_facts(sample_fact_texts, str(loaded.tokenizer_file))


@pytest.fixture(scope="module")
def stored(loaded, sample_fact_texts) -> set[tuple[int, ...]]:
    """Every stored sequence, encoded independently of the index."""
    from refactx_index.vocab import encode_facts, open_tokenizer

    encoded = encode_facts(open_tokenizer(str(loaded.tokenizer_file)), sample_fact_texts, ())
    return {tuple(encoded.ids(i)) for i in range(len(sample_fact_texts))}


@pytest.fixture(scope="module")
def batch_answers(index, loaded):
    from refactx_index.qa.ask import ask

    return ask(QUESTIONS, index, loaded, num_beams=3, max_new_tokens=MAX_NEW_TOKENS, policies=PLAIN)


def test_the_prompt_mentions_the_trigger_and_its_examples_write_facts():
    from refactx_index.prompting.prompt import Prompt

    prompt = Prompt()
    assert "Fact:" in prompt.system
    assert len(prompt.examples) == 2 and all("\nFact: <" in a for _, a in prompt.examples)


def test_the_model_writes_stored_facts_verbatim_and_never_twice(batch_answers, stored):
    facts = [f for a in batch_answers for f in a.facts]
    assert facts, [a.reply for a in batch_answers]  # (a) at least one fact is generated
    for answer in batch_answers:
        complete = [f.token_ids for f in answer.facts if f.complete]
        assert all(f in stored for f in complete), answer.reply  # (b) stored verbatim
        assert all(f.stored for f in answer.facts if f.complete)  # the index agrees
        assert len(complete) == len(set(complete)), answer.reply  # (c) no repeat in a row


def test_a_padded_batch_with_beams_equals_each_prompt_alone(batch_answers, index, loaded):
    """(d): 4 prompts of different lengths, left padded, 3 beams: row for row the facts of
    each prompt generated alone."""
    from refactx_index.qa.ask import ask

    assert len({a.prompt_tokens for a in batch_answers}) > 1  # padding was needed
    for question, together in zip(QUESTIONS, batch_answers):
        alone = ask([question], index, loaded, num_beams=3, max_new_tokens=MAX_NEW_TOKENS, policies=PLAIN)[0]
        assert [f.token_ids for f in alone.facts] == [f.token_ids for f in together.facts], question


def test_the_vocabulary_check_refuses_another_tokenizer(index, loaded):
    from refactx_index.errors import VocabularyMismatch
    from refactx_index.tree.index import check_vocabulary
    from refactx_index.tree.memory import MemoryTreeIndex

    check_vocabulary(index, loaded.tokenizer)  # the same vocabulary, checked on stored facts
    gpt2 = MemoryTreeIndex.from_facts(["<Germany> <capital> <Berlin> ."],
                                      str(shared_path("tokenizers", "gpt2")))
    with pytest.raises(VocabularyMismatch, match="50257"):
        check_vocabulary(gpt2, loaded.tokenizer)


def test_the_postgresql_index_gives_the_same_facts(pg_dsn, index, loaded, stored):
    """The same question, greedy, against the same facts served from PostgreSQL."""
    from refactx_index.qa.ask import ask
    from refactx_index.tree.pg import open_index
    from refactx_index.prompting.prompt import fitted_prompt

    from ..pgdb import pipeline_tree_loader

    load_tree = pipeline_tree_loader()

    question = QUESTIONS[1]
    prompt = fitted_prompt(index, loaded.tokenizer)  # one prompt: each index would draw its own examples
    in_memory = ask([question], index, loaded, prompt=prompt, num_beams=1, max_new_tokens=40, policies=PLAIN)[0]
    load_tree(pg_dsn, "sample-smollm2", stored, threshold=64, vocab_size=len(loaded.tokenizer))
    with open_index(pg_dsn, "sample-smollm2") as pg_index:
        served = ask([question], pg_index, loaded, prompt=prompt, num_beams=1, max_new_tokens=40, policies=PLAIN)[0]
    assert 1 <= served.timings["round_trips"] <= served.timings["steps"]  # at most one per step
    assert [f.token_ids for f in served.facts] == [f.token_ids for f in in_memory.facts]
    assert served.facts and all(f.stored for f in served.facts if f.complete)


def _ask_cli(*args: str, cwd) -> "subprocess.CompletedProcess[str]":
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX__")}
    return subprocess.run([sys.executable, "-m", "refactx_index.cli", "ask", *args],
                          capture_output=True, text=True, timeout=600, env=env, cwd=cwd)


def test_ask_command_answers_from_an_index_file_as_one_json_document(index, tmp_path):
    import json

    path = tmp_path / "sample.rfx"
    index.save(path)
    proc = _ask_cli("--index-file", str(path), "--beams", "1", "--max-new-tokens", "40", "--json",
                    "What is the capital of Germany?", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    answer = json.loads(proc.stdout)  # stdout is exactly one JSON document
    assert answer["question"] == "What is the capital of Germany?"
    assert answer["facts"] and all(f["stored"] for f in answer["facts"] if f["complete"])
    assert {"generate_s", "load_s", "round_trips", "steps"} <= set(answer["timings"])


def test_ask_command_refuses_an_index_of_another_vocabulary_before_generating(tmp_path):
    from refactx_index.tree.memory import MemoryTreeIndex

    path = tmp_path / "gpt2.rfx"
    MemoryTreeIndex.from_facts(["<Germany> <capital> <Berlin> ."], str(shared_path("tokenizers", "gpt2"))).save(path)
    proc = _ask_cli("--index-file", str(path), "What is the capital of Germany?", cwd=tmp_path)
    assert proc.returncode == 1
    assert "built for vocabulary" in proc.stderr and "Traceback" not in proc.stderr


def test_the_beam_driver_over_the_models_log_probabilities_is_transformers_beam_search(index, loaded):
    """engines/vllm_beams.py's selection, fed the model's own log-probabilities (one forward
    pass per beam and step, as vLLM answers its requests), writes token for token what
    transformers' constrained beam search writes: 3 beams, a prompt ending in the trigger."""
    import torch
    from transformers import LogitsProcessorList

    from refactx_index.engines.transformers import RefactxLogitsProcessor
    from refactx_index.engines.vllm_beams import constrained_beams

    tok, model, eos = loaded.tokenizer, loaded.model, 2

    def score(requests, top):
        out = []
        for ids, allowed in requests:
            with torch.inference_mode():
                logprobs = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), -1)
            if allowed is None:
                values, tokens = torch.topk(logprobs, top)
                out.append(dict(zip(tokens.tolist(), values.tolist())))
            else:
                out.append({int(t): float(logprobs[int(t)]) for t in allowed})
        return out

    prompts = [tok(f"Facts about {s}.\nFact:", add_special_tokens=False)["input_ids"] for s in ("Canada",)]
    driven = constrained_beams(score, tok, prompts, index, beam_width=3, max_tokens=20, length_penalty=1.0,
                               eos_ids=[eos])
    ids = torch.tensor(prompts)  # one length: no padding
    with torch.inference_mode():
        rows = model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=3, do_sample=False,
                              max_new_tokens=20, eos_token_id=[eos], pad_token_id=eos,
                              logits_processor=LogitsProcessorList(
                                  [RefactxLogitsProcessor(index, tok, eos_token_id=[eos])])).tolist()
    for hyps, row in zip(driven, rows):
        written = row[ids.shape[1]:]
        while len(written) > 1 and written[-1] == eos and written[-2] == eos:
            written.pop()
        assert hyps[0].tokens == written
        assert hyps[0].facts  # a prompt ending in the trigger writes a fact first
