"""Test helper: the fact server live in this process -- ``create_app`` on a free loopback port,
under uvicorn configured as ``refactx serve`` configures it (server/connections.py) -- and the
engine the server tests share: the real SmolLM2-135M-Instruct over the shared sample's facts."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Iterator


@contextlib.contextmanager
def serving(engine, settings, **connection) -> Iterator[tuple[str, object]]:
    """``create_app(engine, settings)`` on a free loopback port; yields (URL, app).
    ``connection``: ``uvicorn_config``'s bounds (``header_timeout_s``, ...)."""
    import uvicorn

    from refactx_index.server.app import create_app
    from refactx_index.server.connections import uvicorn_config

    app = create_app(engine, settings)
    started = threading.Event()
    app.router.on_startup.append(started.set)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn_config(app, log_level="warning", lifespan="on", **connection))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert started.wait(60), "the server did not start"
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", app
    finally:
        srv.should_exit = True
        thread.join(30)


def sample_engine(sample_fact_texts):
    """A module fixture's body: the transformers engine with SmolLM2 over the sample's index
    (named ``sample``), closed after the module."""
    from refactx_index.qa.models import load_model
    from refactx_index.server.backend_transformers import TransformersEngine
    from refactx_index.tree.memory import MemoryTreeIndex

    loaded = load_model("smollm2")
    index = MemoryTreeIndex.from_facts(sample_fact_texts, str(loaded.tokenizer_file))
    engine = TransformersEngine(loaded, {"sample": index}, max_batch=16)
    yield engine
    engine.close()
