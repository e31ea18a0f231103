"""``refactx serve``: an OpenAI-compatible HTTP server over constrained generation.

Two generation back ends behind one contract (:mod:`refactx_index.server.engine`: a ``Job``
in, tokens and facts out): :mod:`refactx_index.server.backend_transformers` batches
concurrent requests into transformers ``generate`` calls;
:mod:`refactx_index.server.backend_vllm` hands them to vLLM's ``AsyncLLM`` with the refactx
logits processor (``--engine vllm``);
:mod:`refactx_index.server.app` is the FastAPI application. Needs the ``server`` extra
(FastAPI, uvicorn) and the ``generation`` extra, or vLLM (whose own dependencies include both).
"""
