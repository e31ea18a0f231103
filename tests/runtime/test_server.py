"""The fact server, live: uvicorn on a free loopback port, the real SmolLM2-135M-Instruct,
an index of the shared sample's facts, and the real ``openai`` client (plus plain HTTP for
what the client does not send: malformed JSON, oversized bodies)."""

from __future__ import annotations

import json
import re
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.slow]

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

QUESTIONS = {"What is the capital of Germany?": "Germany",
             "Which country is Northern Ireland part of?": "Northern Ireland",
             "Which continent is Japan in?": "Japan",
             "Which countries share a border with France?": "France"}


@pytest.fixture(scope="module")
def server(sample_fact_texts):
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import load_model
    from refactx_index.prompting.paths import PathCaps, PathGraph
    from refactx_index.server.app import ServerSettings, create_app
    from refactx_index.server.backend_transformers import TransformersEngine

    loaded = load_model("smollm2")
    index = MemoryTreeIndex.from_facts(sample_fact_texts, str(loaded.tokenizer_file))
    # beside the facts, a path index (docs/paths.md): Germany's paths of up to 2 hops
    paths, found = PathGraph.from_fact_texts(sample_fact_texts).index(
        ["Germany"], str(loaded.tokenizer_file), PathCaps(max_hops=2, max_fanout=20))
    engine = TransformersEngine(loaded, {"sample": index, "germany-paths": paths}, max_batch=16)
    settings = ServerSettings(default_index="sample", max_new_tokens=64, max_concurrent=20,
                              max_body_bytes=64 << 10)
    app = create_app(engine, settings)
    started = threading.Event()
    app.router.on_startup.append(started.set)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert started.wait(60), "the server did not start"
    yield {"url": f"http://127.0.0.1:{port}", "engine": engine, "settings": settings, "loaded": loaded,
           "paths": {p + " ." for p in found.paths}}
    srv.should_exit = True
    thread.join(30)
    engine.close()


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=server["url"] + "/v1", api_key="none", max_retries=0, timeout=300)


def _ask(client, question: str, **extra):
    return client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": question}],
                                          max_tokens=48, temperature=0, **extra)


def test_a_chat_completion_writes_only_stored_facts(client, sample_fact_ids):
    reply = _ask(client, "What is the capital of Germany?")
    facts = reply.model_extra["facts"]
    assert facts and reply.choices[0].message.content
    assert all(f["stored"] for f in facts if f["complete"])
    assert all(tuple(f["token_ids"]) in sample_fact_ids for f in facts if f["complete"])
    assert any("Germany" in f["text"] for f in facts)


def test_streaming_gives_the_same_text_as_not_streaming(client):
    plain = _ask(client, "Which continent is Japan in?")
    chunks = list(_ask(client, "Which continent is Japan in?", stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain.choices[0].message.content
    assert chunks[-1].model_extra["facts"] == plain.model_extra["facts"]


def test_sixteen_concurrent_clients_each_get_their_own_answer(client, server, sample_fact_ids):
    batches = server["engine"].batches
    questions = list(QUESTIONS) * 4
    with ThreadPoolExecutor(16) as pool:
        replies = list(pool.map(lambda q: _ask(client, q), questions))
    assert server["engine"].batches - batches < len(questions)  # batched, not one by one
    for question, reply in zip(questions, replies):
        facts = reply.model_extra["facts"]
        assert all(tuple(f["token_ids"]) in sample_fact_ids for f in facts if f["complete"]), question
        assert facts and QUESTIONS[question] in facts[0]["text"], (question, facts)


def test_a_path_index_is_served_after_path_with_the_path_prompt(client, server):
    """One engine, two kinds: over the path index a row is constrained after ``Path:`` (not
    ``Fact:``) and writes stored paths only; a chat request gets the path prompt there and
    the fact prompt over the fact index."""
    from refactx_index.prompting.paths import PATH_PROMPT
    from refactx_index.prompting.prompt import Prompt
    from refactx_index.server.engine import encode_chat

    tok = server["loaded"].tokenizer
    question = "What is the capital of Germany?"
    text = tok.apply_chat_template(PATH_PROMPT.messages(question), tokenize=False, add_generation_prompt=True)
    reply = client.completions.create(model="smollm2", prompt=text + "Path:", max_tokens=40, temperature=0,
                                      extra_body={"refactx": {"index": "germany-paths"}})
    paths = reply.model_extra["facts"]
    complete = [f for f in paths if f["complete"]]
    assert complete, reply.choices[0].text  # at least one whole path
    assert all(f["stored"] and f["text"].strip() in server["paths"] for f in complete), paths
    assert reply.choices[0].text.lstrip().startswith(complete[0]["text"].strip())  # verbatim

    for index, prompt in (("germany-paths", PATH_PROMPT), ("sample", Prompt())):
        chat = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": question}],
                                              max_tokens=1, temperature=0, extra_body={"refactx": {"index": index}})
        assert chat.usage.prompt_tokens == len(encode_chat(tok, prompt.messages(question))), index


def test_the_unconstrained_model_is_asked_with_a_null_index(client):
    reply = _ask(client, "What is the capital of Germany?", extra_body={"refactx": {"index": None}})
    assert reply.choices[0].message.content and "facts" in reply.model_extra


def test_a_grounded_answer_is_an_object_of_a_stored_fact_written_or_i_dont_know(client, server):
    for question in QUESTIONS:
        reply = _ask(client, question, extra_body={"refactx": {"grounded": True}})
        text = reply.choices[0].message.content
        opened = [m.end() for m in re.finditer(r"(?m)^Answer:", text)]
        if not opened or reply.choices[0].finish_reason != "stop":  # no answer, or one cut by max_tokens
            continue
        answer = text[opened[-1]:].strip()
        written = [f["text"] for f in reply.model_extra["facts"] if f["stored"] and f["complete"]]
        objects = {t.strip().removesuffix(" .").rsplit("> <", 1)[-1].rstrip(">") for t in written}
        assert answer in {f"{o}." for o in objects} | {"I don't know."}, (text, written)
    for bad, why in (({"grounded": "yes"}, "true or false"), ({"grounded": True, "index": None}, "needs an index")):
        with pytest.raises(openai.BadRequestError, match=why):
            _ask(client, "Hi", extra_body={"refactx": bad})


def test_bad_requests_get_their_status_and_the_next_request_succeeds(client, server):
    url = server["url"]
    with pytest.raises(openai.NotFoundError, match="served: \\['germany-paths', 'sample'\\]"):
        _ask(client, "Hi", extra_body={"refactx": {"index": "nosuch"}})
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=10_000)
    r = httpx.post(url + "/v1/chat/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not JSON" in r.json()["error"]["message"]
    big = json.dumps({"model": "smollm2", "messages": [{"role": "user", "content": "x" * (70 << 10)}]})
    r = httpx.post(url + "/v1/chat/completions", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413
    r = httpx.post(url + "/v1/completions", json={"model": "smollm2", "prompt": ""})
    assert r.status_code == 400
    assert _ask(client, "What is the capital of Germany?").model_extra["facts"]


def test_too_many_requests_in_flight_get_429(client, server):
    settings = server["settings"]
    url = server["url"]
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Tell me about France."}],
            "max_tokens": 48, "stream": True}
    engine = server["engine"]
    held: list = []
    streams = []
    # the requests in flight are held before the engine (deterministic: none may finish and
    # free its place while the test opens the others)
    engine.submit = held.append
    try:
        with httpx.Client(timeout=300) as http:
            for _ in range(settings.max_concurrent):
                cm = http.stream("POST", url + "/v1/chat/completions", json=body)
                response = cm.__enter__()
                streams.append(cm)
                assert response.status_code == 200
            r = httpx.post(url + "/v1/chat/completions", json={**body, "stream": False})
            assert r.status_code == 429
    finally:
        del engine.submit  # the class's again
        for cm in streams:
            cm.__exit__(None, None, None)
        for job in held:  # their clients left: the engine ends them without generating
            job.cancelled = True
            engine.submit(job)
    # the server frees the places of the streams just closed as it notices each disconnect:
    # the next request retries a 429 as a client should
    retrying = client.with_options(max_retries=5)
    assert _ask(retrying, "Which continent is Japan in?").choices[0].message.content


def test_a_client_that_disconnects_mid_stream_stops_its_row(client, server):
    url = server["url"]
    engine = server["engine"]
    body = {"model": "smollm2", "messages": [{"role": "user", "content": "Tell me about Germany."}],
            "max_tokens": 64, "stream": True}
    with httpx.Client(timeout=300) as http:
        with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
            for line in response.iter_lines():
                if line.startswith("data: {"):
                    break  # the first token arrived: leave
    # the next request is served (the engine did not wait for the abandoned row's 64 tokens)
    assert _ask(client, "What is the capital of Germany?").model_extra["facts"]
    metrics = httpx.get(url + "/metrics").text
    assert "refactx_cancelled_total" in metrics and engine.batches >= 1


def test_models_health_ready_and_metrics(server):
    url = server["url"]
    assert httpx.get(url + "/health").json() == {"status": "ok"}
    assert httpx.get(url + "/ready").json()["indexes"] == ["germany-paths", "sample"]
    assert httpx.get(url + "/v1/models").json()["data"][0]["id"] == "smollm2"
    metrics = httpx.get(url + "/metrics").text
    assert "refactx_requests_total" in metrics and "refactx_index_lookups_total" in metrics


def test_exploration_over_http_equals_the_python_api(server, sample_fact_texts):
    import re
    from collections import Counter

    url = server["url"]
    triples = [re.match(r"^<(.*?)> <(.*?)> <(.*)> \.$", t).groups() for t in sample_fact_texts]
    subject = Counter(s for s, _, _ in triples).most_common(1)[0][0]
    got = httpx.get(url + "/v1/indexes/sample/relations", params={"entity": subject}).json()["data"]
    assert {x["label"]: x["facts"] for x in got} == dict(Counter(p for s, p, _ in triples if s == subject))
    relation = got[0]["label"]
    objs = httpx.get(url + "/v1/indexes/sample/objects", params={"entity": subject, "relation": relation}).json()
    assert {x["label"] for x in objs["data"]} == {o for s, p, o in triples if s == subject and p == relation}
    page = httpx.get(url + "/v1/indexes/sample/facts", params={"prefix": f"<{subject}> <", "limit": 5}).json()
    assert len(page["data"]) == 5
    assert httpx.get(url + "/v1/indexes/nosuch/relations", params={"entity": "x"}).status_code == 404


def test_refactx_ask_answers_from_an_index_file(sample_fact_texts, sample_fact_ids, tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import model_directory

    path = tmp_path / "sample.rfx"
    MemoryTreeIndex.from_facts(sample_fact_texts, str(model_directory("smollm2") / "tokenizer.json")).save(path)
    refactx = str(Path(sys.executable).with_name("refactx"))
    run = subprocess.run([refactx, "ask", "--index-file", str(path), "--beams", "1", "--max-new-tokens", "40",
                          "--json", "What is the capital of Germany?"], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["facts"] and all(tuple(f["token_ids"]) in sample_fact_ids for f in answer["facts"] if f["complete"])
    missing = subprocess.run([refactx, "ask", "--index-file", str(tmp_path / "nope.rfx"), "Hi"],
                             capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1, missing.stderr
