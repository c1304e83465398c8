"""Our retrieval server, speaking Search-R1's ``/retrieve`` API (stdlib only, no web framework).

``POST /retrieve`` with ``{"queries": [str], "topk": int, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents"}, "score": float}, ...], ...]}`` (bare documents when
``return_scores`` is false), exactly what Search-R1's ``retrieval_server.py`` returns, so Search-R1
training can use our CPU BM25 and our env can use their e5 + FAISS server. ``GET /health`` answers
``{"status": "ok", "passages": N}``.

Command line (binds 127.0.0.1 unless told otherwise)::

    python -m seed_envs.searchqa.server --corpus corpus.jsonl --port 8000 [--retriever dense]
"""
from __future__ import annotations

import argparse
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from seed_envs.background_server import BackgroundServer
from seed_envs.searchqa.retrievers import Retriever

MAX_BODY_BYTES = 8 * 1024 * 1024  # a request larger than this is refused (413), not read
MAX_QUERIES = 4096
MAX_TOPK = 1000
MAX_QUERY_CHARS = 4096  # longer queries are truncated, as the env does


class _BadRequest(ValueError):
    pass


def _parse_request(body: bytes) -> tuple[list[str], int, bool]:
    try:
        payload = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _BadRequest(f"body is not JSON: {e}") from None
    if not isinstance(payload, dict):
        raise _BadRequest("body must be a JSON object")
    queries = payload.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        raise _BadRequest("'queries' must be a list of strings")
    if len(queries) > MAX_QUERIES:
        raise _BadRequest(f"at most {MAX_QUERIES} queries per request, got {len(queries)}")
    topk = payload.get("topk", 3)
    if topk is None:
        topk = 3
    if not isinstance(topk, int) or isinstance(topk, bool) or not 1 <= topk <= MAX_TOPK:
        raise _BadRequest(f"'topk' must be an int from 1 to {MAX_TOPK}")
    return [q[:MAX_QUERY_CHARS] for q in queries], topk, bool(payload.get("return_scores", False))


def _make_handler(retriever: Retriever, passage_count: int | None, lock: threading.Lock) -> type:
    class RetrieveHandler(BaseHTTPRequestHandler):
        server_version = "seed-gym-retriever/1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test and training logs quiet
            pass

        def _reply(self, status: int, payload: dict) -> None:
            data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/") == "/health":
                self._reply(200, {"status": "ok", "passages": passage_count})
            else:
                self._reply(404, {"error": "not found; POST /retrieve or GET /health"})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/retrieve":
                self._reply(404, {"error": "not found; POST /retrieve"})
                return
            try:
                length = int(self.headers.get("Content-Length", "0"))
            except ValueError:
                length = -1
            if length < 0 or length > MAX_BODY_BYTES:
                self.close_connection = True
                self._reply(413, {"error": f"body must be 0 to {MAX_BODY_BYTES} bytes with a Content-Length"})
                return
            try:
                queries, topk, return_scores = _parse_request(self.rfile.read(length))
            except _BadRequest as e:
                self._reply(400, {"error": str(e)})
                return
            with lock:  # retrievers are not documented as thread-safe; searches are fast anyway
                results = retriever.batch_search(queries, topk)
            if return_scores:
                out = [[{"document": h.passage.to_json(), "score": h.score} for h in hits] for hits in results]
            else:
                out = [[h.passage.to_json() for h in hits] for hits in results]
            self._reply(200, {"result": out})

    return RetrieveHandler


class RetrievalServer(BackgroundServer):
    """A ``/retrieve`` server for ``retriever``; ``start()`` runs it in a daemon thread.

    ``port=0`` picks a free port (read it from ``.port`` or ``.url``). Use as a context manager in
    tests: ``with RetrievalServer(r) as server: HTTPRetriever(server.url)``.
    """

    thread_name = "searchqa-retriever"

    def __init__(self, retriever: Retriever, host: str = "127.0.0.1", port: int = 0):
        passages = getattr(retriever, "passages", None)
        handler = _make_handler(retriever, len(passages) if passages is not None else None, threading.Lock())
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/retrieve"


def main(argv: list[str] | None = None) -> None:
    from seed_envs.searchqa.corpus import load_corpus
    from seed_envs.searchqa.generated import default_encyclopedia
    from seed_envs.searchqa.retrievers import make_retriever

    p = argparse.ArgumentParser(description="Serve Search-R1's /retrieve API over a corpus (BM25 by default).")
    p.add_argument("--corpus", help="corpus jsonl ({id, contents}); default: the generated encyclopedia")
    p.add_argument("--retriever", default="bm25", choices=["bm25", "dense"])
    p.add_argument("--dense-model", default=None, help="local sentence-transformers folder (default: bundled all-MiniLM-L6-v2)")
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; 0.0.0.0 exposes it to the network)")
    p.add_argument("--port", type=int, default=8000)
    a = p.parse_args(argv)
    passages = load_corpus(a.corpus) if a.corpus else default_encyclopedia().passages
    retriever = make_retriever(a.retriever, passages, dense_model=a.dense_model)
    server = RetrievalServer(retriever, a.host, a.port)
    print(f"serving {len(passages)} passages ({a.retriever}) at {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
