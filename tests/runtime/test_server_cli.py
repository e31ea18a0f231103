"""``refactx serve`` as an operator runs it (a process, signals, the environment), and the
database failures of ``refactx serve``/``explore``/``complete``: one line, fast, no password;
and ``/ready`` over a PostgreSQL index whose database goes away (through a TCP proxy the
test cuts) and comes back."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")

REFACTX = str(Path(sys.executable).with_name("refactx"))
KEY = "k-" + "7" * 20


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFACTX")}
    env.update(extra)
    return env


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def served(sample_fact_texts, tmp_path_factory):
    """``refactx serve`` over an index file of the sample, its API key from the environment."""
    from refactx_index.tree.memory import MemoryTreeIndex
    from refactx_index.qa.models import model_directory

    path = tmp_path_factory.mktemp("served") / "sample.rfx"
    MemoryTreeIndex.from_facts(sample_fact_texts, str(model_directory("smollm2") / "tokenizer.json")).save(path)
    port = _free_port()
    proc = subprocess.Popen([REFACTX, "serve", "--index-file", f"sample={path}", "--port", str(port),
                             "--max-new-tokens", "200", "--max-prompt-tokens", "1024"],
                            env=_env(REFACTX_API_KEY=KEY), stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # until the server's line once it listens (or its error and EOF)
        seen.append(line)
        if "refactx: serving" in line:
            break
    assert "refactx: serving ['sample']" in seen[-1], "".join(seen)
    threading.Thread(target=proc.stderr.read, daemon=True).start()  # drained: the pipe never fills
    yield {"url": f"http://127.0.0.1:{port}", "proc": proc}
    if proc.poll() is None:
        proc.kill()
        proc.wait(30)


def _chat(question: str, **extra) -> dict:
    return {"model": "smollm2", "messages": [{"role": "user", "content": question}], "temperature": 0,
            "max_tokens": 16, **extra}


def _post(url: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {KEY}"},
                      timeout=300, **kw)


@pytest.mark.slow
def test_a_huge_request_is_refused_while_another_client_is_answered_and_sigterm_stops_it_under_load(served):
    url, proc = served["url"], served["proc"]
    assert httpx.post(url + "/v1/chat/completions", json=_chat("Hi"), timeout=60).status_code == 401
    with ThreadPoolExecutor(2) as pool:
        huge = pool.submit(_post, url, _chat("x" * 1_000_000))
        good = pool.submit(_post, url, _chat("What is the capital of Germany?"))
        big = huge.result()
        assert big.status_code == 413 and "the limit is 1024" in big.json()["error"]["message"]
        assert good.result().status_code == 200 and good.result().json()["facts"]
    # under load: a long answer streaming, then SIGTERM
    body = _chat("Tell me a long story about France.", max_tokens=200, stream=True)
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=300,
                      headers={"authorization": f"Bearer {KEY}"}) as stream:
        lines = stream.iter_lines()
        assert next(line for line in lines if line.startswith("data: {"))  # generating
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        proc.wait(timeout=10)
        stopped_in = time.monotonic() - sent
    assert stopped_in < 10 and proc.returncode is not None


def test_serving_beyond_loopback_needs_an_api_key():
    run = subprocess.run([REFACTX, "serve", "--index-file", "x=nowhere.rfx", "--host", "0.0.0.0"],
                         env=_env(), capture_output=True, text=True, timeout=120)
    assert run.returncode == 1 and "needs an API key" in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("dsn", [
    "host=127.0.0.1 port={closed} dbname=refactx user=reader password=hunter2",
    "postgresql://reader:hunter2@127.0.0.1:{closed}/refactx",
    "host=no-such-host.invalid dbname=refactx password=hunter2",
    "host=127.0.0.1 port=abc dbname=refactx password=hunter2",
    "host=127.0.0.1 password=my hunter2",  # malformed: libpq would quote "hunter2"
])
@pytest.mark.parametrize("command", [
    ["explore", "--index", "kg", "--vocabulary", "{tokenizer}", "relations", "Germany"],
    ["complete", "--index", "kg", "--vocabulary", "{tokenizer}", " <Germany> <"],
    ["serve", "--engine", "vllm", "--index", "kg"],
])
def test_a_database_that_cannot_answer_fails_fast_in_one_line_without_its_password(dsn, command):
    from refactx_index.qa.models import model_directory

    tokenizer = str(model_directory("smollm2") / "tokenizer.json")
    dsn = dsn.format(closed=_free_port())
    run = subprocess.run([REFACTX, *[a.format(tokenizer=tokenizer) for a in command]],
                         env=_env(REFACTX_DSN=dsn), capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert "hunter2" not in run.stderr + run.stdout
    lines = run.stderr.strip().splitlines()  # one line: no pool warning before it
    assert len(lines) == 1 and "cannot connect to PostgreSQL" in lines[0], run.stderr
    # refused at the first attempt, not after the pool's connect timeout
    assert "not retried" in lines[0] or "malformed" in lines[0], lines[0]
    assert "within" not in lines[0], lines[0]


class _Proxy:
    """A TCP forwarder from a loopback port to PostgreSQL that the test can cut (every
    connection closed, new ones refused) and restore on the same port."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = _free_port()
        self.conns: list[socket.socket] = []
        self.lock = threading.Lock()
        self.listener: socket.socket | None = None
        self.start()

    def start(self) -> None:
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(16)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def cut(self) -> None:
        try:  # wakes the accept() under way (a close alone would leave it accepting)
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.mark.pg
@pytest.mark.slow
def test_ready_and_requests_follow_the_database(pg_dsn):
    """/ready says 503 with Retry-After within its bounded check while PostgreSQL is away, a
    constrained request and an exploration get 503 at once, and both answer again when it is
    back."""
    import uvicorn
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from refactx_index.qa.models import load_model
    from refactx_index.tree.pg import open_index
    from refactx_index.server.app import ServerSettings, create_app
    from refactx_index.server.backend_transformers import TransformersEngine
    from refactx_index.vocab import encode_facts, open_tokenizer

    from ..pgdb import pipeline_tree_loader

    load_tree = pipeline_tree_loader()

    loaded = load_model("smollm2")
    facts = ["<Germany> <capital> <Berlin> .", "<France> <capital> <Paris> ."]
    encoded = encode_facts(open_tokenizer(str(loaded.tokenizer_file)), facts, ())
    load_tree(pg_dsn, "kg", [encoded.ids(i) for i in range(len(facts))], vocab_size=len(loaded.tokenizer))
    params = conninfo_to_dict(pg_dsn)
    proxy = _Proxy((params.get("host", "127.0.0.1"), int(params.get("port", 5432))))
    index = open_index(make_conninfo(**{**params, "host": "127.0.0.1", "port": str(proxy.port)}), "kg",
                       connect_timeout_s=3, follow=False)
    engine = TransformersEngine(loaded, {"kg": index})
    app = create_app(engine, ServerSettings(default_index="kg", max_new_tokens=8, db_check_timeout_s=1.0))
    started = threading.Event()
    app.router.on_startup.append(started.set)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, log_level="critical"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    body = _chat("What is the capital of Germany?", max_tokens=4)
    try:
        assert started.wait(60)
        assert httpx.get(url + "/ready").status_code == 200
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=120).status_code == 200
        proxy.cut()
        r = httpx.get(url + "/ready", timeout=30)
        assert r.status_code == 503 and r.headers["retry-after"] and r.json()["status"] == "not ready"
        assert "kg" in r.json()["indexes"]
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 503 and r.headers["retry-after"]
        assert r.json()["error"]["type"] == "database_unavailable"
        for route in ("facts", "entities"):  # an exploration too: 503, not a 504 that says "narrow it"
            r = httpx.get(f"{url}/v1/indexes/kg/{route}", params={"limit": 5}, timeout=120)
            assert r.status_code == 503 and r.headers["retry-after"], (route, r.text)
            assert r.json()["error"]["type"] == "database_unavailable"
        proxy.start()
        # as an orchestrator's probe does: ask until ready (each check waits at most 1 s for
        # the pool, which reconnects with its own backoff)
        back_by = time.monotonic() + 60
        while httpx.get(url + "/ready", timeout=30).status_code != 200:
            assert time.monotonic() < back_by, "not ready a minute after the database came back"
        assert httpx.post(url + "/v1/chat/completions", json=body, timeout=120).status_code == 200
    finally:
        srv.should_exit = True
        thread.join(30)
        engine.close()
        index.close()
        proxy.cut()


def test_a_keyword_dsn_is_taken_for_postgresql_not_a_file():
    from refactx_index.engines.core import is_dsn

    assert is_dsn("host=db dbname=refactx user=reader password=x")
    assert is_dsn("postgresql://reader@db/refactx")
    assert not is_dsn("/data/sample.rfx") and not is_dsn("sample.rfx")
