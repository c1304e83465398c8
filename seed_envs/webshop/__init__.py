"""WebShop: search a product catalog, browse result and product pages, choose options, buy.

``seed/WebShop-v0`` is :class:`seed_envs.webshop.env.WebShopEnv`, wrapped in ``TimeLimit``.
Modules: ``vocab`` and ``catalog`` (the generated catalog, WebShop's real files, goals, splits),
``search`` (BM25 via bm25s), ``reward`` (WebShop's reward, pure functions), ``shop`` (one shopping
session: pages, clicks, text and HTML rendering), ``server`` (the Flask web shop), ``browser``
(selenium + headless Chromium), ``expert`` (the oracle), ``env``. Importing this package is light:
bm25s, flask and selenium are imported only inside the functions that need them.
"""
