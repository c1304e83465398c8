"""The env table of the docs (README.md, docs/environments.md), written from what each env declares.

Each row comes from the env class behind a registered id, read from the registry's entry point without
building the env: its ``summary`` (else its docstring's first line), its splits with their aliases and
``split_notes``, ``splits_extra``, and ``default_max_steps``; the env's page is ``docs/<name>.md``
(``seed/Sokoban-v0`` -> ``sokoban.md``). A docs file holds the table between :data:`BEGIN` and
:data:`END`; ``seed-envs tables --write FILE ...`` rewrites it there and ``--check`` fails when it differs,
so adding an env to this package touches its package, its registration line, its test and its page
(docs/adding-an-environment.md), and the tables follow.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable


BEGIN = "<!-- env table: written by `seed-envs tables --write` from each env's declaration; do not edit -->"
END = "<!-- end of env table -->"
HEADER = ("| id | task | splits (`unseen` = out of distribution) | default `max_steps` |\n"
          "|---|---|---|---|")


@dataclass(frozen=True)
class EnvRow:
    """One env's row: its id, the docs page's file name, and the cells."""

    env_id: str
    page: str
    summary: str
    splits: str
    max_steps: int

    def markdown(self, link_prefix: str) -> str:
        return (f"| [`{self.env_id}`]({link_prefix}{self.page}) | {self.summary} | {self.splits} | "
                f"{self.max_steps} |")


def env_class(env_id: str) -> type:
    """The :class:`seed_envs.core.SeedEnv` subclass a registered id builds (``time_limited``'s
    ``env_class``), imported but not built."""
    from seed_envs import entry_point

    cls = getattr(entry_point(env_id), "env_class", None)
    if cls is None:
        raise ValueError(f"{env_id}: its entry point is not seed_envs.core.time_limited(EnvClass), so the "
                         "env table cannot read its declaration")
    return cls


def docs_page(env_id: str) -> str:
    """``seed/Sokoban-v0`` -> ``sokoban.md``: the env's page in docs/."""
    name = env_id.split("/", 1)[-1]
    return re.sub(r"-v\d+$", "", name).lower() + ".md"


def splits_cell(cls: type) -> str:
    """Every split in declaration order, its aliases and note in brackets, then ``splits_extra``."""
    parts = []
    for split in cls.split_names:
        aliases = [f"`{a}`" for a, target in cls.split_aliases.items() if target == split]
        note = "; ".join(filter(None, [", ".join(aliases), cls.split_notes.get(split, "")]))
        parts.append(f"`{split}`" + (f" ({note})" if note else ""))
    return ", ".join(parts) + (f"; {cls.splits_extra}" if cls.splits_extra else "")


def env_row(env_id: str) -> EnvRow:
    cls = env_class(env_id)
    summary = cls.summary or (cls.__doc__ or "").strip().splitlines()[0]
    return EnvRow(env_id, docs_page(env_id), summary, splits_cell(cls), cls.default_max_steps)


def env_table(env_ids: Iterable[str] | None = None, *, link_prefix: str = "docs/") -> str:
    """The markdown table of ``env_ids`` (default: every id of :data:`seed_envs.ENV_IDS`, in its order),
    pages linked as ``link_prefix + page``."""
    import seed_envs

    ids = list(seed_envs.ENV_IDS) if env_ids is None else list(env_ids)
    return "\n".join([HEADER] + [env_row(env_id).markdown(link_prefix) for env_id in ids])


def link_prefix_for(path: str | Path) -> str:
    """Pages are in docs/: a file in a folder named docs links them bare, any other file as ``docs/``."""
    return "" if Path(path).resolve().parent.name == "docs" else "docs/"


def replace_between(text: str, begin: str, end: str, body: str, where: str = "the file") -> str:
    """``text`` with what lies between the lines ``begin`` and ``end`` replaced by ``body``: the one way every
    generated block of the docs (env tables, results tables, the flag table) is written. ValueError when
    ``where`` lacks one of the markers, has either twice, or has them in the wrong order."""
    if text.count(begin) != 1 or text.count(end) != 1 or text.index(begin) > text.index(end):
        raise ValueError(f"{where}: needs one generated block, a line {begin!r} and a later line {end!r}")
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{begin}\n{body}\n{end}{tail}"


def with_table(text: str, table: str, where: str = "the file") -> str:
    """``text`` with the env-table block (between :data:`BEGIN` and :data:`END`) replaced by ``table``."""
    return replace_between(text, BEGIN, END, table, where)


def stale_files(paths: Iterable[str | Path], *, write: bool) -> list[Path]:
    """The files whose env table differs from the declarations' (rewritten when ``write``)."""
    stale = []
    for path in map(Path, paths):
        text = path.read_text(encoding="utf-8")
        new = with_table(text, env_table(link_prefix=link_prefix_for(path)), str(path))
        if new != text:
            stale.append(path)
            if write:
                path.write_text(new, encoding="utf-8")
    return stale
