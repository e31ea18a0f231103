"""``refactx serve``: an OpenAI-compatible HTTP server over constrained generation.

:mod:`refactx_index.server.engine` batches concurrent requests into transformers
``generate`` calls; :mod:`refactx_index.server.app` is the FastAPI application. Needs the
``server`` extra (FastAPI, uvicorn) and the ``generation`` extra.
"""
