"""A graph's arrays as one structure for the replay kernels (numba takes a namedtuple of arrays).

`GraphArrays` is one graph as `_replay_one`, `_replay_linear` and `_linear_order` read it (the
batch driver builds one per instance from its slices of the batch); `BatchArrays` is a
`GraphBatch`'s concatenation with its per-graph offsets, as `_batch` takes it. The meaning of
every array: `kernels.graph`. Plain ints and contiguous int64/int8 arrays only.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from kernels.graph import GraphBatch, ReplayGraph


class GraphArrays(NamedTuple):
    """One graph's structure; ``proc_ptr``/``succ_ptr`` may index a batch's concatenation."""

    proc: np.ndarray
    proc_ptr: np.ndarray
    proc_list: np.ndarray
    proc_dev: np.ndarray
    n_dev: int
    succ_ptr: np.ndarray
    succ_dst: np.ndarray
    succ_lat: np.ndarray
    indeg: np.ndarray
    launch_src: np.ndarray
    launch_dst: np.ndarray
    rt_mode: np.ndarray
    rt_arg: np.ndarray
    rt_lat: np.ndarray
    coll: np.ndarray
    coll_size: np.ndarray
    flags: np.ndarray


class BatchArrays(NamedTuple):
    """A `GraphBatch`'s arrays: graph g's tasks at ``task_off[g]``, its ``proc_ptr`` / ``succ_ptr``
    entries at ``proc_off[g] + g`` / ``task_off[g] + g``, its collectives at ``coll_off[g]``."""

    task_off: np.ndarray
    proc_off: np.ndarray
    coll_off: np.ndarray
    n_devices: np.ndarray
    proc: np.ndarray
    proc_ptr: np.ndarray
    proc_list: np.ndarray
    proc_device: np.ndarray
    succ_ptr: np.ndarray
    succ_dst: np.ndarray
    succ_lat: np.ndarray
    indeg: np.ndarray
    launch_src: np.ndarray
    launch_dst: np.ndarray
    rt_mode: np.ndarray
    rt_arg: np.ndarray
    rt_lat: np.ndarray
    coll: np.ndarray
    coll_size: np.ndarray
    flags: np.ndarray


def graph_arrays(g: ReplayGraph) -> GraphArrays:
    """The structure of one `ReplayGraph` (its arrays, not copied)."""
    return GraphArrays(
        g.proc,
        g.proc_ptr,
        g.proc_list,
        g.proc_device,
        int(g.n_devices),
        g.succ_ptr,
        g.succ_dst,
        g.succ_lat_ns,
        g.indeg,
        g.launch_src,
        g.launch_dst,
        g.rt_mode,
        g.rt_arg,
        g.rt_lat_ns,
        g.coll,
        g.coll_size,
        g.flags,
    )


def batch_arrays(b: GraphBatch) -> BatchArrays:
    """The structure of a `GraphBatch` (its arrays, not copied)."""
    return BatchArrays(
        b.task_off,
        b.proc_off,
        b.coll_off,
        b.n_devices,
        b.proc,
        b.proc_ptr,
        b.proc_list,
        b.proc_device,
        b.succ_ptr,
        b.succ_dst,
        b.succ_lat_ns,
        b.indeg,
        b.launch_src,
        b.launch_dst,
        b.rt_mode,
        b.rt_arg,
        b.rt_lat_ns,
        b.coll,
        b.coll_size,
        b.flags,
    )
