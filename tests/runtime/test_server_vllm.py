"""The fact server on vLLM: ``refactx serve --engine vllm`` from the vLLM virtual environment
(``.venv-vllm``), the real SmolLM2-135M-Instruct, an index file of the shared sample's facts,
and the real ``openai`` client over loopback.

The model directory served is SmolLM2's files with a generation config that adds an end id the
base config lacks (``Answer``, which the model writes after its facts), as Llama-3 Instruct's
adds ``<|eot_id|>``: the server and its worker must agree on where a row ends."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import json
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from .test_engine_vllm import VLLM_PYTHON

from ..conftest import ROOT

pytestmark = [pytest.mark.slow]

openai = pytest.importorskip("openai")
QUESTIONS = {"What is the capital of Germany?": "Germany", "Which continent is Japan in?": "Japan"}


class Served(NamedTuple):
    """The openai client of a running server, what the server has written (stdout and stderr:
    vLLM logs to stdout), and an event set once its output is closed (the server has exited)."""

    client: Any
    output: list[str]
    exited: threading.Event
    index_file: Path


def two_end_model(directory: Path) -> Path:
    """SmolLM2's files in ``directory``, the generation config ending rows on ``Answer`` too
    (module doc)."""
    from refactx_index.qa.models import model_directory
    from refactx_index.vocab import open_tokenizer

    base = model_directory("smollm2")
    for file in base.iterdir():
        if file.name != "generation_config.json":
            (directory / file.name).symlink_to(file)
    generation = json.loads((base / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2 and json.loads((base / "config.json").read_text())["eos_token_id"] == 2
    generation["eos_token_id"] = [2, open_tokenizer(str(base)).token_to_id("Answer")]
    (directory / "generation_config.json").write_text(json.dumps(generation))
    return directory


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    return two_end_model(tmp_path_factory.mktemp("smollm2-two-ends"))


@contextlib.contextmanager
def _serving(work: Path, model: Path, texts: list[str], *options: str):
    """``refactx serve --engine vllm`` of ``model`` over an index of ``texts``, until the block ends."""
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} is absent: vLLM could not be installed on this machine")
    from refactx_index.tree.memory import MemoryTreeIndex

    index_file = work / "sample.rfx"
    MemoryTreeIndex.from_facts(texts, str(model / "tokenizer.json")).save(index_file)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    env["VLLM_CPU_KVCACHE_SPACE"] = "2"
    proc = subprocess.Popen(
        [str(VLLM_PYTHON), "-m", "refactx_index.cli", "serve", "--engine", "vllm", "--model", str(model),
         "--model-name", "smollm2", "--index-file", f"sample={index_file}", "--port", str(port),
         "--gpu-memory-utilization", "0.25", "--max-model-len", "2048", "--enforce-eager", "--max-batch", "8",
         *options],
        cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)  # its own process group: vLLM's engine processes go with it
    lines: list[str] = []
    ready, exited = threading.Event(), threading.Event()

    def watch() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if "refactx: serving" in line:
                ready.set()
        ready.set()  # the process ended
        exited.set()

    threading.Thread(target=watch, daemon=True).start()
    try:
        assert ready.wait(600) and proc.poll() is None, "".join(lines)[-4000:]
        yield Served(openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0,
                                   timeout=300), lines, exited, index_file)
    finally:
        proc.terminate()
        proc.wait(60)
        with contextlib.suppress(ProcessLookupError):  # any engine process its shutdown left
            os.killpg(proc.pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def server(tmp_path_factory, sample_fact_texts, model):
    with _serving(tmp_path_factory.mktemp("vllm-server"), model, sample_fact_texts) as served:
        yield served


def _ask(served: Served, question: str, **extra):
    try:
        return served.client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": question}], max_tokens=40, temperature=0,
            **extra)
    except openai.APIConnectionError as error:  # the server went away: say why, from its own output
        served.exited.wait(60)  # all of it, when it is exiting
        raise AssertionError("the server closed the connection; its output ends with:\n"
                             + "".join(served.output)[-6000:]) from error


def test_vllm_answers_write_only_stored_facts_and_stream_the_same_text(server, sample_fact_ids):
    with ThreadPoolExecutor(4) as pool:  # concurrent requests, each its own answer
        questions = list(QUESTIONS) * 2
        replies = list(pool.map(lambda q: _ask(server, q), questions))
    for question, reply in zip(questions, replies):
        facts = reply.model_extra["facts"]
        assert facts and QUESTIONS[question] in facts[0]["text"], (question, facts)
        assert all(f["stored"] and tuple(f["token_ids"]) in sample_fact_ids for f in facts if f["complete"])
    # alone, so that both run in a batch of one (a batch's arithmetic may differ)
    plain = _ask(server, "What is the capital of Germany?")
    chunks = list(_ask(server, "What is the capital of Germany?", stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].model_extra["facts"] == plain.model_extra["facts"]


def test_vllm_server_refuses_an_unknown_index_and_serves_the_next_request(server):
    with pytest.raises(openai.NotFoundError, match="served: \\['sample'\\]"):
        _ask(server, "Hi", extra_body={"refactx": {"index": "nosuch"}})
    free = _ask(server, "What is the capital of Germany?", extra_body={"refactx": {"index": None}})
    assert free.choices[0].message.content and free.model_extra["facts"] == []


# The worker's side, in the vLLM environment: its processor built from the served directory's
# config as vLLM builds it, a refused slot (may only end) masked, and the facts of a row read
# by the server's reader whichever end id ends it.
_WORKER = """
import json, sys
from types import SimpleNamespace
import numpy as np, torch
from refactx_index.qa.ask import read_facts
from refactx_index.engines.vllm import RefactxLogitsProcessor
from refactx_index.vocab import open_model_vocabulary
model, index, row = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
config = SimpleNamespace(additional_config={"refactx": {"indexes": {"sample": index}}},
                         model_config=SimpleNamespace(tokenizer=model, model=model))
proc = RefactxLogitsProcessor(config, torch.device("cpu"), False)
proc.constraint.refuse(0)
logits = torch.zeros(1, proc.constraint.vocab_size)
proc.apply(logits)
matcher = proc.constraint.matchers["sample"].matcher
ends = open_model_vocabulary(model).eos_ids
facts = {end: [f.text for f in read_facts(matcher, open_model_vocabulary(model), proc.constraint.indexes["sample"],
                                          row["prompt"] + row["output"] + [end], len(row["prompt"]))] for end in ends}
print(json.dumps({"allowed": torch.isfinite(logits[0]).nonzero().flatten().tolist(), "ends": list(ends),
                  "facts": [facts[end] for end in ends]}))
"""


def test_a_row_ends_on_either_end_id_in_the_worker_s_mask_and_in_the_reported_facts(server, model):
    from refactx_index.vocab import open_model_vocabulary

    vocabulary = open_model_vocabulary(model)  # the server's
    answer = vocabulary.tokenizer().token_to_id("Answer")
    assert vocabulary.eos_ids == (2, answer)
    assert any(f"end ids [2, {answer}]" in line for line in server.output), "".join(server.output)[-2000:]
    reply = _ask(server, "What is the capital of Germany?")
    content, facts = reply.choices[0].message.content, reply.model_extra["facts"]
    # the model writes its facts, then "Answer": the row ends there, and the end id is no text
    assert reply.choices[0].finish_reason == "stop" and "Answer" not in content, content
    assert facts and all(f["stored"] and f["complete"] for f in facts), facts
    assert content.rstrip().endswith(facts[-1]["text"]), (content, facts)
    tokens = vocabulary.encode([content])[0]
    row = {"prompt": [1, 2], "output": tokens}
    worker = subprocess.run([str(VLLM_PYTHON), "-c", _WORKER, str(model), str(server.index_file), json.dumps(row)],
                            capture_output=True, text=True, timeout=300, cwd=ROOT,
                            env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))})
    assert worker.returncode == 0, worker.stderr[-3000:]
    seen = json.loads(worker.stdout.strip().splitlines()[-1])
    assert seen["ends"] == [2, answer] and seen["allowed"] == [2, answer]  # a dead end may end on either
    ended_on_eos, ended_on_answer = seen["facts"]
    assert ended_on_eos == ended_on_answer == [f["text"] for f in facts]


# ---------------------------------------------------------------------- constrained beams
# prompts on which tests/runtime/test_engine_vllm.py's 20 show vLLM's float32 beams and
# transformers' constrained beam search writing the same facts
BEAM_PROMPTS = ["Facts about Germany.\nFact:", "Facts about France.\nFact:"]
BEAM_TOKENS = 32


@pytest.fixture(scope="module")
def beam_server(tmp_path_factory, sample_fact_texts, model):
    """The same server in float32 (vLLM's CPU engine runs a float32 model in 16 bits by
    default): the arithmetic transformers' beams are compared in."""
    with _serving(tmp_path_factory.mktemp("vllm-beams"), model, sample_fact_texts, "--dtype", "float32") as served:
        yield served


def _complete(served: Served, prompt: str, **extra):
    try:
        return served.client.completions.create(model="smollm2", prompt=prompt, max_tokens=BEAM_TOKENS,
                                                temperature=0, **extra)
    except openai.APIConnectionError as error:
        served.exited.wait(60)
        raise AssertionError("the server closed the connection; its output ends with:\n"
                             + "".join(served.output)[-6000:]) from error


def test_beams_through_the_server_write_the_facts_of_transformers_constrained_beams(beam_server, model,
                                                                                     sample_fact_ids):
    import torch
    from transformers import LogitsProcessorList

    from refactx_index.engines.core import FactConstraint
    from refactx_index.engines.transformers import RefactxLogitsProcessor
    from refactx_index.qa.ask import read_facts
    from refactx_index.qa.models import load_model
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.vocab import open_model_vocabulary

    vocabulary = open_model_vocabulary(model)  # the served directory's: both end ids
    eos = list(vocabulary.eos_ids)
    index = MemoryTreeIndex.load(beam_server.index_file)
    reader = FactConstraint.for_vocabulary({"sample": index}, vocabulary).matchers["sample"].matcher
    loaded = load_model("smollm2")
    with ThreadPoolExecutor(2) as pool:  # both at once: their one-token requests share the engine
        replies = list(pool.map(lambda p: _complete(beam_server, p, extra_body={"refactx": {"beams": 3}}),
                                BEAM_PROMPTS))
    for prompt, reply in zip(BEAM_PROMPTS, replies):
        facts = reply.model_extra["facts"]
        assert facts and all(f["stored"] and tuple(f["token_ids"]) in sample_fact_ids
                             for f in facts if f["complete"]), facts
        assert reply.usage.completion_tokens <= BEAM_TOKENS
        ids = torch.tensor([vocabulary.encode([prompt])[0]])
        with torch.inference_mode():
            row = loaded.model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=3, do_sample=False,
                                        max_new_tokens=BEAM_TOKENS, eos_token_id=eos, pad_token_id=eos[0],
                                        logits_processor=LogitsProcessorList(
                                            [RefactxLogitsProcessor(index, loaded.tokenizer, eos_token_id=eos)]))
        written = row[0, ids.shape[1]:].tolist()
        expected = read_facts(reader, vocabulary, index, ids[0].tolist() + written, ids.shape[1])
        assert [f["token_ids"] for f in facts] == [list(f.token_ids) for f in expected], (prompt, facts, expected)


@pytest.mark.parametrize("options, message", [
    ({"beams": 0}, "integer >= 1"), ({"beams": "3"}, "integer >= 1"), ({"beams": True}, "integer >= 1"),
    ({"beams": 2.5}, "integer >= 1"), ({"beams": 99}, "must be 1..6"),
    ({"beams": 3, "index": None}, "needs an index"), ({"beams": 3, "grounded": True}, "grounded"),
])
def test_bad_beams_are_a_clear_400(beam_server, options, message):
    with pytest.raises(openai.BadRequestError, match=message):
        _complete(beam_server, BEAM_PROMPTS[0], extra_body={"refactx": options})


def test_beams_refuse_sampling_and_streaming(beam_server):
    with pytest.raises(openai.BadRequestError, match="temperature must be 0"):
        beam_server.client.completions.create(model="smollm2", prompt=BEAM_PROMPTS[0], max_tokens=4,
                                              temperature=0.7, extra_body={"refactx": {"beams": 3}})
    with pytest.raises(openai.BadRequestError, match="stream must be false"):
        beam_server.client.completions.create(model="smollm2", prompt=BEAM_PROMPTS[0], max_tokens=4, temperature=0,
                                              stream=True, extra_body={"refactx": {"beams": 3}})
