"""Merge one rank's per-cycle Kineto traces into one file, so a configuration is one job with
one file per rank and several traced steps.

What was observed on torch 2.13 (CPU) across fresh profiler cycles of one process: the clock is
shared (same `baseTimeNanoseconds`, `ts` keeps increasing), `pid`/`tid` and `External id` are
unique across cycles, but each file restarts `Ev Idx` at 0 and the `fwdbwd` flow ids at 1, carries
its own `trace_id`, metadata (`ph: M`) events, `PyTorch Profiler (0)` span and window instants.
So the merge keeps every event of every cycle unchanged except:

- `Ev Idx` and `fwdbwd` flow `id` are offset by the previous cycles' maxima (+1), keeping them
  unique and keeping every forward→backward flow pair inside its own step;
- the `Trace` span of cycle k is renamed `PyTorch Profiler (k)`;
- metadata events repeated verbatim (same name, pid, tid, args) are kept once;
- the header is cycle 0's, plus `lumosCycles`: each cycle's `trace_id`, `traceName` and its
  `ProfilerStep` number. Step numbers are therefore not consecutive (one traced step per cycle).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any


def _load(path: Path) -> dict[str, Any]:
    with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Kineto trace (no traceEvents list)")
    return doc


def merge_cycles(paths: list[Path], out: Path) -> dict[str, Any]:
    """Write the merge of `paths` (one rank's cycles, in order) to `out` (gzip'd JSON)."""
    if not paths:
        raise ValueError(f"{out}: no cycle traces to merge")
    header: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    seen_meta: set[str] = set()
    cycles = []
    idx_offset = flow_offset = 0
    for k, path in enumerate(paths):
        doc = _load(path)
        if k == 0:
            header = {key: v for key, v in doc.items() if key != "traceEvents"}
        max_idx = max_flow = -1
        steps = []
        for ev in doc["traceEvents"]:
            args = ev.get("args")
            if ev.get("ph") == "M":
                key = json.dumps(
                    [ev.get("name"), ev.get("pid"), ev.get("tid"), args], sort_keys=True
                )
                if key in seen_meta:
                    continue
                seen_meta.add(key)
            if isinstance(args, dict) and "Ev Idx" in args:
                max_idx = max(max_idx, args["Ev Idx"])
                ev["args"] = {**args, "Ev Idx": args["Ev Idx"] + idx_offset}
            if ev.get("cat") == "fwdbwd" and "id" in ev:
                max_flow = max(max_flow, ev["id"])
                ev["id"] = ev["id"] + flow_offset
            if ev.get("cat") == "Trace" and str(ev.get("name", "")).startswith("PyTorch Profiler"):
                ev["name"] = f"PyTorch Profiler ({k})"
            name = ev.get("name", "")
            if ev.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#"):
                steps.append(int(name.split("#", 1)[1]))
            events.append(ev)
        idx_offset += max_idx + 1
        flow_offset += max_flow + 1
        cycles.append(
            {
                "cycle": k,
                "trace_id": doc.get("trace_id"),
                "traceName": doc.get("traceName"),
                "profiler_steps": steps,
            }
        )
    header["lumosCycles"] = cycles
    doc = {**header, "traceEvents": events}
    tmp = out.with_name(out.name + ".tmp")
    with gzip.open(tmp, "wt") as f:
        json.dump(doc, f)
    tmp.replace(out)
    return doc
