"""Connection hygiene for the fact server: uvicorn's configuration with bounded idle time.

uvicorn closes a keep-alive connection that stays idle after a response
(``timeout_keep_alive``), but not one that never sends a request, nor one that sends its
headers a byte at a time (a slow-loris client holds a connection for ever). The protocol
made here closes a connection whose next request's headers are not complete within
``header_timeout_s`` of the connection's start or of the end of its previous response;
a request being served is never cut. ``max_connections`` is uvicorn's ``limit_concurrency``:
past it a request is answered 503 at once.
"""

from __future__ import annotations

from typing import Any


def header_timeout_protocol(header_timeout_s: float) -> type:
    """uvicorn's HTTP protocol (httptools when installed, else h11) with the header deadline
    of the module doc."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    class HeaderDeadlineProtocol(AutoHTTPProtocol):  # type: ignore[misc, valid-type]
        def connection_made(self, transport) -> None:  # type: ignore[no-untyped-def]
            super().connection_made(transport)
            self._header_timer = None
            self._arm_header_timer()

        def _arm_header_timer(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(header_timeout_s, self._header_deadline)

        def _header_deadline(self) -> None:
            self._header_timer = None
            if self.transport.is_closing():
                return
            cycle = self.cycle
            if cycle is None or cycle.response_complete:  # no request under way: none whose headers came
                self.transport.close()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm_header_timer()

        def connection_lost(self, exc) -> None:  # type: ignore[no-untyped-def]
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None
            super().connection_lost(exc)

    return HeaderDeadlineProtocol


def uvicorn_config(app: Any, *, keep_alive_timeout_s: float = 5.0, header_timeout_s: float = 10.0,
                   max_connections: int | None = 256, **kwargs: Any):
    """A ``uvicorn.Config`` for ``app`` with the module doc's bounds (``kwargs``: uvicorn's)."""
    import uvicorn

    return uvicorn.Config(app, http=header_timeout_protocol(header_timeout_s),
                          timeout_keep_alive=keep_alive_timeout_s, limit_concurrency=max_connections, **kwargs)
