"""The HTTP/1.1 protocol ``gym ipfs serve`` runs: uvicorn's h11 protocol with the connection
deadlines of ``content_endpoint.limits``.

uvicorn times only idle keep-alive connections: a client that sends a header byte at a time,
or stops reading an answer, would hold its descriptor (and a task) for ever. Here uvicorn's
``timeout_keep_alive`` (``cli.serve`` sets it to the stall timeout) is also the deadline for a
request's headers to be complete, counted from the connection opening or the previous answer,
and for a stalled answer to start moving again; and a connection whose request body was not
read to the end (an upload refused early) is closed after its answer rather than kept.
"""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the deadlines of the module docstring."""

    _headers_due: asyncio.TimerHandle | None = None
    _write_stalled: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._expect_headers()

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._headers_due, self._write_stalled):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def on_response_complete(self) -> None:
        body_unread = self.conn.their_state is not h11.DONE
        super().on_response_complete()
        if body_unread and not self.transport.is_closing():
            self.transport.close()  # not kept for a next request: the rest is not read
        else:
            self._expect_headers()

    def pause_writing(self) -> None:
        super().pause_writing()
        if self._write_stalled is not None:
            self._write_stalled.cancel()
        self._write_stalled = self.loop.call_later(self.timeout_keep_alive, self.transport.abort)

    def resume_writing(self) -> None:
        if self._write_stalled is not None:
            self._write_stalled.cancel()
            self._write_stalled = None
        super().resume_writing()

    def _expect_headers(self) -> None:
        if self._headers_due is not None:
            self._headers_due.cancel()
        self._headers_due = self.loop.call_later(self.timeout_keep_alive, self._headers_late)

    def _headers_late(self) -> None:
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()
