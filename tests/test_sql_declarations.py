"""Every SQL file declares at its top what it reads and writes (`lumos_sql.declared`), and the
declaration is what its SQL does: the tables, views and macros after FROM/JOIN that it does not
create itself, and those it creates, inserts into, updates or deletes from. The replay's runner
drops its intermediate tables by these declarations, so a wrong one would drop a table too early
or hold it too long. Reads the sources only."""

from __future__ import annotations

import re

import lumos_sql

# table functions and keywords that follow FROM/JOIN without naming a table
_NOT_TABLES = {
    "read_parquet", "read_json", "read_json_auto", "read_csv", "read_csv_auto", "unnest", "range",
    "generate_series", "glob", "parquet_metadata", "parquet_schema", "duckdb_memory", "lateral",
    "select", "values",
}  # fmt: skip
_NAME = r"(\{\{\w+\}\}|[\w.]+)"


def _code(text: str) -> str:
    """The SQL without comments and string literals."""
    lines = (re.sub(r"'(?:[^']|'')*'", "''", line).split("--", 1)[0] for line in text.splitlines())
    return "\n".join(lines)


def _scan(text: str) -> tuple[set[str], set[str]]:
    code = _code(text)
    created = set(
        re.findall(
            r"\bCREATE\s+(?:OR\s+REPLACE\s+)?(?:TEMP(?:ORARY)?\s+)?(?:TABLE|VIEW|MACRO)\s+"
            r"(?:IF\s+NOT\s+EXISTS\s+)?" + _NAME,
            code,
            re.I,
        )
    )
    changed = set(re.findall(r"\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+" + _NAME, code, re.I))
    ctes = {
        n.lower()
        for n in re.findall(r"(?:\bWITH\s+(?:RECURSIVE\s+)?|,\s*)(\w+)\s+AS\s*\(", code, re.I)
    }
    reads = {
        n
        for n in re.findall(r"\b(?:FROM|JOIN)\s+" + _NAME, code, re.I)
        if n.lower() not in _NOT_TABLES | ctes and "." not in n  # t.col: EXTRACT(x FROM t.col)
    }
    reads |= set(re.findall(r"\bread_(?:parquet|json|csv)\w*\(\s*(\{\{\w+\}\})", code, re.I))
    return reads - created, created | changed


def test_every_sql_file_declares_what_it_reads_and_writes() -> None:
    wrong = []
    for name in lumos_sql.names():
        reads, writes = _scan(lumos_sql.load(name))
        got = lumos_sql.declared(name)
        if set(got.reads) != reads or set(got.writes) != writes:
            wrong.append(
                f"lumos_sql/{name}.sql declares reads {sorted(got.reads)}, writes "
                f"{sorted(got.writes)}; its SQL reads {sorted(reads)}, writes {sorted(writes)}"
            )
    assert not wrong, "\n".join(wrong)


def test_the_scan_and_the_declarations_see_real_tables() -> None:
    """Not empty by accident: graph/deps reads the tasks and updates them, creates deps; the
    catalog's events view reads its glob slot."""
    reads, writes = _scan(lumos_sql.load("graph/deps"))
    assert {"tasks", "g_ev"} <= reads and {"deps", "tasks"} <= writes
    assert "{{events_files}}" in lumos_sql.declared("catalog/events").reads
    assert lumos_sql.declared("replay/memory_in_use") == ((), ())
