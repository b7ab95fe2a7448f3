"""Searching and paging the runs (schema 16), the same on both engines.

A search is words; a run matches when each word is a substring of one of its fields (sender,
name, subject, email text, run id, an approval's order id), the case of ASCII letters ignored,
on both engines alike: the text is kept lower-cased in run_search (schema_sqlite.py says why
so) and indexed by trigrams (SQLite FTS5, PostgreSQL pg_trgm). A page is a keyset page
(:func:`page_query`): as quick at the end as at the start.
"""

from __future__ import annotations

import string
from collections.abc import Collection, Sequence
from typing import Any

_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def search_words(search: str) -> list[str]:
    """The words of a search, ASCII letters lower-cased as the kept text is."""
    return [word.translate(_ASCII_LOWER) for word in search.split()]


def glob_pattern(word: str) -> str:
    """``*word*`` for SQLite's GLOB, its wildcards in ``word`` read as themselves."""
    return "*" + "".join(f"[{c}]" if c in "*?[" else c for c in word) + "*"


def like_pattern(word: str) -> str:
    """``%word%`` for LIKE ... ESCAPE '\\', its wildcards in ``word`` read as themselves."""
    return "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def page_query(conditions: Sequence[str], args: Sequence[Any],
               branches: Collection[tuple[str, tuple]],
               limit: int, after: tuple[float, str] | None = None,
               oldest_first: bool = False) -> tuple[str, tuple]:
    """One keyset page of run ids: the runs meeting every one of ``conditions`` (their ``?``
    values in ``args``; a filter is one more condition) and at least one of ``branches`` (each
    a condition and its values; none: every run), ordered by (created_at, id), newest first
    (``oldest_first``: the other way), starting after the key ``after`` in that order. Each
    branch is its own indexed, limited read (a UNION, not an OR the planner would answer by
    scanning every run)."""
    order = "ASC" if oldest_first else "DESC"
    where, values = list(conditions), list(args)
    if after is not None:
        where.append(f"(created_at, id) {'>' if oldest_first else '<'} (?, ?)")
        values += [after[0], after[1]]
    parts, part_args = [], []
    for branch, branch_args in branches or (("", ()),):
        clauses = [*where, branch] if branch else where
        parts.append(f"SELECT * FROM (SELECT id, created_at FROM runs"
                     f"{' WHERE ' + ' AND '.join(clauses) if clauses else ''}"
                     f" ORDER BY created_at {order}, id {order} LIMIT ?) AS part{len(parts)}")
        part_args += [*values, *branch_args, limit]
    sql = (f"SELECT id FROM ({' UNION '.join(parts)}) AS page"
           f" ORDER BY created_at {order}, id {order} LIMIT ?")
    return sql, (*part_args, limit)
