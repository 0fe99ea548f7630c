"""Serve a mirror root over HTTP on 127.0.0.1 with an ephemeral port, in a thread."""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.fail_status: int | None = None
        self.requests: list[str] = []


class _Handler(SimpleHTTPRequestHandler):
    state: _State  # set on the per-server subclass

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `MirrorServer.requests` instead."""

    def _refuse(self) -> bool:
        with self.state.lock:
            self.state.requests.append(self.path)
            status = self.state.fail_status
        if status is None:
            return False
        self.send_error(status, "nodeforge test mirror is down")
        return True

    def do_GET(self) -> None:
        if not self._refuse():
            super().do_GET()

    def do_HEAD(self) -> None:
        if not self._refuse():
            super().do_HEAD()


class MirrorServer:
    """A running server. `outage()` answers every request with an error status while it lasts;
    `stop()` closes the port, so that clients get connection refused."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._state = _State()
        handler = type("Handler", (_Handler,), {"state": self._state})
        self._httpd = ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(handler, directory=str(root))
        )
        self._httpd.daemon_threads = True
        self.port: int = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"mirror-{self.port}",
            daemon=True,
        )
        self._thread.start()
        self._stopped = False

    @property
    def requests(self) -> list[str]:
        """Request paths seen so far, in order."""
        with self._state.lock:
            return list(self._state.requests)

    def fail_with(self, status: int | None) -> None:
        """Answer every request with `status` from now on; None serves files again."""
        with self._state.lock:
            self._state.fail_status = status

    @contextmanager
    def outage(self, status: int = 404) -> Iterator[None]:
        self.fail_with(status)
        try:
            yield
        finally:
            self.fail_with(None)

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


@contextmanager
def serve_directory(root: Path) -> Iterator[MirrorServer]:
    """Serve `root` until the block ends, whatever happens inside it."""
    server = MirrorServer(root)
    try:
        yield server
    finally:
        server.stop()
