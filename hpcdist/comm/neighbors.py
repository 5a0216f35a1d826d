"""Neighbour collectives on an MPI distributed-graph topology.

:func:`create_graph` makes a context on the same ranks whose communicator
carries a distributed-graph topology (``Create_dist_graph_adjacent``): each
rank names the ranks it receives from and the ranks it sends to.
:func:`neighbor_allgather` then exchanges an array with those neighbours
only, in one MPI neighbour collective, checked, counted in the statistics
and the timeline and marked for the stall watchdog like every collective.

Examples
--------
>>> ring = ctx.graph([(ctx.rank - 1) % ctx.size, (ctx.rank + 1) % ctx.size])  # doctest: +SKIP
>>> ring.neighbor_allgather(x).shape == (2,) + x.shape                         # doctest: +SKIP
"""


from .._checks import is_integer
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .calls import NP_SCALAR, PY_SCALAR, resolve
from .checks import agree, mark_raised_on_every_rank, validated_on_every_rank, watched
from .mpi import MPI

__all__ = ["create_graph", "neighbor_allgather", "graph_neighbors"]


def _checked_ranks(ranks, what, ctx):
    """``ranks`` as a list of distinct ranks of ``ctx``, or an error naming the bad one."""
    try:
        ranks = list(ranks)
    except TypeError:
        raise InvalidArgumentTypeError(f"graph: {what}={ranks!r} should be a sequence of "
                                       "ranks") from None
    for rank in ranks:
        if not is_integer(rank):
            raise InvalidArgumentTypeError(f"graph: {what} holds {rank!r}, not a rank (an int)")
        if not 0 <= rank < ctx.size:
            raise InvalidArgumentError(f"graph: {what} names rank {rank}, outside the "
                                       f"{ctx.size} ranks 0..{ctx.size - 1}")
    if len(set(ranks)) != len(ranks):
        raise InvalidArgumentError(f"graph: {what}={ranks} names a rank twice; list each "
                                   "neighbour once")
    return [int(rank) for rank in ranks]


def _one_sided_edge(everyone):
    """The first edge only one of its ends names, as a message (None when all agree)."""
    sent = {(rank, dest) for rank, (_, destinations) in enumerate(everyone)
            for dest in destinations}
    received = {(source, rank) for rank, (sources, _) in enumerate(everyone)
                for source in sources}
    for source, dest in sorted(sent ^ received):
        if (source, dest) in sent:
            return (f"rank {source} sends to rank {dest}, but rank {dest} does not list "
                    f"{source} among its sources")
        return (f"rank {dest} receives from rank {source}, but rank {source} does not list "
                f"{dest} among its destinations")
    return None


def create_graph(ctx, sources, destinations=None):
    """Collective: a context on ``ctx``'s ranks with a distributed-graph topology.

    Parameters
    ----------
    ctx : Context
    sources : sequence of int
        The ranks this rank receives from, in the order
        :func:`neighbor_allgather` stacks their arrays.
    destinations : sequence of int, optional
        The ranks this rank sends to (default ``sources``: an undirected graph).

    Returns
    -------
    Context
        A child of ``ctx`` (freed with it) whose collectives include
        :func:`neighbor_allgather`.

    Raises
    ------
    InvalidArgumentError
        On every rank: a rank outside the context, a rank named twice, or
        an edge that only one of its two ends names.
    """
    with validated_on_every_rank(ctx):
        sources = _checked_ranks(sources, "sources", ctx)
        destinations = (list(sources) if destinations is None
                        else _checked_ranks(destinations, "destinations", ctx))
    with watched(ctx, "graph"):
        mismatch = (None if ctx.size == 1 else
                    _one_sided_edge(ctx._private_comm.allgather((sources, destinations))))
        if mismatch is not None:
            raise mark_raised_on_every_rank(InvalidArgumentError(
                f"graph: {mismatch}; every edge must be named by both of its ranks"))
        comm = ctx.comm.Create_dist_graph_adjacent(sources, destinations, reorder=False)
        graph = ctx._child(comm)
    graph._neighbors = (tuple(sources), tuple(destinations))
    return graph


def graph_neighbors(ctx):
    """``(sources, destinations)`` of ``ctx``'s graph topology (an error says how to make one)."""
    neighbors = getattr(ctx, "_neighbors", None)
    if neighbors is None:
        if ctx.comm.Get_topology() != MPI.DIST_GRAPH:
            raise InvalidArgumentError("neighbor_allgather: the context has no graph topology; "
                                       "make one with ctx.graph(sources, destinations)")
        sources, destinations, _ = ctx.comm.Get_dist_neighbors()
        neighbors = ctx._neighbors = (tuple(sources), tuple(destinations))
    return neighbors


def neighbor_allgather(x, *, ctx):
    """Every source neighbour's ``x``, stacked in the order of the graph's sources.

    Parameters
    ----------
    x : array or scalar
        The same shape and dtype on every rank (check mode verifies).
    ctx : Context
        A context with a graph topology (:meth:`Context.graph`).

    Returns
    -------
    array of shape ``(n_sources, *x.shape)``
        The kind of array ``x`` is (a NumPy array for a scalar).
    """
    sources, destinations = graph_neighbors(ctx)
    call = resolve(x, ctx, "neighbor_allgather")
    data = call.data
    if ctx.check:
        agree(ctx, "neighbor_allgather", call.describe())
    start = ctx._begin("neighbor_allgather", call)
    result = call.new_output((len(sources),) + data.shape)
    if ctx.size == 1:
        for row in range(len(sources)):  # only self-loops in a one-rank graph
            call.copy_into(result[row, ...], data)
    else:
        ctx.comm.Neighbor_allgather(call.spec, call.spec_of(result))
    ctx._end("neighbor_allgather", start, data.nbytes * len(destinations), result.nbytes)
    if call.kind == PY_SCALAR or call.kind == NP_SCALAR:
        return result
    return call.deliver(result)
