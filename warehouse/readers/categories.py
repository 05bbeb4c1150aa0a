"""Category normalisation across Kineto schema versions (legacy 2021, AMD/HIP, MTIA).

The aliases live in the schema registry (`warehouse.schema.CATEGORY_ALIASES`); this module applies
them to a whole column at once through its dictionary, so the cost is per distinct category,
not per event.
"""

from __future__ import annotations

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


def normalise_column(cat_raw: pa.Array) -> pa.Array:
    """Normalised categories of a raw `cat` column, as a plain string column."""
    encoded = pc.dictionary_encode(cat_raw)
    mapped = pa.array([normalise(c) for c in encoded.dictionary.to_pylist()], pa.string())
    indices = encoded.indices.fill_null(len(mapped))
    mapped = pa.concat_arrays([mapped, pa.array([""], pa.string())])
    return mapped.take(indices)
