"""Dask arrays in and out of an MPI job (optional extra ``dask``).

:func:`from_dask` gives each rank its balanced block of rows of a lazy Dask
array: every rank slices the same graph to its own rows and computes only
those, with the local threaded scheduler and the rank's own threads, so the
whole array is never materialised anywhere. :func:`to_dask` is the way back:
the ranks' rows as one Dask array on one rank, chunked by rank.
"""

import math

import numpy as np

from ..comm import gather, resolve_context
from ..comm.agreement import agree_config
from ..comm.checks import validated_on_every_rank
from ..comm.threads import available_cores
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .partition import DataPartitioner

__all__ = ["from_dask", "to_dask"]


def _as_dask_array(data):
    """A Dask array from a Dask array, DataFrame or Series (rows with known lengths)."""
    import dask.array  # the dask extra: imported only when it is used

    if isinstance(data, dask.array.Array):
        return data
    if hasattr(data, "to_dask_array"):  # a Dask DataFrame or Series
        return data.to_dask_array(lengths=True)
    raise InvalidArgumentTypeError(
        f"from_dask: expected a dask.array.Array or a Dask DataFrame, got "
        f"{type(data).__name__}; a NumPy array every rank holds goes through "
        "hpcdist.data.shard")


def from_dask(array, *, ctx=None):
    """This rank's balanced block of rows (axis 0) of a lazy Dask array, computed here.

    Collective: every rank passes the same lazy array (the same graph; it is
    checked by shape and dtype). Rank ``r`` computes only the rows
    ``DataPartitioner(n, size).get_partition(r)``, whatever the array's
    chunking, with Dask's threaded scheduler on the rank's cores.

    Parameters
    ----------
    array : dask.array.Array, dask.dataframe.DataFrame or Series
        A DataFrame is taken as ``to_dask_array(lengths=True)``.
    ctx : Context, optional

    Returns
    -------
    numpy.ndarray
        Of shape ``(n_local,) + array.shape[1:]``.

    Raises
    ------
    ValueError
        Unknown chunk sizes (e.g. after boolean indexing), naming the fix;
        a 0-d array.
    ConfigMismatchError
        Ranks passed arrays of different shapes or dtypes.
    """
    ctx = resolve_context(ctx)
    with validated_on_every_rank(ctx):
        array = _as_dask_array(array)
        if array.ndim == 0:
            raise InvalidArgumentError("from_dask: a 0-d array has no rows to split over ranks")
        if any(math.isnan(size) for size in array.shape):
            raise InvalidArgumentError(
                f"from_dask: the array's shape {array.shape} has unknown sizes "
                "(nan), e.g. after boolean indexing; call "
                "array.compute_chunk_sizes() first (or, for a DataFrame, "
                "to_dask_array(lengths=True))")
    agree_config(ctx, "from_dask", {"shape": tuple(int(n) for n in array.shape),
                                    "dtype": np.dtype(array.dtype)})
    start, stop = DataPartitioner(int(array.shape[0]), ctx.size).get_partition(ctx.rank)
    threads = max(1, available_cores() // max(ctx.local_size, 1))
    return np.asarray(array[start:stop].compute(scheduler="threads", num_workers=threads))


def to_dask(local, *, ctx=None, root=0):
    """The ranks' rows as one Dask array on ``root``, one chunk per rank (None elsewhere).

    Collective: every rank passes its rows (any number, zero included; the
    other dimensions and the dtype must agree).

    Parameters
    ----------
    local : array-like of shape (n_local, ...)
    ctx : Context, optional
    root : int, default=0

    Returns
    -------
    dask.array.Array or None
    """
    import dask.array

    ctx = resolve_context(ctx)
    local = np.asarray(local)
    with validated_on_every_rank(ctx):
        if local.ndim == 0:
            raise InvalidArgumentError(
                "to_dask: pass an array of rows (at least 1-D), not a scalar")
    agree_config(ctx, "to_dask", {"dtype": local.dtype, "row shape": local.shape[1:]})
    counts = gather(np.array([len(local)]), root, ctx=ctx)
    rows = gather(local, root, ctx=ctx)
    if rows is None:
        return None
    chunks = (tuple(int(n) for n in counts),) + tuple((n,) for n in local.shape[1:])
    return dask.array.from_array(rows, chunks=chunks)
