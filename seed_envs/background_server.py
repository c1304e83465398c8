"""Start/stop plumbing shared by the package's local HTTP servers (SearchQA's retriever, WebShop's shop)."""
from __future__ import annotations

import threading
from typing import Any


class BackgroundServer:
    """Runs the ``socketserver``-style server in ``self._httpd`` in a daemon thread.

    Subclasses build ``self._httpd`` (bound to 127.0.0.1 by default) and set ``thread_name``. ``stop()``
    is safe before ``start()`` (``shutdown()`` alone would wait forever for a loop that never ran).
    """

    thread_name = "seed-envs-server"
    _httpd: Any
    _thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return str(self._httpd.server_address[0])

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self):
        if self._thread is None:
            self._thread = threading.Thread(target=self._httpd.serve_forever, name=self.thread_name, daemon=True)
            self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread (a command-line server)."""
        self._httpd.serve_forever()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(timeout=5)
            self._thread = None
        self._httpd.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
