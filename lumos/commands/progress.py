"""A one-line progress bar on stderr, shared by the long-running commands (ingest, replay)."""

from __future__ import annotations

import sys
import time


class ProgressLine:
    """Redrawn in place when stderr is a terminal (at most every 0.1 s); otherwise (a log file,
    cron) printed as plain lines once the work has run a few seconds, at most every few seconds."""

    def __init__(self) -> None:
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()
        self.last = 0.0
        self.drawn = False

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self.start

    def draw(self, frac: float, text: str, *, final: bool = False) -> None:
        now = time.monotonic()
        if self.tty:
            if now - self.last < 0.1 and not final:
                return
        elif now - self.start < 3 or now - self.last < 5:
            return
        self.last = now
        line = f"[{'#' * int(30 * min(max(frac, 0.0), 1.0)):<30}] {text}"
        if self.tty:
            sys.stderr.write("\r" + line[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn and self.tty:
            sys.stderr.write("\n")
