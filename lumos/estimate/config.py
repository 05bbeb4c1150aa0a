"""The model and parallel configuration an estimate starts from (and predicts for).

`ModelConfig` holds one training configuration: model shape, batch, parallel degrees and the
memory-relevant choices (precision, recomputation, ZeRO stage, sequence parallelism, fused
attention, vocabulary-parallel embedding, autocast, fused QKV, unfused norms); each field's
meaning is in docs/estimate-base.md, "Module notes". `parse_overrides` turns `key=value` strings
(`--base`, `--set`) into typed values, refusing unknown keys and bad values with a message that
names the key, the value and where it came from.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "ConfigError",
    "ModelConfig",
    "PP_SCHEDULES",
    "RECOMPUTE",
    "KEYS",
    "parse_overrides",
    "parse_value",
]

PP_SCHEDULES = ("1f1b", "gpipe")
RECOMPUTE = ("none", "selective", "full")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


class ConfigError(ValueError):
    """A configuration key or value is invalid; the message names where it came from."""


@dataclass(frozen=True)
class ModelConfig:
    """One training configuration. Sizes are of the whole model, not of one rank; `ffn` is the MLP
    intermediate size (0 means 4 × hidden); `kv_heads` the key/value heads (grouped-query
    attention: LLaMA 2/3, Mistral, Qwen; 0 means as many as `heads`); `device_memory` is bytes
    per device (0: unknown)."""

    layers: int = 1
    hidden: int = 1
    ffn: int = 0
    heads: int = 1
    kv_heads: int = 0
    seq: int = 1
    micro_batch: int = 1
    num_micro_batches: int = 1
    vocab: int = 0
    dp: int = 1
    pp: int = 1
    tp: int = 1
    pp_schedule: str = "1f1b"
    dtype_bytes: int = 2
    recompute: str = "none"
    zero_stage: int = 0
    sequence_parallel: bool = False
    gated_mlp: bool = False
    flash_attention: bool = False
    vocab_parallel: bool = False
    device_memory: int = 0
    autocast: bool = False
    fused_qkv: bool = False
    unfused_norm: bool = False
    # a head size the model states apart from hidden / heads (Gemma, Qwen3); 0: hidden / heads
    head_dim: int = 0
    # the LM head's weight is the token embedding's (GPT-2, Gemma, small Qwen): one tensor
    tied_embeddings: bool = False

    @property
    def ffn_size(self) -> int:
        return self.ffn or 4 * self.hidden

    @property
    def world_size(self) -> int:
        return self.dp * self.pp * self.tp

    @property
    def vocab_tp(self) -> int:
        """Ranks the vocabulary (embedding rows, LM head outputs) is split over."""
        return self.tp if self.vocab_parallel else 1

    @property
    def head_size(self) -> int:
        """One attention head's width: `head_dim` where the model states it, else hidden / heads."""
        return self.head_dim or self.hidden // self.heads

    def q_width(self, tp: int = 1) -> int:
        """Output width of one rank's query projection (the attention output's input width)."""
        return self.heads // tp * self.head_size

    @property
    def kv_heads_n(self) -> int:
        """Key/value heads (as many as `heads` unless grouped-query attention says fewer)."""
        return self.kv_heads or self.heads

    def qkv_width(self, tp: int = 1) -> int:
        """Output width of one rank's Q, K and V projections: its query heads, and its share of
        the key/value heads (each rank keeps at least one: Megatron replicates them when tp
        exceeds their count)."""
        return self.q_width(tp) + 2 * max(self.kv_heads_n // tp, 1) * self.head_size

    def validate(self, where: str = "configuration") -> ModelConfig:
        """Raise `ConfigError` naming `where` and the key when the values do not make sense."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.type in ("int", int):
                if not isinstance(value, int) or isinstance(value, bool):
                    raise ConfigError(f"{where}: {f.name} must be an integer, got {value!r}")
                _check_int(f.name, value, where)
        if self.pp_schedule not in PP_SCHEDULES:
            raise ConfigError(f"{where}: pp_schedule must be one of {PP_SCHEDULES}")
        if self.recompute not in RECOMPUTE:
            raise ConfigError(f"{where}: recompute must be one of {RECOMPUTE}")
        checks = [
            (
                self.head_dim > 0 or self.hidden % self.heads == 0,
                f"hidden {self.hidden} not a multiple of heads {self.heads} (and no head_dim)",
            ),
            (self.heads % self.tp == 0, f"heads {self.heads} not a multiple of tp {self.tp}"),
            (
                self.kv_heads_n <= self.heads and self.heads % self.kv_heads_n == 0,
                f"heads {self.heads} not a multiple of kv_heads {self.kv_heads_n}",
            ),
            (
                self.kv_heads_n % self.tp == 0 or self.tp % self.kv_heads_n == 0,
                f"kv_heads {self.kv_heads_n} and tp {self.tp}: one must divide the other",
            ),
            (self.ffn_size % self.tp == 0, f"ffn {self.ffn_size} not a multiple of tp {self.tp}"),
            (self.layers >= self.pp, f"layers {self.layers} fewer than pp stages {self.pp}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ConfigError(f"{where}: {message}")
        return self

    def replace(self, **changes: Any) -> ModelConfig:
        return dataclasses.replace(self, **changes)

    def derive(self, **changes: Any) -> ModelConfig:
        """A target configuration from this base: `changes` applied, and an FFN the changes do
        not state kept at the base's FFN/hidden ratio when the hidden size changes. Model
        families size the MLP as a multiple of hidden (GPT 4x, LLaMA 8/3x rounded), so a
        hidden x2 that kept the traced FFN width would be a model nobody trains. Rounded up to
        a multiple of the target's tp, which must divide it. Likewise a change of heads keeps the
        query heads per key/value head of grouped-query attention."""
        out = dataclasses.replace(self, **changes)
        if self.kv_heads and "kv_heads" not in changes and out.heads != self.heads:
            # the same number of query heads per key/value head (the group of GQA)
            group = max(self.heads // self.kv_heads, 1)
            out = dataclasses.replace(out, kv_heads=max(out.heads // group, 1))
        if self.ffn and "ffn" not in changes and out.hidden != self.hidden:
            ffn = max(1, round(self.ffn * out.hidden / self.hidden))
            ffn = -(-ffn // max(out.tp, 1)) * max(out.tp, 1)
            out = dataclasses.replace(out, ffn=ffn)
        return out

    def to_dict(self) -> dict[str, Any]:
        # every field is a number, string or bool: a shallow dict is asdict's without its deep
        # copies, which dominated building a large sweep's rows
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


# integer fields that may be 0 (none, or not known); every other one counts something
_ZERO_ALLOWED = ("ffn", "kv_heads", "vocab", "zero_stage", "device_memory", "head_dim")
# of those, the ones whose 0 only says a base's trace did not tell: never a value to ask for
_ZERO_IS_UNKNOWN = ("vocab",)


def _check_int(key: str, value: int, where: str) -> None:
    """Raise `ConfigError` when one integer field's value is out of its range on its own."""
    low = 0 if key in _ZERO_ALLOWED else 1
    if value < low:
        raise ConfigError(f"{where}: {key} must be >= {low}, got {value}")
    if key == "zero_stage" and value > 3:
        raise ConfigError(f"{where}: zero_stage must be 0, 1, 2 or 3, got {value}")
    if key == "dtype_bytes" and value not in (1, 2, 4, 8):
        raise ConfigError(f"{where}: dtype_bytes must be 1, 2, 4 or 8, got {value}")


KEYS: dict[str, type] = {f.name: f.type for f in dataclasses.fields(ModelConfig)}  # type: ignore[misc]
_TYPES = {"int": int, "str": str, "bool": bool}


def _type_of(key: str) -> type:
    t = KEYS[key]
    return _TYPES.get(t, t) if isinstance(t, str) else t


def parse_value(key: str, text: str, where: str = "override") -> Any:
    """The typed value of `key=text`; raises ConfigError naming `where`, the key and the value."""
    if key not in KEYS:
        raise ConfigError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(KEYS))})")
    kind = _type_of(key)
    raw = text.strip()
    if kind is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ConfigError(f"{where}: {key} must be true or false, got {text!r}")
    if kind is int:
        try:
            # Accept 1e9 / 80e9 for byte sizes, but only when it is a whole number.
            value = float(raw) if any(c in raw for c in ".eE") else int(raw)
        except ValueError:
            raise ConfigError(f"{where}: {key} must be an integer, got {text!r}") from None
        if isinstance(value, float):
            if not value.is_integer():
                raise ConfigError(f"{where}: {key} must be an integer, got {text!r}")
            value = int(value)
        # a value no configuration can hold is refused where it is given, not left to a warning
        _check_int(key, value, where)
        if key in _ZERO_IS_UNKNOWN and value == 0:
            raise ConfigError(
                f"{where}: {key}=0 means 'not known' (what a trace may leave it); "
                f"give the {key} size, or leave {key} out"
            )
        return value
    value = raw.lower()
    allowed = {"pp_schedule": PP_SCHEDULES, "recompute": RECOMPUTE}.get(key)
    if allowed and value not in allowed:
        raise ConfigError(f"{where}: {key} must be one of {allowed}, got {text!r}")
    return value


def parse_overrides(
    items: Iterable[str] | Mapping[str, Any] | None, where: str = "--base"
) -> dict[str, Any]:
    """`["layers=48", "tp=8"]` (or a mapping, e.g. a grid file's `base:`) → typed dict."""
    out: dict[str, Any] = {}
    if not items:
        return out
    pairs: Iterable[tuple[str, Any]]
    if isinstance(items, Mapping):
        pairs = ((str(k), str(v)) for k, v in items.items())
    else:
        parsed = []
        for item in items:
            if "=" not in item:
                raise ConfigError(f"{where}: expected key=value, got {item!r}")
            key, _, value = item.partition("=")
            parsed.append((key.strip(), value))
        pairs = parsed
    for key, value in pairs:
        if key in out:
            raise ConfigError(f"{where}: key {key!r} given twice")
        out[key] = parse_value(key, str(value), where)
    return out
