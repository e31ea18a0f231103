"""The fact server under bad requests, live: uvicorn on loopback ports, the real
SmolLM2-135M-Instruct, an index of the shared sample's facts. One engine serves several apps
(each with its own settings: limits, an API key, a tiny token limit for the fuzz test); every
refusal is checked for its status and body shape, and the next good request must succeed."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

pytestmark = [pytest.mark.slow]

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")

from ..live_server import sample_engine, serving  # noqa: E402

QUESTION = "What is the capital of Germany?"


@pytest.fixture(scope="module")
def engine(sample_fact_texts):
    yield from sample_engine(sample_fact_texts)


@pytest.fixture(scope="module")
def url(engine):
    from refactx_index.server.app import ServerSettings

    settings = ServerSettings(default_index="sample", max_new_tokens=64, max_prompt_tokens=2048,
                              max_concurrent=20)
    with serving(engine, settings) as (url, _app):
        yield url


def post(url: str, path: str, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
    return httpx.post(url + path, content=content, headers=headers, timeout=300, **kwargs)


def chat(question: str = QUESTION, **extra) -> dict:
    return {"model": "smollm2", "messages": [{"role": "user", "content": question}], "max_tokens": 48,
            "temperature": 0, **extra}


def refused(r: httpx.Response, status: int, kind: str | None = None, says: str | None = None) -> dict:
    """``r`` has ``status`` and the one error shape; returns its error object."""
    assert r.status_code == status, (r.status_code, r.text[:500])
    body = r.json()
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "code"}, body
    assert body["error"]["code"] == status
    if kind is not None:
        assert body["error"]["type"] == kind, body
    if says is not None:
        assert says in body["error"]["message"], body
    return body["error"]


def answered(url: str, **extra) -> dict:
    r = post(url, "/v1/chat/completions", chat(**extra))
    assert r.status_code == 200, r.text
    return r.json()


# ---------------------------------------------------------------------- 1: bounded prompts
def test_a_huge_prompt_is_refused_before_prefill_while_another_client_is_answered(url, engine):
    huge = chat("x" * 1_000_000)  # ~250k tokens: a body under the 1 MiB limit
    batches = engine.batches
    with ThreadPoolExecutor(2) as pool:
        big = pool.submit(post, url, "/v1/chat/completions", huge)
        good = pool.submit(answered, url)
        error = refused(big.result(), 413, "prompt_too_long", "the limit is 2048")
        assert good.result()["choices"][0]["message"]["content"]
    assert "--max-prompt-tokens" in error["message"]
    assert engine.batches - batches == 1  # the huge request never reached the engine
    assert answered(url)["facts"]


def test_the_default_prompt_limit_is_the_context_less_the_longest_answer(engine):
    from refactx_index.server.app import ServerSettings, prompt_token_limit

    assert engine.context_length == 8192  # SmolLM2's max_position_embeddings
    assert prompt_token_limit(engine, ServerSettings(max_new_tokens=256)) == 8192 - 256
    assert prompt_token_limit(engine, ServerSettings(max_prompt_tokens=100)) == 100


def test_a_row_past_its_deadline_stops_at_its_next_token(engine):
    from refactx_index.server.engine import Job, encode_chat

    ids = encode_chat(engine.tokenizer, [{"role": "user", "content": "Tell me a long story."}])
    late = Job(prompt_ids=ids, index=None, max_new_tokens=64, deadline=time.monotonic())
    on_time = Job(prompt_ids=ids, index=None, max_new_tokens=4)

    async def both():
        return await asyncio.gather(engine.run(late), engine.run(on_time))

    asyncio.run(both())
    assert late.finish_reason == "timeout" and len(late.output_ids) <= 1
    assert on_time.finish_reason == "length" and len(on_time.output_ids) == 4


# ---------------------------------------------------------------------- 2: per-row sampling
def test_a_greedy_request_batched_with_a_hot_one_keeps_its_answer_byte_for_byte(url, engine):
    alone = answered(url)["choices"][0]["message"]["content"]
    held: list = []
    submit = engine.submit
    both_held = threading.Event()

    def hold(job):  # the two requests enter the engine together: one batch
        held.append(job)
        if len(held) == 2:
            with engine._cond:
                for j in held:
                    submit(j)
            both_held.set()

    engine.submit = hold
    batches = engine.batches
    try:
        with ThreadPoolExecutor(2) as pool:
            greedy = pool.submit(answered, url)
            hot = pool.submit(answered, url, temperature=5.0, seed=7, max_tokens=8)
            greedy, hot = greedy.result(), hot.result()
    finally:
        del engine.submit
    assert both_held.is_set() and engine.batches - batches == 1
    assert greedy["choices"][0]["message"]["content"] == alone
    assert not alone.startswith(hot["choices"][0]["message"]["content"])  # it did sample


def test_a_seed_repeats_a_sampled_answer(url):
    first = answered(url, temperature=1.5, top_p=0.9, seed=11, max_tokens=8)["choices"][0]["message"]["content"]
    again = answered(url, temperature=1.5, top_p=0.9, seed=11, max_tokens=8)["choices"][0]["message"]["content"]
    assert first == again


@pytest.mark.parametrize("raw, says", [
    ('"temperature": NaN', "finite"), ('"temperature": Infinity', "finite"), ('"temperature": -1', ">= 0"),
    ('"temperature": "hot"', "finite"), ('"top_p": 0', "top_p"), ('"top_p": 1.5', "top_p"),
    ('"seed": 1.5', "integer"), ('"n": 2', "n must be 1"), ('"max_tokens": 0', "max_tokens"),
    ('"max_tokens": true', "integer"),
])
def test_sampling_values_out_of_range_are_refused(url, raw, says):
    body = '{"model": "smollm2", "messages": [{"role": "user", "content": "Hi"}], ' + raw + "}"
    error = refused(post(url, "/v1/chat/completions", body), 422 if "max_tokens\": 0" in raw else 400)
    assert says in error["message"], error


# ---------------------------------------------------------------------- 3: exact token counts
@pytest.mark.parametrize("n", [1, 2, 5, 8])
def test_max_tokens_n_gives_n_tokens_and_finish_reason_length(url, engine, n):
    r = post(url, "/v1/completions", {"model": "smollm2", "prompt": "Once upon a time", "max_tokens": n,
                                      "temperature": 0, "refactx": {"index": None}})
    assert r.status_code == 200, r.text
    reply = r.json()
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "length" and reply["usage"]["completion_tokens"] == n
    assert choice["text"]


def test_streamed_chat_counts_every_token_it_sends(url):
    lines = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=chat(max_tokens=5, stream=True), timeout=300) as r:
        for line in r.iter_lines():
            if line.startswith("data: {"):
                lines.append(json.loads(line[6:]))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in lines)
    last = lines[-1]
    assert last["choices"][0]["finish_reason"] == "length" and last["usage"]["completion_tokens"] == 5
    assert text == answered(url, max_tokens=5)["choices"][0]["message"]["content"]


def test_an_answer_that_ends_says_stop_and_a_cut_fact_is_read_from_the_tokens_sent(url, engine):
    from refactx_index.engines.core import index_prompt
    from refactx_index.server.engine import Job, encode_chat

    whole = answered(url, max_tokens=64)
    assert whole["choices"][0]["finish_reason"] == "stop" and whole["usage"]["completion_tokens"] < 64
    fact = whole["facts"][0]
    assert fact["complete"] and fact["stored"]
    # where that fact ends among the answer's tokens (the same prompt, greedy, in the engine)
    ids = encode_chat(engine.tokenizer, index_prompt(engine.indexes["sample"]).messages(QUESTION))
    job = asyncio.run(engine.run(Job(prompt_ids=ids, index="sample", max_new_tokens=64)))
    assert len(job.output_ids) == whole["usage"]["completion_tokens"]
    ends = next(i + len(fact["token_ids"]) for i in range(len(job.output_ids))
                if job.output_ids[i:i + len(fact["token_ids"])] == fact["token_ids"])
    cut = answered(url, max_tokens=ends - 2)  # two tokens before the fact ends
    assert cut["choices"][0]["finish_reason"] == "length" and cut["usage"]["completion_tokens"] == ends - 2
    last = cut["facts"][-1]
    assert not last["complete"] and not last["stored"]
    assert last["token_ids"] == fact["token_ids"][:-2]  # exactly the tokens sent, the last one too
    content = cut["choices"][0]["message"]["content"]
    assert content.rstrip().endswith(last["text"].strip()) and whole["choices"][0]["message"]["content"].startswith(content)


# ---------------------------------------------------------------------- 4: malformed requests
@pytest.mark.parametrize("body, status, says", [
    ({"messages": [{"role": "user", "content": "Hi"}], "refactx": {"index": ["sample"]}}, 400, "refactx.index"),
    ({"messages": [{"role": "user", "content": "Hi"}], "refactx": {"index": {"a": 1}}}, 400, "refactx.index"),
    ({"messages": [{"role": "system", "content": "Be brief."}, {"content": "Hi"}]}, 400, "role"),
    ({"messages": [{"role": "user", "content": "x\ud800y"}]}, 400, "surrogate"),
    ({"messages": [{"role": "user", "content": 5}]}, 400, "content"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]}, 400, "text parts"),
    ({"messages": "Hi"}, 400, "messages"),
    ({"messages": [{"role": "user", "content": "Hi"}], "stream": "yes"}, 400, "stream"),
])
def test_malformed_chat_requests_get_a_4xx_in_the_error_shape(url, body, status, says):
    refused(post(url, "/v1/chat/completions", json.dumps({"model": "smollm2", "max_tokens": 4, **body})), status,
            says=says)
    assert answered(url, max_tokens=4)["choices"][0]["message"]["content"]


def test_bodies_the_json_reader_cannot_take_get_400(url):
    refused(post(url, "/v1/chat/completions", "[" * 100_000), 400, "invalid_json", "nested")
    refused(post(url, "/v1/chat/completions", b"{not json"), 400, "invalid_json", "not JSON")
    refused(post(url, "/v1/chat/completions", "[1]"), 400, "invalid_request", "object")
    refused(post(url, "/v1/completions", {"model": "smollm2", "prompt": ["a", "b"]}), 400, says="prompt")
    refused(post(url, "/v1/completions", {"model": "smollm2", "prompt": ""}), 400, says="prompt")
    assert answered(url, max_tokens=4)["choices"][0]["message"]["content"]


def test_the_framework_s_own_errors_use_the_error_shape(url):
    refused(httpx.get(url + "/v1/indexes/sample/facts", params={"limit": "many"}), 422, "invalid_request", "limit")
    refused(httpx.get(url + "/v1/indexes/sample/relations"), 422, "invalid_request", "entity")
    refused(httpx.get(url + "/v1/nowhere"), 404, "not_found")
    refused(httpx.get(url + "/v1/chat/completions"), 405, "method_not_allowed")


def _fuzzed_requests():
    from hypothesis import strategies as st

    scalars = st.one_of(st.none(), st.booleans(), st.integers(-3, 10), st.floats(allow_nan=True),
                        st.text(max_size=12))
    values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                           st.dictionaries(st.text(max_size=6), inner, max_size=3)),
                          max_leaves=8)
    message = st.fixed_dictionaries({}, optional={"role": st.one_of(st.sampled_from(["user", "system", "assistant",
                                                                                      "tool"]), values),
                                                  "content": st.one_of(st.text(max_size=20), values)})
    fields = {"model": st.one_of(st.just("smollm2"), values), "messages": st.one_of(st.lists(message, max_size=3),
                                                                                     values),
              "prompt": st.one_of(st.text(max_size=20), values), "max_tokens": st.one_of(st.integers(-2, 3), values),
              "temperature": values, "top_p": values, "seed": values, "n": values, "stream": values,
              "stop": values, "logprobs": values, "refactx": st.one_of(
                  st.fixed_dictionaries({}, optional={"index": st.one_of(st.sampled_from(["sample", "x"]), values),
                                                      "prompt": values}), values),
              "user": values, "extra": values}
    return st.tuples(st.booleans(), st.fixed_dictionaries({}, optional=fields))


def test_fuzzed_requests_never_get_a_500_and_the_next_good_request_succeeds(engine):
    """Over the request schema (hypothesis): any body gets 200 or a 4xx in the error shape.
    A server of its own whose longest answer is 3 tokens keeps the valid draws cheap."""
    from hypothesis import HealthCheck, given, settings

    from refactx_index.server.app import ServerSettings

    with serving(engine, ServerSettings(default_index="sample", max_new_tokens=3)) as (fuzz_url, _app), \
            httpx.Client(timeout=300) as http:
        @settings(max_examples=60, deadline=None, derandomize=True,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
        @given(_fuzzed_requests())
        def check(drawn):
            is_chat, body = drawn
            path = "/v1/chat/completions" if is_chat else "/v1/completions"
            r = http.post(fuzz_url + path, content=json.dumps(body), headers={"content-type": "application/json"})
            assert r.status_code == 200 or 400 <= r.status_code < 500, (body, r.status_code, r.text[:300])
            if r.status_code != 200:
                assert set(r.json()) == {"error"}, r.text
            elif body.get("stream") is not True:
                assert r.json()["usage"]["completion_tokens"] <= 3

        check()
        good = http.post(fuzz_url + "/v1/chat/completions", json=chat(max_tokens=3))
        assert good.status_code == 200 and good.json()["choices"][0]["message"]["content"]


# ---------------------------------------------------------------------- 6: refused values
def test_an_unknown_model_gets_404_naming_the_served_one(url):
    refused(post(url, "/v1/chat/completions", {**chat(), "model": "gpt-4o"}), 404, "model_not_found", "'smollm2'")
    assert answered(url, max_tokens=4)["choices"][0]["message"]["content"]


@pytest.mark.parametrize("messages, says", [
    ([{"role": "tool", "content": "x"}], "role"),
    ([{"role": "user", "content": QUESTION}, {"role": "assistant", "content": "Berlin."}], "last message"),
    ([{"role": "user", "content": "   "}], "empty"),
    ([{"role": "user", "content": "Hi", "tool_calls": []}], "unsupported keys"),
])
def test_roles_and_questions_are_checked(url, messages, says):
    refused(post(url, "/v1/chat/completions", {"model": "smollm2", "messages": messages}), 400, says=says)


def test_earlier_turns_are_kept_in_order(url, engine):
    from refactx_index.prompting.prompt import Prompt
    from refactx_index.server.engine import encode_chat

    turns = [{"role": "user", "content": "Which continent is Japan in?"}, {"role": "assistant", "content": "Asia."},
             {"role": "user", "content": QUESTION}]
    reply = post(url, "/v1/chat/completions", {"model": "smollm2", "messages": turns, "max_tokens": 1}).json()
    expected = encode_chat(engine.tokenizer, Prompt().messages(QUESTION)[:-1] + turns)
    assert reply["usage"]["prompt_tokens"] == len(expected)


@pytest.mark.parametrize("field, value", [("stop", ["\n"]), ("logprobs", True), ("tools", [{"type": "function"}]),
                                          ("presence_penalty", 0.5), ("nonsense", 1)])
def test_fields_the_server_cannot_honour_are_refused(url, field, value):
    refused(post(url, "/v1/chat/completions", {**chat(max_tokens=4), field: value}), 400, says=repr(field))


def test_neutral_and_ignored_fields_are_taken(url):
    reply = answered(url, max_tokens=4, stop=None, n=1, logprobs=False, user="me", stream_options=None)
    assert reply["usage"]["completion_tokens"] <= 4


# ---------------------------------------------------------------------- 7: bounded exploration
def test_exploration_is_bounded_by_offset_limit_and_time(url, engine):
    from refactx_index.server.app import ServerSettings

    refused(httpx.get(url + "/v1/indexes/sample/facts", params={"offset": 10 ** 9, "limit": 1000}), 422,
            says="offset must be 0..10000")
    refused(httpx.get(url + "/v1/indexes/sample/entities", params={"limit": 5000}), 422, says="limit")
    with serving(engine, ServerSettings(default_index="sample", explore_timeout_s=0)) as (hurried, _app):
        refused(httpx.get(hurried + "/v1/indexes/sample/entities", params={"q": ""}), 504, "timeout")
    page = httpx.get(url + "/v1/indexes/sample/facts", params={"limit": 3}).json()
    assert len(page["data"]) == 3


def test_explorations_count_in_the_in_flight_limit(engine, monkeypatch):
    from refactx_index.tree import explore
    from refactx_index.server.app import ServerSettings

    held, release = threading.Event(), threading.Event()
    page = explore.facts_page

    def held_page(*args, **kwargs):  # a walk that lasts until the test lets it go
        held.set()
        assert release.wait(60)
        return page(*args, **kwargs)

    monkeypatch.setattr(explore, "facts_page", held_page)
    try:
        with serving(engine, ServerSettings(default_index="sample", max_concurrent=1)) as (one, _app):
            with ThreadPoolExecutor(1) as pool:
                walk = pool.submit(httpx.get, one + "/v1/indexes/sample/facts", params={"limit": 1}, timeout=60)
                assert held.wait(60)
                refused(post(one, "/v1/chat/completions", chat(max_tokens=2)), 429, "too_many_requests")
                release.set()
                assert walk.result().status_code == 200
            assert post(one, "/v1/chat/completions", chat(max_tokens=2)).status_code == 200
    finally:
        release.set()


# ---------------------------------------------------------------------- 8: disconnects
def test_a_non_streaming_client_that_leaves_stops_its_row(url, engine):
    started, finished = threading.Event(), threading.Event()
    jobs: list = []
    submit = engine.submit

    def watch(job):
        jobs.append(job)
        job.on_token = lambda _tok: started.set()
        done = job.on_done
        job.on_done = lambda j: (done(j), finished.set())
        submit(job)

    engine.submit = watch
    body = json.dumps(chat("Tell me a long story about Germany.", max_tokens=64)).encode()
    try:
        with socket.create_connection(("127.0.0.1", int(url.rsplit(":", 1)[1]))) as raw:
            raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b"Content-Type: application/json\r\nContent-Length: " + str(len(body)).encode()
                        + b"\r\n\r\n" + body)
            assert started.wait(120)  # the first token is written: leave
    finally:
        del engine.submit
    assert finished.wait(120)
    (job,) = jobs
    assert job.finish_reason == "cancelled" and len(job.output_ids) < 64
    assert answered(url, max_tokens=4)["choices"][0]["message"]["content"]


# ---------------------------------------------------------------------- 9: access
def test_an_api_key_a_json_body_and_an_allowed_host_are_required(engine):
    from refactx_index.server.app import LOOPBACK_HOSTS, ServerSettings

    settings = ServerSettings(default_index="sample", max_new_tokens=8, api_key="s3cret", allowed_hosts=LOOPBACK_HOSTS)
    key = {"authorization": "Bearer s3cret"}
    with serving(engine, settings) as (locked, _app):
        r = refused(post(locked, "/v1/chat/completions", chat(max_tokens=2)), 401, "unauthorized")
        assert "s3cret" not in json.dumps(r)
        refused(post(locked, "/v1/chat/completions", chat(max_tokens=2), headers={"authorization": "Bearer no"}), 401)
        refused(httpx.get(locked + "/v1/models"), 401)
        refused(httpx.get(locked + "/metrics"), 401)
        assert httpx.get(locked + "/health").status_code == 200  # probes stay open
        refused(post(locked, "/v1/chat/completions", json.dumps(chat(max_tokens=2)),
                     headers={**key, "content-type": "text/plain"}), 415, "unsupported_media_type")
        refused(post(locked, "/v1/chat/completions", chat(max_tokens=2), headers={**key, "host": "evil.example"}),
                400, "host_not_allowed")
        client = openai.OpenAI(base_url=locked + "/v1", api_key="s3cret", max_retries=0, timeout=300)
        reply = client.chat.completions.create(model="smollm2", messages=[{"role": "user", "content": QUESTION}],
                                               max_tokens=4, temperature=0)
        assert reply.choices[0].message.content
        assert post(locked, "/v1/chat/completions", chat(max_tokens=2), headers={**key, "host": "localhost:9"}
                    ).status_code == 200
