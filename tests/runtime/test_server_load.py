"""The fact server under heavy work, live: uvicorn on loopback ports (configured as ``refactx
serve`` configures it, server/connections.py), the real SmolLM2-135M-Instruct, an index of
the shared sample's facts. Explorations run on their own bounded pool, so they never hold a
probe or a chat; a walk stops inside itself at its budget; the bytes of a body and of a
prompt are checked before any decoding or tokenizing; idle and slow connections are closed."""

from __future__ import annotations

import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed

import pytest

pytestmark = [pytest.mark.slow]

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

    settings = ServerSettings(default_index="sample", max_new_tokens=16, max_prompt_tokens=2048)
    with serving(engine, settings, header_timeout_s=1.0) as (url, _app):
        yield url


def chat(question: str = QUESTION, **extra) -> dict:
    return {"model": "smollm2", "messages": [{"role": "user", "content": question}], "max_tokens": 4,
            "temperature": 0, **extra}


def post(url: str, body, **kwargs) -> httpx.Response:
    content = body if isinstance(body, (bytes, str)) else json.dumps(body)
    headers = {"content-type": "application/json", **kwargs.pop("headers", {})}
    return httpx.post(url + "/v1/chat/completions", content=content, headers=headers, timeout=300, **kwargs)


def refused(r: httpx.Response, status: int, kind: str | None = None, says: str | None = None) -> dict:
    assert r.status_code == status, (r.status_code, r.text[:500])
    error = r.json()["error"]
    assert error["code"] == status
    if kind is not None:
        assert error["type"] == kind, error
    if says is not None:
        assert says in error["message"], error
    return error


def pool_metrics(url: str) -> dict[str, int]:
    lines = httpx.get(url + "/metrics", timeout=30).text.splitlines()
    return {k: int(v) for k, v in (line.split(" ") for line in lines if line.startswith("refactx_pool_"))}


# ---------------------------------------------------------------------- executors
def test_sixteen_heavy_explorations_never_hold_ready_or_a_chat(engine, monkeypatch):
    """16 explorations of 800 facts past the 3,000th: the pool admits 2 running + 6 waiting and
    refuses the other 8 at once (503, Retry-After); while the 2 walks are held, /health, /ready
    and a chat are answered; each held walk, let go once its budget is spent, stops at its
    first step (504) and the pool is empty when the last 504 is received."""
    from refactx_index.server.app import ServerSettings
    from refactx_index.tree import explore

    walk, release, started = explore.facts_page, threading.Event(), threading.Semaphore(0)

    def held_walk(*args, budget, **kwargs):
        started.release()
        assert release.wait(120)
        never = threading.Event()
        while budget.clock() < budget.ends:  # a walk let go early waits out the rest of its budget
            never.wait(budget.ends - budget.clock())
        return walk(*args, budget=budget, **kwargs)  # the real walk, which checks its budget

    monkeypatch.setattr(explore, "facts_page", held_walk)
    settings = ServerSettings(default_index="sample", max_new_tokens=8, explore_timeout_s=0.5,
                              explore_workers=2, explore_max_waiting=6)
    heavy = {"prefix": "", "offset": 3000, "limit": 800}
    try:
        with serving(engine, settings) as (url, _app), ThreadPoolExecutor(16) as clients:
            walks = [clients.submit(httpx.get, url + "/v1/indexes/sample/facts", params=heavy, timeout=120)
                     for _ in range(16)]
            for _ in range(2):
                assert started.acquire(timeout=60)  # both exploration threads hold a walk
            answered = as_completed(walks)
            first = {next(answered) for _ in range(8)}  # the 8 the pool does not admit
            for w in first:
                refused(w.result(), 503, "server_busy")
                assert w.result().headers["retry-after"] == "1"
            assert httpx.get(url + "/health", timeout=30).status_code == 200
            ready = httpx.get(url + "/ready", timeout=30)
            assert ready.status_code == 200 and ready.json()["status"] == "ready"
            reply = post(url, chat())
            assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
            held = pool_metrics(url)
            assert held['refactx_pool_admitted{pool="explore"}'] == 8
            assert held['refactx_pool_running{pool="explore"}'] == 2
            rest = [w for w in walks if w not in first]
            assert len(rest) == 8 and not any(w.done() for w in rest)  # still held
            release.set()
            rest = [w.result() for w in rest]
            for r in rest:
                refused(r, 504, "timeout", "narrow it")
            after = pool_metrics(url)
            assert after['refactx_pool_admitted{pool="explore"}'] == 0
            assert after['refactx_pool_running{pool="explore"}'] == 0
            assert after['refactx_pool_refused_total{pool="explore"}'] == 8
            monkeypatch.setattr(explore, "facts_page", walk)
            page = httpx.get(url + "/v1/indexes/sample/facts", params={"limit": 2}, timeout=60)
            assert page.status_code == 200 and len(page.json()["data"]) == 2
    finally:
        release.set()


def test_a_spent_budget_stops_a_real_walk_and_frees_its_thread(url, engine):
    from refactx_index.server.app import ServerSettings

    with serving(engine, ServerSettings(default_index="sample", explore_timeout_s=0)) as (hurried, _app):
        r = httpx.get(hurried + "/v1/indexes/sample/facts", params={"offset": 3000, "limit": 800}, timeout=60)
        refused(r, 504, "timeout", "took over 0 s")
        assert pool_metrics(hurried)['refactx_pool_running{pool="explore"}'] == 0


# ---------------------------------------------------------------------- bounded reads
def test_a_prompt_too_long_for_any_tokens_is_refused_before_it_is_tokenized(url):
    before = pool_metrics(url)['refactx_pool_done_total{pool="encode"}']
    error = refused(post(url, chat("x" * 1_000_000)), 413, "prompt_too_long", "bytes of text")
    assert "the limit is 2048 tokens" in error["message"]
    assert pool_metrics(url)['refactx_pool_done_total{pool="encode"}'] == before  # never encoded
    assert post(url, chat()).status_code == 200
    assert pool_metrics(url)['refactx_pool_done_total{pool="encode"}'] == before + 1


# ---------------------------------------------------------------------- requests
def test_a_query_that_is_not_utf8_is_refused_and_one_that_is_reads_its_labels(url):
    refused(httpx.get(url + "/v1/indexes/sample/entities?q=%CE", timeout=60), 400, "invalid_request", "UTF-8")
    refused(httpx.get(url + "/v1/indexes/sample/entities?q=%FF", timeout=60), 400, "invalid_request", "UTF-8")
    found = httpx.get(url + "/v1/indexes/sample/entities?q=%CE%A0%20(", timeout=60).json()["data"]
    assert found and all(x["label"].startswith("Π") for x in found), found


def _raw(url: str, request: bytes) -> bytes:
    """Send ``request`` on a new connection; everything the server sends until it closes."""
    host, port = url.rsplit("/", 1)[1].split(":")
    with socket.create_connection((host, int(port)), timeout=60) as sock:
        sock.sendall(request)
        out = b""
        while chunk := sock.recv(65536):
            out += chunk
        return out


def test_two_host_headers_are_refused(url):
    answer = _raw(url, b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.example\r\nConnection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400"), answer[:200]
    assert b"Host headers" in answer


def test_bodies_not_in_utf8_and_numbers_too_long_are_refused_in_plain_words(url):
    body = json.dumps(chat())
    refused(post(url, body.encode("utf-16")), 400, "invalid_json", "not UTF-8")
    refused(post(url, body.encode("utf-32")), 400, "invalid_json", "not UTF-8")
    refused(post(url, body, headers={"content-type": "application/json; charset=utf-16"}), 415,
            "unsupported_media_type", "UTF-8")
    assert post(url, body, headers={"content-type": "application/json; charset=UTF-8"}).status_code == 200
    error = refused(post(url, body[:-1] + ', "seed": ' + "9" * 5000 + "}"), 400, "invalid_json", "digits")
    assert "set_int_max_str_digits" not in error["message"] and "4300" in error["message"]


def test_the_bearer_scheme_is_read_in_any_case(engine):
    from refactx_index.server.app import ServerSettings

    with serving(engine, ServerSettings(default_index="sample", max_new_tokens=4, api_key="s3cret")) as (locked, _):
        for scheme in ("Bearer", "bearer", "BEARER"):
            r = httpx.get(locked + "/v1/models", headers={"authorization": f"{scheme} s3cret"}, timeout=60)
            assert r.status_code == 200, scheme
        refused(httpx.get(locked + "/v1/models", headers={"authorization": "Basic s3cret"}, timeout=60), 401)
        refused(httpx.get(locked + "/v1/models", headers={"authorization": "bearer s3cre"}, timeout=60), 401)


# ---------------------------------------------------------------------- connections
def test_idle_and_slow_connections_are_closed_and_a_request_is_not(url):
    assert _raw(url, b"") == b""  # never sends a request: closed after the header timeout
    assert _raw(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow") == b""  # headers never end
    answer = _raw(url, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # answered, then idle: closed
    assert answer.startswith(b"HTTP/1.1 200") and b'"ok"' in answer


def test_a_long_prompt_under_the_byte_bound_is_refused_by_its_head_s_tokens(url):
    """400,000 characters (under the byte bound, over 8 characters a token): only the head of
    the text is tokenized before the 413."""
    error = refused(post(url, chat("word " * 80_000)), 413, "prompt_too_long", "the limit is 2048")
    assert "has over" in error["message"]


# ---------------------------------------------------------------------- fair batches
def test_a_long_prompt_runs_alone_and_short_requests_are_answered_beside_it(url, engine):
    """A prompt over long_prompt_tokens goes to the long lane, alone; held there (before its
    prefill), it holds no short request: one is answered meanwhile, then the long one is."""
    long_started, release = threading.Event(), threading.Event()
    generate, sizes = engine._generate, []

    def held(jobs, constraint):
        if any(len(j.prompt_ids) > engine.long_prompt_tokens for j in jobs):
            sizes.append(len(jobs))
            long_started.set()
            assert release.wait(300)
        return generate(jobs, constraint)

    engine._generate = held
    try:
        with ThreadPoolExecutor(1) as pool:
            big = pool.submit(post, url, chat("Germany " * 1500, max_tokens=2))
            assert long_started.wait(300)
            short = post(url, chat())
            assert short.status_code == 200 and short.json()["choices"][0]["message"]["content"]
            assert not big.done()
            release.set()
            reply = big.result()
            assert reply.status_code == 200, reply.text
            assert reply.json()["usage"]["prompt_tokens"] > engine.long_prompt_tokens
        assert sizes == [1]  # alone
    finally:
        release.set()
        del engine._generate
