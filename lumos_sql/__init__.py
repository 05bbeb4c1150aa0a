"""SQL, the pipeline's transformation layer: `.sql` files and a loader.

Each file is one statement (or a short script) run by DuckDB. Its first lines declare what it
reads and what it writes (`-- reads: a, b` / `-- writes: c`, `none` for nothing; `declared`
returns them, `tests/test_sql_declarations.py` checks them against the SQL). Parameters are DuckDB's own `$name`
placeholders or `{{name}}` template slots for identifiers and paths, filled by `render`. The files
are testable with a bare DuckDB connection (with `taxonomy.install(con)` where a file classifies
events: `is_comm(name)`, `kind_collective()`, ...); nothing here imports Dagster.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import NamedTuple

__all__ = ["Declared", "declared", "load", "render", "names"]


class Declared(NamedTuple):
    """The tables, views and macros a SQL file reads and writes, as its first lines say."""

    reads: tuple[str, ...]
    writes: tuple[str, ...]


@cache
def load(name: str) -> str:
    """Return the text of `lumos_sql/<name>.sql` (name may contain `/` for sub-folders)."""
    path = resources.files(__name__).joinpath(f"{name}.sql")
    if not path.is_file():
        raise FileNotFoundError(f"no SQL file lumos_sql/{name}.sql")
    return path.read_text(encoding="utf-8")


@cache
def declared(name: str) -> Declared:
    """What `lumos_sql/<name>.sql` reads and writes: its leading `-- reads:` and `-- writes:`
    lines (a list may go on over lines that start with `--` and spaces)."""
    lists: dict[str, list[str]] = {}
    key = None
    for line in load(name).splitlines():
        if not line.startswith("--"):
            break
        body = line[2:].strip()
        head, sep, rest = body.partition(":")
        if sep and head in ("reads", "writes"):
            key = head
            lists[key] = []
        elif key is None or not line.startswith("--  "):
            break
        else:
            rest = body
        lists[key] += [n.strip() for n in rest.split(",") if n.strip() and n.strip() != "none"]
    if set(lists) != {"reads", "writes"}:
        raise ValueError(
            f"lumos_sql/{name}.sql: its first lines must declare `-- reads: ...` and "
            "`-- writes: ...` (`none` for nothing)"
        )
    return Declared(tuple(lists["reads"]), tuple(lists["writes"]))


def render(name: str, **slots: str) -> str:
    """Load a SQL file and fill its `{{slot}}` placeholders (identifiers and quoted paths only)."""
    text = load(name)
    for key, value in slots.items():
        text = text.replace("{{" + key + "}}", value)
    if "{{" in text:
        missing = text[text.index("{{") : text.index("}}", text.index("{{")) + 2]
        raise KeyError(f"lumos_sql/{name}.sql: slot {missing} not filled")
    return text


def names() -> list[str]:
    """All SQL file names the package holds, without the `.sql` suffix."""
    root = resources.files(__name__)
    out: list[str] = []

    def walk(node, prefix: str) -> None:
        for child in node.iterdir():
            if child.is_dir():
                walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".sql"):
                out.append(prefix + child.name[:-4])

    walk(root, "")
    return sorted(out)
