"""The shop's search engine: BM25 (bm25s) over product text, top 50 results, 10 a page.

WebShop indexes each product as title, description, first bullet point and its options
(``search_engine/convert_product_file_format.py``) and serves the top 50 BM25 hits (pyserini);
so does this, with bm25s. The index is built once per catalog and cached on disk under
``$SEEDGYM_CACHE/webshop`` (a changed catalog never reads a stale index: the key is the catalog's
fingerprint, the tokenizer version and k1/b).
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from seed_envs.webshop.catalog import Catalog, Product, default_cache_dir

SEARCH_RETURN_N = 50  # WebShop: results per search
PRODUCT_WINDOW = 10  # WebShop: results per page
TOKENIZER_VERSION = 1
_TOKEN = re.compile(r"\w+")
STOPWORDS = frozenset("""
a an and are as at be but by for from has have i if in into is it its me my of on or our so than that the their
them then there these they this to was we were what when which who will with you your am im need want looking
find would like get please
""".split())


def tokenize(text: str) -> list[str]:
    """Lowercased word tokens without stopwords: what the index and the queries are made of."""
    return [t for t in _TOKEN.findall(text.lower()) if t not in STOPWORDS]


def _top_indices(scores: Any, k: int) -> list[int]:
    """Indices of the k best positive scores, best first; ties broken by the lower index."""
    import numpy as np

    positive = np.flatnonzero(scores > 0)
    if positive.size == 0 or k <= 0:
        return []
    if positive.size > k:
        kth = np.partition(scores[positive], positive.size - k)[positive.size - k]
        positive = positive[scores[positive] >= kth]  # everything tied with the k-th too
    order = np.lexsort((positive, -scores[positive]))
    return [int(i) for i in positive[order][:k]]


class ProductSearch:
    """BM25 over ``products``; :meth:`search` returns product indices, best first."""

    def __init__(self, products: Sequence[Product], *, fingerprint: str | None = None,
                 cache_dir: str | os.PathLike | None = None, k1: float = 1.5, b: float = 0.75, use_cache: bool = True):
        try:
            import bm25s
        except ImportError:
            raise ImportError("WebShop's search engine needs bm25s: pip install 'seed-gym[webshop]' (or bm25s)") from None
        if not products:
            raise ValueError("ProductSearch: the catalog is empty")
        self.products = products
        self.cache_path: Path | None = None
        model = None
        if use_cache and fingerprint is not None:
            root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
            self.cache_path = root / f"bm25s-{fingerprint[:24]}-t{TOKENIZER_VERSION}-k{k1}-b{b}"
            if (self.cache_path / "params.index.json").is_file():
                try:
                    model = bm25s.BM25.load(self.cache_path, mmap=False, show_progress=False)
                except (OSError, ValueError, KeyError):
                    model = None  # a damaged cache entry is rebuilt
        if model is None:
            model = bm25s.BM25(k1=k1, b=b)
            model.index([tokenize(p.search_text()) for p in products], show_progress=False)
            if self.cache_path is not None:
                self._save(model)
        self._model = model

    def _save(self, model: Any) -> None:
        assert self.cache_path is not None
        try:
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-bm25s-", dir=self.cache_path.parent))
            model.save(tmp, show_progress=False)
            try:
                os.replace(tmp, self.cache_path)
            except OSError:  # a concurrent writer got there first: its copy is as good
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:
            pass  # an unwritable cache only costs a rebuild next time

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the top ``k`` products for ``query`` (only products sharing a word with it)."""
        ids = self._model.get_tokens_ids(tokenize(query))
        if not ids:
            return []
        return _top_indices(self._model.get_scores_from_ids(ids), k)


def catalog_search(catalog: Catalog, cache_dir: str | os.PathLike | None = None) -> ProductSearch:
    return ProductSearch(catalog.products, fingerprint=catalog.fingerprint, cache_dir=cache_dir)
