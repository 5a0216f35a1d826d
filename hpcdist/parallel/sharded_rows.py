"""Which rows of each parameter a rank owns under sharded data parallelism (private).

Every trainable parameter is split along its first axis into one balanced,
contiguous block of rows per rank (the first ``rows % size`` ranks get one row
more; a rank may own none), the split :class:`hpcdist.checkpoint.Sharded`
entries restore into at any number of ranks. A 0-d parameter counts as one
row. Splitting each parameter (rather than one flat buffer of all of them)
keeps every block a contiguous view of its parameter, so reduce-scatter and
allgather work on the parameters' own memory, and a checkpoint entry is the
parameter's own shape.

:class:`RowLayout` and the coalesced collectives take any array with NumPy's
reshape and slicing (NumPy, CuPy, and torch tensors for the layout), so
:mod:`hpcdist.torch` shards torch parameters with them, through comm's
zero-copy views of its tensors.
"""

import numpy as np

from .._partition import balanced_counts
from ..nn.module import Parameter, array_module

__all__ = ["RowLayout", "RowShard", "released", "is_released", "bytes_held", "rank_counts",
           "rank_major_rows", "reduce_rows_coalesced", "allgather_rows", "gather_rows_coalesced"]


class RowLayout:
    """Which rows of one parameter each rank owns.

    Parameters
    ----------
    name : str
        The parameter's dotted name in the module.
    parameter : Parameter or torch.Tensor
        The module's parameter (its whole shape).
    size, rank : int
        The number of ranks and this rank.

    Attributes
    ----------
    counts : list of int
        Rows of each rank's block.
    start, stop : int
        This rank's rows.
    """

    def __init__(self, name, parameter, size, rank):
        self.name = name
        self.parameter = parameter
        self.shape = tuple(parameter.shape)
        self.dtype = parameter.dtype
        self.row_shape = self.shape[1:] if self.shape else ()
        self.counts = balanced_counts(self.shape[0] if self.shape else 1, size)
        self.start = sum(self.counts[:rank])
        self.stop = self.start + self.counts[rank]

    @property
    def row_elements(self):
        return int(np.prod(self.row_shape, dtype=np.int64))

    def as_rows(self, array):
        """``array`` (of the parameter's shape) viewed with rows first (0-d: one row)."""
        return array.reshape((-1,) + self.row_shape) if not self.shape else array

    def rows_of(self, array):
        """This rank's rows of ``array`` (a view)."""
        if not self.shape:
            return array.reshape(1)[self.start:self.stop]
        return array[self.start:self.stop]

    def whole(self, gathered):
        """The gathered rows as an array of the parameter's shape."""
        return gathered.reshape(self.shape)


class RowShard(RowLayout):
    """This rank's rows of one parameter, as a :class:`Parameter` the optimizer steps.

    Parameters and attributes as :class:`RowLayout`'s, and:

    Attributes
    ----------
    piece : Parameter
        This rank's block, of shape ``(stop - start,) + shape[1:]``; the
        optimizer's parameter in place of ``parameter``.
    master : Parameter or None
        With mixed precision: the float32 master of the piece's rows, which
        the optimizer steps in place of the (16-bit) piece.
    """

    def __init__(self, name, parameter, size, rank):
        super().__init__(name, parameter, size, rank)
        self.piece = Parameter(self.rows_of(parameter.data), requires_grad=True)
        self.master = None

    @property
    def stepped(self):
        """The rows the optimizer steps: the master under mixed precision, else the piece."""
        return self.piece if self.master is None else self.master

    def accumulate_piece_grad(self, reduced):
        """Add a reduced block of rows to the piece's gradient."""
        piece = self.piece
        if piece.grad is None:
            piece.grad = reduced.reshape(piece.shape)
        else:
            piece.grad += reduced.reshape(piece.shape)


def released(parameter_shape, dtype, xp=np):
    """A stand-in for a released parameter: its shape and dtype, no memory (read-only)."""
    return xp.broadcast_to(xp.zeros((), dtype=dtype), parameter_shape)


def is_released(array):
    """Whether ``array`` is a stand-in made by :func:`released`."""
    return not array.flags.writeable and not any(array.strides)


def bytes_held(array):
    """Bytes of memory ``array`` holds (0 for none or a released stand-in)."""
    return 0 if array is None or is_released(array) else int(array.nbytes)


def rank_counts(shards):
    """Elements of each rank's rows of all ``shards`` together."""
    return [sum(shard.counts[rank] * shard.row_elements for shard in shards)
            for rank in range(len(shards[0].counts))]


def rank_major_rows(shards):
    """Where each rank's rows of each shard lie in one flat array laid out rank by rank (the
    order a reduce-scatter hands out and an allgather collects): ``(rank, index, start,
    stop, offset)``, the rows ``start:stop`` of ``shards[index]``, ``rank``'s, from element
    ``offset`` on."""
    offset = 0
    for rank in range(len(shards[0].counts)):
        for index, shard in enumerate(shards):
            start = sum(shard.counts[:rank])
            stop = start + shard.counts[rank]
            yield rank, index, start, stop, offset
            offset += (stop - start) * shard.row_elements


def _rank_major(shards, arrays, xp):
    """Every rank's rows of ``arrays`` in one flat array, rank by rank, and each rank's
    element count."""
    if len(shards) == 1:  # one parameter's rows are in rank order already: no copy
        return shards[0].as_rows(arrays[0]).reshape(-1), rank_counts(shards)
    parts = [shards[index].as_rows(arrays[index])[start:stop].reshape(-1)
             for _, index, start, stop, _ in rank_major_rows(shards)]
    return xp.concatenate(parts), rank_counts(shards)


def reduce_rows_coalesced(shards, grads, ctx, reduce_scatter):
    """This rank's rows of the average over ranks of each of ``grads`` (arrays of the shards'
    parameters' shapes, one dtype), in one reduce-scatter: flat arrays, one a shard."""
    xp = array_module(grads[0])
    flat, counts = _rank_major(shards, grads, xp)
    reduced = reduce_scatter(flat, op="mean", counts=counts, ctx=ctx)
    results, offset = [], 0
    for shard in shards:
        n = (shard.stop - shard.start) * shard.row_elements
        results.append(reduced[offset:offset + n])
        offset += n
    return results


def allgather_rows(shards, pieces, ctx, allgather):
    """Every rank's rows of the shards (this rank's being ``pieces``, one dtype) in one flat
    array laid out as :func:`rank_major_rows` says, from one allgather."""
    xp = array_module(pieces[0])
    local = (pieces[0].reshape(-1) if len(pieces) == 1 else
             xp.concatenate([piece.reshape(-1) for piece in pieces]))
    return allgather(local, counts=rank_counts(shards), ctx=ctx)


def gather_rows_coalesced(shards, ctx, allgather):
    """Write the other ranks' rows of each shard's piece (one dtype) into the whole
    parameters, in one allgather (this rank's piece is a view of its rows already)."""
    gathered = allgather_rows(shards, [shard.piece.data for shard in shards], ctx, allgather)
    for rank, index, start, stop, offset in rank_major_rows(shards):
        if rank == ctx.rank:
            continue
        shard = shards[index]
        rows = shard.as_rows(shard.parameter.data)[start:stop]
        rows[...] = gathered[offset:offset + rows.size].reshape(rows.shape)
