"""The console script ends with `lumos.process_exit.exit_now` (no interpreter teardown): what
`sys.exit` would have run of ours must still run, and nothing written may be lost."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.cli_run import ROOT, lumos


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_atexit_threads_and_buffers_survive() -> None:
    out = _python(
        """
        import atexit, sys, threading, time
        from lumos.process_exit import exit_now

        atexit.register(lambda: print("atexit ran"))
        def late():
            time.sleep(0.3)
            print("thread done")
        threading.Thread(target=late).start()
        sys.stdout.write("x" * 100_000)  # still in the buffer when exit_now is called
        sys.stdout.write("\\n")
        print("to stderr", file=sys.stderr)
        exit_now(3)
        """
    )
    assert out.returncode == 3, out.stderr
    lines = out.stdout.splitlines()
    assert lines == ["x" * 100_000, "thread done", "atexit ran"]
    assert out.stderr == "to stderr\n"


def test_exit_code_and_output_through_the_cli(tmp_path) -> None:  # noqa: ANN001
    bad = tmp_path / "bad.json"
    bad.write_text("not a trace")
    res = lumos("ingest", str(bad), "--job", "j", "--warehouse", str(tmp_path / "wh"))
    assert res.returncode == 1, res.stderr  # a refused file: non-zero, as before
    assert "refused" in res.stdout
    # a large result printed to a pipe arrives whole
    res = lumos(
        "sql",
        "SELECT range AS i FROM range(200000)",
        "--warehouse",
        str(tmp_path / "wh"),
        "--format",
        "csv",
    )
    assert res.returncode == 0, res.stderr
    rows = res.stdout.splitlines()
    assert rows[0] == "i" and len(rows) == 200_001 and rows[-1] == "199999"
