"""Category normalisation across Kineto schema versions (legacy 2021, AMD/HIP, MTIA).

The aliases live in the schema registry (`warehouse.schema.CATEGORY_ALIASES`); this module applies
them to a whole column at once through its dictionary, so the cost is per distinct category,
not per event.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from warehouse.schema import CATEGORY_ALIASES

# Categories that only the 2021 schema wrote; their presence marks a legacy trace.
LEGACY_CATEGORIES = frozenset({"Operator", "Runtime", "Kernel"})


def normalise(cat: str | None) -> str:
    """The normalised name of one raw category ('' for an event without one)."""
    if cat is None:
        return ""
    return CATEGORY_ALIASES.get(cat, cat)


@dataclass(frozen=True)
class EncodedCategories:
    """A chunk's raw `cat` column encoded once: the normalised column, and per row the index of
    its raw category in `raw` (`len(raw)` for an event without one), which the reader's
    accounting counts instead of hashing the strings again."""

    cat: pa.Array
    raw: list[str]
    codes: np.ndarray

    def raw_counts(self) -> dict[str, int]:
        """Events per raw category ('' for events without one, as `normalise` has it)."""
        counts = np.bincount(self.codes, minlength=len(self.raw) + 1)
        out: dict[str, int] = {}
        for r, c in zip([*self.raw, ""], counts.tolist(), strict=True):
            if c:
                out[r] = out.get(r, 0) + c
        return out

    def rows_in(self, normalised: tuple[str, ...]) -> np.ndarray:
        """Per row, whether its normalised category is one of `normalised`."""
        hit = np.array([normalise(r) in normalised for r in self.raw] + [False], dtype=bool)
        return hit[self.codes]


def encode_categories(cat_raw: pa.Array) -> EncodedCategories:
    """Normalise a raw `cat` column through its dictionary (cost per distinct category)."""
    encoded = pc.dictionary_encode(cat_raw)
    raw = encoded.dictionary.to_pylist()
    normalised = [normalise(c) for c in raw]
    codes = encoded.indices.fill_null(len(raw))
    if normalised == raw:  # no alias applies (any trace of the current schema): no copy
        cat = cat_raw if cat_raw.null_count == 0 else cat_raw.fill_null("")
    else:
        cat = pa.array(normalised + [""], pa.string()).take(codes)
    return EncodedCategories(cat, raw, codes.to_numpy())
