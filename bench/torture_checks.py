"""What `bench/torture.py` checks after each case: a real `lumos` process run with its exit
status, output, wall time and peak RSS; the warehouse's state (its files and manifest rows)
before and after; and a verdict, handled or not, that names every check that failed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACEBACK = "Traceback (most recent call last)"
# written by any command that opens the warehouse (the catalog and its lock), not a change
VOLATILE = {"lumos.duckdb", "lumos.duckdb.wal", ".lumos.duckdb.stamp", ".commit.lock"}


@dataclass
class Ran:
    """One finished `lumos` process."""

    rc: int
    out: str
    err: str
    wall_s: float
    max_rss_mb: float
    timed_out: bool
    out_bytes: int

    @property
    def text(self) -> str:
        return self.out + self.err

    def brief(self) -> str:
        """The exit status and the last line of stderr (or stdout): what a user saw."""
        last = (self.err.strip() or self.out.strip()).splitlines()[-1:] or [""]
        return f"exit {self.rc}{' (timed out)' if self.timed_out else ''}: {last[0][:200]}"


def lumos_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.setdefault("NUMBA_CACHE_DIR", str(ROOT / ".numba_cache"))
    return {**env, **(extra or {})}


def start(
    *args: str, env: dict[str, str] | None = None, uid: int | None = None, cwd: Path = ROOT
) -> tuple[subprocess.Popen, object, object]:
    """`python -m lumos ARGS` in its own session (so that its whole group can be killed), as
    user `uid` when given; stdout and stderr go to temporary files."""
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    # setpriv, not a preexec setuid: the interpreter sits under /root, which the user cannot walk
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"] if uid else []
    p = subprocess.Popen(
        [*as_user, sys.executable, "-m", "lumos", *args],
        cwd=cwd,
        env=lumos_env(env),
        stdout=out,
        stderr=err,
        start_new_session=True,
    )
    return p, out, err


def _sample_peak(pid: int, ended: threading.Event, peak: list[int]) -> None:
    """The process's peak RSS (kB) as its VmHWM says, read every 10 ms until it ends. Not
    `wait4`'s ru_maxrss: that counts the forking parent's RSS (this bench's, with Dagster
    loaded), which the child's memory held until its exec."""
    status = Path(f"/proc/{pid}/status")
    while not ended.wait(0.01):
        try:
            for line in status.read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak[0] = max(peak[0], int(line.split()[1]))
        except (OSError, ValueError):
            continue


def running(p: subprocess.Popen) -> bool:
    """Whether `p` has not ended, without reaping it (`finish` reads its resource usage)."""
    return os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None


def finish(p: subprocess.Popen, out, err, timeout: float, t0: float) -> Ran:  # noqa: ANN001
    """Wait for `p` (killing its group after `timeout` s) and read what it wrote: the first
    MiB of each stream is kept, the size of stdout counted."""
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    ended = threading.Event()
    peak = [0]
    sampler = threading.Thread(target=_sample_peak, args=(p.pid, ended, peak))
    sampler.start()
    try:
        _, status, _usage = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
        ended.set()
        sampler.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    texts = []
    for f in (out, err):
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(0)
        texts.append((f.read(1 << 20).decode(errors="replace"), size))
        f.close()
    return Ran(
        rc=p.returncode,
        out=texts[0][0],
        err=texts[1][0],
        wall_s=time.monotonic() - t0,
        max_rss_mb=peak[0] / 1024,
        timed_out=timed_out.is_set(),
        out_bytes=texts[0][1],
    )


def lumos(
    *args: str,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    uid: int | None = None,
    cwd: Path = ROOT,
) -> Ran:
    """Run `python -m lumos ARGS` to its end (or `timeout`)."""
    t0 = time.monotonic()
    p, out, err = start(*args, env=env, uid=uid, cwd=cwd)
    return finish(p, out, err, timeout, t0)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (Linux /proc)."""
    found: set[int] = set()
    todo = [pid]
    while todo:
        for task in Path(f"/proc/{todo.pop()}/task").glob("*"):
            try:
                kids = {int(c) for c in (task / "children").read_text().split()}
            except OSError:
                continue
            todo.extend(kids - found)
            found |= kids
    return {p for p in found if alive(p)}


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@dataclass(frozen=True)
class State:
    """A warehouse as a user could tell it changed: its files (size, mtime) and manifest rows."""

    files: dict[str, tuple[int, int]]
    rows: tuple[tuple, ...]


def state(wh: Path) -> State:
    from tests.warehouse_checks import manifest_rows, snapshot

    files = {k: v for k, v in snapshot(wh).items() if k.split("/")[-1] not in VOLATILE}
    rows = tuple(
        sorted(tuple(sorted((k, str(v)) for k, v in r.items())) for r in manifest_rows(wh))
    )
    return State(files, rows)


def changes(before: State, after: State) -> list[str]:
    """What differs, in a few words per difference (empty: unchanged)."""
    said = []
    for name in sorted(before.files.keys() - after.files.keys()):
        said.append(f"removed {name}")
    for name in sorted(after.files.keys() - before.files.keys()):
        said.append(f"added {name}")
    for name in sorted(before.files.keys() & after.files.keys()):
        if before.files[name] != after.files[name] and before.files[name][0] != -1:
            said.append(f"rewrote {name}")
    if before.rows != after.rows:
        gone, new = set(before.rows) - set(after.rows), set(after.rows) - set(before.rows)
        said.append(f"manifest rows changed (-{len(gone)} +{len(new)})")
    return said


@dataclass
class Verdict:
    """The checks of one case; handled when none failed."""

    failed: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def need(self, ok: bool, what: str) -> bool:
        if not ok:
            self.failed.append(what)
        return ok

    def note(self, what: str) -> None:
        self.notes.append(what)

    @property
    def handled(self) -> bool:
        return not self.failed

    def no_traceback(self, ran: Ran) -> None:
        self.need(TRACEBACK not in ran.text, f"a traceback ({ran.brief()})")

    def refused(self, ran: Ran, *says: str) -> None:
        """A clear refusal: no traceback, a failing exit status, the problem named."""
        self.no_traceback(ran)
        if not self.need(ran.rc != 0 and not ran.timed_out, f"not refused ({ran.brief()})"):
            return
        for s in says:
            self.need(s.lower() in ran.text.lower(), f"does not say {s!r} ({ran.brief()})")

    def succeeded(self, ran: Ran, *says: str) -> None:
        self.no_traceback(ran)
        self.need(ran.rc == 0 and not ran.timed_out, f"failed ({ran.brief()})")
        for s in says:
            self.need(s in ran.text, f"does not say {s!r} ({ran.brief()})")

    def unchanged(self, before: State, after: State) -> None:
        diff = changes(before, after)
        self.need(not diff, "warehouse changed: " + "; ".join(diff[:3]))

    def later_ingest_works(self, wh: Path, trace: Path, tag: str) -> None:
        """An ingest after the case (the base trace as a new job) still commits, and what the
        warehouse shows is whole."""
        from tests.warehouse_checks import assert_consistent

        ran = lumos("ingest", str(trace), "--job", f"probe-{tag}", "-q", "--warehouse", str(wh))
        if self.need(ran.rc == 0 and "1 ingested" in ran.text, f"later ingest: {ran.brief()}"):
            try:
                assert_consistent(wh)
            except AssertionError as exc:
                self.failed.append(f"warehouse not whole after it: {str(exc)[:200]}")

    def summary(self) -> str:
        return "; ".join(self.failed + self.notes)
