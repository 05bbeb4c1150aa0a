"""Sweeps: a grid file -> every configuration's estimate -> the `estimates` table.

A grid file (YAML) holds an optional `base`, a `grid` (key -> list of values; their product is
swept), optional `constraints` (expressions over the keys, evaluated by a small interpreter that
knows only numbers, strings, the keys, arithmetic, comparisons, `and`/`or`/`not` and
`min`/`max`/`abs`), `host_cores` and `order`. Configurations that fail `ModelConfig.validate` are
skipped and counted. `rank_rows` puts those that fit the device first, each group by the order.
The format with an example: docs/estimate.md, "Module notes".
"""

from __future__ import annotations

import ast
import itertools
import json
import math
import operator
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lumos.estimate.config import KEYS, ConfigError, ModelConfig, parse_value
from lumos.estimate.estimator import SPEEDUP_PREFIX, Estimator, Prediction, split_speedups
from lumos.estimate.transforms import TransformError

# A grid's points (the product of its axes) above this are refused before anything runs: at
# ~1,600 configurations per CPU-second this is minutes of replay and ~1 GB of rows.
MAX_GRID_POINTS = 250_000
# A constraint's numbers stay in float range: an integer power or product beyond this is taken
# as a float (inf past 1e308), never computed digit by digit (`10**10**10` would not return).
_EXACT_LIMIT = 1 << 128


def _pow(a: Any, b: Any) -> Any:
    if isinstance(a, int) and isinstance(b, int) and b >= 0:
        if abs(a) <= 1 or b * abs(a).bit_length() <= _EXACT_LIMIT.bit_length():
            return a**b
    try:
        return float(a) ** float(b)
    except OverflowError:
        return math.inf


def _mul(a: Any, b: Any) -> Any:
    if isinstance(a, str) or isinstance(b, str):  # 'x' * 10**9 would build a string
        raise TypeError("strings cannot be multiplied in a constraint")
    out = a * b
    if isinstance(out, int) and abs(out) > _EXACT_LIMIT:
        return float(out)
    return out


_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: _mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: _pow,
}
_CMPOPS = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_FUNCS = {"min": min, "max": max, "abs": abs}


# what the best of a sweep can be ranked by (columns of `estimates`); a leading - is descending
ORDER_COLUMNS = (
    "tokens_per_s",
    "mfu",
    "predicted_ns",
    "interval_low_ns",
    "interval_high_ns",
    "memory_bytes",
)
DEFAULT_ORDER = "-tokens_per_s"


class GridError(ValueError):
    """A grid file is invalid; the message names the file and the problem."""


def parse_order(text: Any, where: str) -> str:
    """`COL` (ascending) or `-COL` (descending), COL one of ORDER_COLUMNS; GridError naming
    `where` otherwise."""
    raw = text.strip() if isinstance(text, str) else ""
    col = raw[1:].strip() if raw.startswith(("-", "+")) else raw
    if col not in ORDER_COLUMNS:
        raise GridError(
            f"{where}: unknown order {text!r} (a column of {', '.join(ORDER_COLUMNS)}; "
            "-column for descending)"
        )
    return f"-{col}" if raw.startswith("-") else col


def _number(value: Any) -> float | None:
    """A row's value as a float, None for null (None, NaN, pandas' NA)."""
    if value is None:
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return None if v != v else v


def rank_rows(rows: Sequence[Mapping[str, Any]], order: str = DEFAULT_ORDER) -> list[int]:
    """The indices of `rows` (mappings with the `estimates` columns), best first: rows that fit
    (or whose fit is unknown) before those that do not, each by `order` (parse_order's form),
    nulls after values, ties by predicted_ns and then as given."""
    col = order.lstrip("-")
    sign = -1.0 if order.startswith("-") else 1.0

    def key(i: int) -> tuple[bool, bool, float, float, int]:
        row = rows[i]
        fits = row.get("fits")
        unfit = fits is not None and fits == fits and not bool(fits)  # NaN/None: unknown
        v = _number(row.get(col))
        step = _number(row.get("predicted_ns"))
        return (unfit, v is None, sign * v if v is not None else 0.0, step or 0.0, i)

    return sorted(range(len(rows)), key=key)


@dataclass(frozen=True)
class Constraint:
    text: str
    tree: ast.Expression
    names: frozenset[str]

    def holds(self, env: Mapping[str, Any]) -> bool:
        return bool(_eval(self.tree.body, env))


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:  # noqa: PLR0911
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float | str):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        v = _eval(node.operand, env)
        return (
            not v if isinstance(node.op, ast.Not) else (-v if isinstance(node.op, ast.USub) else v)
        )
    if isinstance(node, ast.BoolOp):
        vals = (_eval(v, env) for v in node.values)
        return all(vals) if isinstance(node.op, ast.And) else any(vals)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comp in zip(node.ops, node.comparators, strict=True):
            right = _eval(comp, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        return _FUNCS[node.func.id](*(_eval(a, env) for a in node.args))  # type: ignore[union-attr]
    raise TypeError(type(node).__name__)  # unreachable: parse_constraint checked the tree


def _env_key(key: str) -> str:
    return key.replace(".", "_")


def parse_constraint(text: str, known: set[str], where: str) -> Constraint:
    """Parse one constraint; refuse anything but the whitelisted syntax and known names."""
    try:
        tree = ast.parse(str(text), mode="eval")
    except SyntaxError as e:
        raise GridError(f"{where}: constraint {text!r} is not an expression ({e.msg})") from None
    names: set[str] = set()
    allowed = (
        ast.Expression,
        ast.Constant,
        ast.Name,
        ast.Load,
        ast.BinOp,
        ast.UnaryOp,
        ast.BoolOp,
        ast.Compare,
        ast.Call,
        ast.And,
        ast.Or,
        ast.Not,
        ast.USub,
        ast.UAdd,
        *_BINOPS,
        *_CMPOPS,
    )
    for node in ast.walk(tree):
        if not isinstance(node, allowed):
            raise GridError(
                f"{where}: constraint {text!r}: {type(node).__name__} is not allowed "
                "(only arithmetic, comparisons, and/or/not, min/max/abs over the keys)"
            )
        if isinstance(node, ast.Constant) and not isinstance(node.value, int | float | str):
            raise GridError(f"{where}: constraint {text!r}: constant {node.value!r} not allowed")
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCS or node.keywords:
                raise GridError(
                    f"{where}: constraint {text!r}: only min(), max(), abs() may be called"
                )
        elif isinstance(node, ast.Name) and node.id not in _FUNCS:
            if node.id not in known:
                raise GridError(
                    f"{where}: constraint {text!r} uses unknown key {node.id!r} "
                    f"(known: {', '.join(sorted(known))})"
                )
            names.add(node.id)
    return Constraint(str(text), tree, frozenset(names))


@dataclass
class Grid:
    """A parsed grid file."""

    path: str
    base: dict[str, Any] = field(default_factory=dict)
    base_speedups: dict[str, float] = field(default_factory=dict)
    axes: dict[str, list[Any]] = field(default_factory=dict)
    constraints: list[Constraint] = field(default_factory=list)
    host_cores: int | None = None  # `Estimator.open`'s: None when the file does not say
    order: str | None = None  # parse_order's; None when the file does not say

    @property
    def size(self) -> int:
        n = 1
        for v in self.axes.values():
            n *= len(v)
        return n

    def points(self, start: int = 0, stop: int | None = None) -> list[dict[str, Any]]:
        """The combinations of the axes (before constraints), in product order; `start`/`stop`
        take a slice of them (a chunk of a sweep that fans out)."""
        keys = list(self.axes)
        combos = itertools.islice(itertools.product(*self.axes.values()), start, stop)
        return [dict(zip(keys, vals, strict=True)) for vals in combos]


def _typed(key: str, value: Any, where: str) -> Any:
    if key.startswith(SPEEDUP_PREFIX):
        try:
            _, speed = split_speedups({key: value}, where)
        except ConfigError as e:
            raise GridError(str(e)) from None
        return speed[key[len(SPEEDUP_PREFIX) :]]
    try:
        return parse_value(key, str(value), where)
    except ConfigError as e:
        raise GridError(str(e)) from None


def load_grid(path: str | Path) -> Grid:
    """Read and check a grid file; every problem raises GridError naming the file."""
    import yaml

    p = Path(path)
    where = str(p)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise GridError(f"{where}: cannot read the grid file ({e.strerror})") from None
    except yaml.YAMLError as e:
        raise GridError(f"{where}: not valid YAML ({e})") from None
    if not isinstance(doc, dict):
        raise GridError(f"{where}: expected a mapping with base:, grid:, constraints:")
    sections = ("base", "grid", "constraints", "host_cores", "order")
    unknown = set(doc) - set(sections)
    if unknown:
        raise GridError(f"{where}: unknown section(s) {sorted(unknown)} ({', '.join(sections)})")
    grid = Grid(where)
    cores = doc.get("host_cores")
    if cores is not None:
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
            raise GridError(f"{where}: host_cores: must be a positive whole number, got {cores!r}")
        grid.host_cores = cores
    if "order" in doc:
        grid.order = parse_order(doc["order"], f"{where}: order")
    base = doc.get("base") or {}
    if not isinstance(base, dict):
        raise GridError(f"{where}: base: must be a mapping of key: value")
    try:
        grid.base, grid.base_speedups = split_speedups(base, f"{where}: base")
    except ConfigError as e:
        raise GridError(str(e)) from None
    axes = doc.get("grid")
    if not isinstance(axes, dict) or not axes:
        raise GridError(f"{where}: grid: must be a non-empty mapping of key: [values]")
    for key, values in axes.items():
        key = str(key)
        if key not in KEYS and not key.startswith(SPEEDUP_PREFIX):
            raise GridError(
                f"{where}: grid: unknown key {key!r} (known: {', '.join(sorted(KEYS))}, "
                f"{SPEEDUP_PREFIX}<class>)"
            )
        vals = values if isinstance(values, list) else [values]
        if not vals:
            raise GridError(f"{where}: grid: {key} has no values")
        typed = [_typed(key, v, f"{where}: grid: {key}") for v in vals]
        twice = sorted({str(v) for v in typed if typed.count(v) > 1})
        if twice:  # each would be estimated and stored again, a duplicate row per combination
            raise GridError(f"{where}: grid: {key} lists {', '.join(twice)} more than once")
        grid.axes[key] = typed
    if grid.size > MAX_GRID_POINTS:
        sizes = " x ".join(f"{len(v)} {k}" for k, v in grid.axes.items())
        raise GridError(
            f"{where}: grid: {grid.size:,} points ({sizes}) is more than {MAX_GRID_POINTS:,}: "
            "split it into several grid files, or narrow an axis"
        )
    cons = doc.get("constraints") or []
    if not isinstance(cons, list):
        raise GridError(f"{where}: constraints: must be a list of expressions")
    known = {_env_key(k) for k in KEYS} | {_env_key(k) for k in grid.axes}
    grid.constraints = [parse_constraint(c, known, f"{where}: constraints") for c in cons]
    return grid


@dataclass
class SweepResult:
    sweep_id: str
    job: str
    predictions: list[Prediction]
    n_points: int
    n_constrained: int
    invalid: list[str]
    seconds: float
    replay_seconds: float


def expand(
    grid: Grid, est: Estimator, start: int = 0, stop: int | None = None
) -> tuple[list[ModelConfig], list[dict[str, float]], int, list[str]]:
    """The grid's valid configurations (constraints applied), their speed-ups, how many the
    constraints removed and why others were invalid; of the points `start:stop` only."""
    base = est.base.replace(**grid.base) if grid.base else est.base
    configs, speeds, invalid = [], [], []
    removed = 0
    for point in grid.points(start, stop):
        keys = {k: v for k, v in point.items() if not k.startswith(SPEEDUP_PREFIX)}
        speed = dict(grid.base_speedups)
        speed.update({k[len(SPEEDUP_PREFIX) :]: v for k, v in point.items() if k not in keys})
        cfg = base.derive(**keys)
        env = {_env_key(k): v for k, v in cfg.to_dict().items()}
        env.update({_env_key(k): v for k, v in point.items()})
        try:
            ok = all(c.holds(env) for c in grid.constraints)
        except (ZeroDivisionError, TypeError, ValueError, OverflowError) as e:
            raise GridError(f"{grid.path}: constraint failed on {point}: {e}") from None
        if not ok:
            removed += 1
            continue
        try:
            cfg.validate(f"{grid.path}: {point}")
        except ConfigError as e:
            invalid.append(str(e))
            continue
        configs.append(cfg)
        speeds.append(speed)
    return configs, speeds, removed, invalid


def run_sweep(
    est: Estimator, grid: Grid, job: str, start: int = 0, stop: int | None = None
) -> SweepResult:
    """Estimate every configuration of the grid (replayed in batches by structure); of its
    points `start:stop` only when given (a chunk: the chunks' predictions, in order, are the
    whole grid's)."""
    t0 = time.perf_counter()
    configs, speeds, removed, invalid = expand(grid, est, start, stop)
    t1 = time.perf_counter()
    base = (est.base.replace(**grid.base) if grid.base else est.base).to_dict()
    got: dict[int, Prediction] = {}
    failed: dict[int, str] = {}
    for idx in _graph_groups(configs).values():
        try:
            preds = est.predict([configs[i] for i in idx], [speeds[i] for i in idx])
            got.update(zip(idx, preds, strict=True))
            continue
        except TransformError:
            pass
        # a point out of range (a graph too big, durations beyond int64) fails its group's
        # batch: the group's points are then estimated one by one, the failing ones invalid
        for i in idx:
            try:
                got[i] = est.predict([configs[i]], [speeds[i]])[0]
            except TransformError as e:
                point = {k: v for k, v in configs[i].to_dict().items() if v != base.get(k)}
                failed[i] = f"{grid.path}: {point | _speed_keys(speeds[i])}: {e}"
    t2 = time.perf_counter()
    return SweepResult(
        sweep_id=uuid.uuid4().hex[:12],
        job=job,
        predictions=[got[i] for i in sorted(got)],
        n_points=len(range(grid.size)[start:stop]),
        n_constrained=removed,
        invalid=invalid + [failed[i] for i in sorted(failed)],
        seconds=t2 - t0,
        replay_seconds=t2 - t1,
    )


def _graph_groups(configs: Sequence[ModelConfig]) -> dict[tuple[Any, ...], list[int]]:
    """The configurations' indices by the shape of their step graph (layers, micro-batches,
    pipeline stages and schedule, recomputation): a point whose graph cannot be built or
    replayed fails its own group's batch only, and no other point is estimated twice."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for i, c in enumerate(configs):
        key = (c.layers, c.num_micro_batches, c.pp, c.pp_schedule if c.pp > 1 else "", c.recompute)
        groups.setdefault(key, []).append(i)
    return groups


def _speed_keys(speed: Mapping[str, float]) -> dict[str, float]:
    return {f"{SPEEDUP_PREFIX}{k}": v for k, v in speed.items()}


def to_json_speedups(speed: Mapping[str, float]) -> str:
    return json.dumps(dict(sorted(speed.items())), separators=(",", ":"))
