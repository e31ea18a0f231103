"""The fact server on vLLM: ``refactx serve --engine vllm`` from the vLLM virtual environment
(``.venv-vllm``), the real SmolLM2-135M-Instruct, an index file of the shared sample's facts,
and the real ``openai`` client over loopback."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple

import pytest

from .test_engine_vllm import VLLM_PYTHON

pytestmark = [pytest.mark.slow]

openai = pytest.importorskip("openai")
QUESTIONS = {"What is the capital of Germany?": "Germany", "Which continent is Japan in?": "Japan"}


class Served(NamedTuple):
    """The openai client of a running server, what the server has written (stdout and stderr:
    vLLM logs to stdout), and an event set once its output is closed (the server has exited)."""

    client: Any
    output: list[str]
    exited: threading.Event


@pytest.fixture(scope="module")
def server(tmp_path_factory, sample_fact_texts):
    if not VLLM_PYTHON.exists():
        pytest.skip(f"{VLLM_PYTHON} is absent: vLLM could not be installed on this machine")
    from refactx_index.memory import MemoryTreeIndex
    from refactx_index.models import model_directory

    work = tmp_path_factory.mktemp("vllm-server")
    model = model_directory("smollm2")
    index_file = work / "sample.rfx"
    MemoryTreeIndex.from_facts(sample_fact_texts, str(model / "tokenizer.json")).save(index_file)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV"))}
    env["VLLM_CPU_KVCACHE_SPACE"] = "2"
    proc = subprocess.Popen(
        [str(VLLM_PYTHON), "-m", "refactx_index.cli", "serve", "--engine", "vllm", "--model", str(model),
         "--model-name", "smollm2", "--index-file", f"sample={index_file}", "--port", str(port),
         "--gpu-memory-utilization", "0.25", "--max-model-len", "2048", "--enforce-eager", "--max-batch", "8"],
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
                                   timeout=300), lines, exited)
    finally:
        proc.terminate()
        proc.wait(60)
        with contextlib.suppress(ProcessLookupError):  # any engine process its shutdown left
            os.killpg(proc.pid, signal.SIGKILL)


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
