"""The code stays readable: short module docstrings, functions a reader can hold, and every
document a file names exists in the repository (measurements and their history live in docs/).

Reads the sources only (ast and text), so it runs in well under a second."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lumos", "kernels", "warehouse", "lumos_sql", "pipelines")
MAX_DOCSTRING_LINES = 15
MAX_FUNCTION_LINES = 150
# numba-compiled functions are exempt from the length bound (a kernel's loop state lives in its
# locals); these are the decorators that compile one: numba's own and the reader's
# `warehouse.readers.jit.kernel` (numba.njit without reference counting)
NUMBA_DECORATORS = frozenset({"njit", "jit", "vectorize", "guvectorize", "kernel", "cached_kernel"})
# a path to a markdown file or into docs/, as code and docs name them
DOC_REF = re.compile(r"(?<![\w./-])((?:\.{1,2}/)?[\w./-]*\.md|docs/[\w./-]*\w)\b(?!\()")
GONE = re.compile(r"field[- ]notes|\.notes/|\bnotes §", re.IGNORECASE)


def _sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _texts() -> list[Path]:
    """Every file that may name a document: the packages' Python and SQL, tests, bench, docs."""
    out = _sources() + sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.sql"))
    for folder, pattern in (("tests", "*.py"), ("bench", "*.py"), ("docs", "*.md")):
        out += sorted((ROOT / folder).rglob(pattern))
    out = [p for p in out if p != Path(__file__).resolve()]  # this file names absent ones
    return out + [ROOT / "README.md", ROOT / "pyproject.toml"]


def _decorator_name(node: ast.expr) -> str:
    if isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _is_numba(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(_decorator_name(d) in NUMBA_DECORATORS for d in fn.decorator_list)


def test_module_docstrings_are_short() -> None:
    long = []
    for path in _sources():
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
        if doc and len(doc.strip("\n").splitlines()) > MAX_DOCSTRING_LINES:
            n = len(doc.strip("\n").splitlines())
            long.append(f"{path.relative_to(ROOT)}: {n} lines")
    assert not long, f"module docstrings over {MAX_DOCSTRING_LINES} lines:\n" + "\n".join(long)


def test_functions_are_short() -> None:
    long = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_numba(node):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {n} lines")
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)


def _missing_refs(path: Path, text: str) -> list[str]:
    out = []
    for m in DOC_REF.finditer(text):
        ref = m.group(1).rstrip(".")
        if ref.startswith("../") or ref == ".md" or "<" in ref:
            continue  # outside the repository (../shared's data), or a suffix, not a path
        here = (path.parent / ref).resolve()
        if not (ROOT / ref).exists() and not here.exists():
            line = text.count("\n", 0, m.start()) + 1
            out.append(f"{path.relative_to(ROOT)}:{line}: {ref}")
    return out


def test_every_named_document_exists() -> None:
    missing = [miss for p in _texts() for miss in _missing_refs(p, p.read_text(encoding="utf-8"))]
    assert not missing, "documents named but not in the repository:\n" + "\n".join(missing)


def test_no_reference_to_notes_outside_the_repository() -> None:
    found = []
    for path in _texts():
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if GONE.search(line):
                found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "references to notes the repository does not hold:\n" + "\n".join(found)


def _bare_numbers(text: str) -> list[str]:
    """Numbers of four digits or more in SQL code (comments and string literals left out)."""
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        code = re.sub(r"'[^']*'", "''", line).split("--", 1)[0]
        out += [f"{i}: {n}" for n in re.findall(r"(?<![\w.])\d{4,}(?![\w.])", code)]
    return out


def test_graph_sql_thresholds_are_named() -> None:
    """A time threshold of the graph rules is a macro of `lumos_sql.thresholds` (named once, with
    its reason), not a bare number in a SQL file."""
    bare = [
        f"{p.relative_to(ROOT)}:{hit}"
        for p in sorted((ROOT / "lumos_sql" / "graph").glob("*.sql"))
        for hit in _bare_numbers(p.read_text(encoding="utf-8"))
    ]
    assert not bare, "bare thresholds (name them in lumos_sql/thresholds.py):\n" + "\n".join(bare)


def test_the_checks_see_what_they_check() -> None:
    """The checks are not empty by accident: they find a long function, a numba kernel, a
    document reference and a missing one in a known source."""
    tree = ast.parse((ROOT / "kernels" / "replay_event.py").read_text(encoding="utf-8"))
    fns = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert _is_numba(fns["_replay_one"])
    assert fns["_replay_one"].end_lineno - fns["_replay_one"].lineno > MAX_FUNCTION_LINES
    fake = ROOT / "lumos" / "fake.py"
    assert _missing_refs(fake, "see docs/replay.md and docs/absent.md, .notes/x.md") == [
        "lumos/fake.py:1: docs/absent.md",
        "lumos/fake.py:1: .notes/x.md",
    ]
    assert GONE.search("(field-notes §4)") and GONE.search("field notes §7")
    assert GONE.search("costs 2-3x (notes §4)") and not GONE.search("Module notes")
    assert _bare_numbers("WHERE late > 2 * gap_ns + 2000 -- 50000\nAND x = '10000'") == ["1: 2000"]
