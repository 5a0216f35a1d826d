"""Collective benchmark: hpcdist against raw mpi4py and torch.distributed (gloo).

Run under MPI with one thread per rank (the benchmark does not set these
itself; they keep NumPy and torch from oversubscribing the cores)::

    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1
    mpiexec -n 2 python -m hpcdist.bench.collectives           # 8 B .. 64 MiB, 2-4 minutes
    mpiexec -n 2 python -m hpcdist.bench.collectives --quick   # 4 sizes, < 30 s
    hpcdist bench collectives --sizes 8,64K,16M --repetitions 9

Other work on the machine makes the numbers noisy (MPI ranks busy-poll, so a
rank that loses its core stalls the others): the load average before and
after is printed and kept in the JSON.

Operations (float32 vectors; "size" is the bytes each rank contributes). Each
baseline is the mpi4py code that does the same job with the same allocations:

``allreduce``
    ``hpcdist.allreduce(x)`` vs ``comm.Allreduce(x, np.empty_like(x))`` vs
    ``o = t.clone(); dist.all_reduce(o)``: a new result array per call.
``allreduce_out``
    ``hpcdist.allreduce(x, out=out)`` vs ``comm.Allreduce(x, out)`` vs
    ``dist.all_reduce(out_t)`` (gloo's in-place form; the buffer's values
    grow, which does not change the speed).
``broadcast``
    ``hpcdist.broadcast(buf, root=0)`` vs ``comm.Bcast(buf, root=0)`` vs
    ``dist.broadcast(buf_t, src=0)``, non-root ``buf`` preallocated (hpcdist
    still sends a header, since receivers could have passed None).
``broadcast_known``
    The same with ``hpcdist.broadcast(buf, root=0, shape_known=True)``: every
    rank promises an array of the root's shape, so no header message.
``broadcast_none``
    ``hpcdist.broadcast(x if rank == 0 else None, root=0)``: receivers do not
    know the shape and get a new array. mpi4py's form for that is
    ``comm.bcast(x, root=0)`` (pickle); from 1 MiB up a second baseline,
    ``pkl5``, is ``mpi4py.util.pkl5.Intracomm(comm).bcast(x, root=0)``
    (pickle protocol 5, the array's buffer out of band). No gloo column: gloo's
    receivers must know the shape.
``allgather``
    ``hpcdist.allgather(x, counts=[n] * size)`` vs
    ``comm.Allgather(x, np.empty(n * size))`` vs ``dist.all_gather_single``
    into a new tensor.
``allgather_uneven``
    ``hpcdist.allgather(x)`` (sizes exchanged first, so they may differ per
    rank) vs mpi4py doing the same work: ``Allgather`` of the counts, then
    ``Allgather`` when they are all equal (as here, and as hpcdist does),
    else ``Allgatherv``. (With MPICH, ``Allgatherv`` can be much slower than
    ``Allgather`` at large sizes, so always calling it would flatter
    hpcdist.) No gloo column: gloo needs equal sizes.
``pingpong``
    A round trip between ranks 0 and 1 (other ranks idle): rank 0
    ``hpcdist.send(x, 1); hpcdist.recv(1, out=buf)``, rank 1 the mirror
    (``recv`` then ``send`` back), self-describing messages (a header with
    shape and dtype, the payload inside it up to hpcdist's inline threshold)
    vs ``comm.Send(x, 1); comm.Recv(buf, 1)`` and its mirror. Times are per
    round trip, two calls on each rank. Needs 2 ranks.
``pingpong_known``
    The same with ``shape_known=True`` on ``send`` and ``recv`` (the raw
    buffer alone, one ``Send``/``Recv``), vs the same ``Send``/``Recv``.

The mpi4py baselines run on ``MPI.COMM_WORLD.Dup()`` (same MPI library,
separate communicator; the pkl5 communicator wraps it); barriers and timing
reductions run on another duplicate. torch tensors share memory with the
NumPy buffers (``torch.from_numpy``); gloo is left out when torch cannot be
imported.

Timing: per (operation, size), each implementation's result is checked once,
then it is warmed up and timed in R repetitions. A repetition runs every
implementation once, one after another (the first one rotates between
repetitions): a barrier, then a batch of k calls, k chosen per implementation
on rank 0 so a batch lasts about ``--batch-ms``, and broadcast. A
repetition's time is the per-call time of the slowest rank. Reported: the
median over repetitions, the ratios hpcdist/baseline of the medians and
hpcdist's overhead per call: its median minus the baseline's, in
microseconds, divided by the calls each rank makes (2 for a ping-pong round
trip). The JSON also keeps every repetition, the minimums, the ratio of the
minimums and the median of the per-repetition ratios, which are less
sensitive to other load.

Summary: for each operation and baseline, the worst row of two size bands:
below 64 KiB, where a call's fixed cost dominates, hpcdist's overhead per
call in microseconds; from 64 KiB up, where the bytes dominate, the ratio.

Output: a table on rank 0, ``<output-dir>/<name>.json`` (machine, settings,
every repetition, medians, ratios, overheads, summary) and
``<output-dir>/<name>.png`` (time, ratios and overheads against size;
skipped when matplotlib is missing).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..comm import allgather, allreduce, broadcast, init, recv, send
from ..comm.mpi import MPI, library_name
from ..exceptions import InvalidArgumentError
from .common import (
    KIB,
    MIB,
    benchmark_parser,
    byte_size_list,
    format_size,
    init_gloo,
    load_average,
    machine_info,
    positive_float,
    pyplot,
    write_report,
)

__all__ = ["main", "OPERATIONS", "SUMMARY_BANDS", "summarize"]

OPERATIONS = ("allreduce", "allreduce_out", "broadcast", "broadcast_known", "broadcast_none",
              "allgather", "allgather_uneven", "pingpong", "pingpong_known")
BASELINES = ("mpi4py", "floor", "pkl5", "gloo")
IMPLEMENTATIONS = ("hpcdist",) + BASELINES
PINGPONGS = ("pingpong", "pingpong_known")  # between ranks 0 and 1; need 2 ranks

DEFAULT_SIZES = (8,) + tuple(4**k for k in range(3, 14))  # 8 B, 64 B, 256 B, ..., 64 MiB
QUICK_SIZES = (8, KIB, 64 * KIB, MIB)
DEFAULT_REPETITIONS = 15  # at every size: with fewer, one slow repetition moves a median
QUICK_REPETITIONS = 5
DEFAULT_BATCH_MS = 10.0
QUICK_BATCH_MS = 2.0
MAX_ITERATIONS = 200_000  # cap on k, the calls per timed batch
WARMUP_CALLS = 3

LARGE_MESSAGE = 64 * KIB  # where the summary changes from overhead per call to ratio
PKL5_FROM = MIB  # the pkl5 baseline of broadcast_none runs from this size up


# size bands, [low, high) in bytes per rank
BELOW_LARGE = (0, LARGE_MESSAGE)
FROM_LARGE = (LARGE_MESSAGE, None)

#: the summary's (band of sizes, measure): below 64 KiB a call's fixed cost dominates, so
#: hpcdist's overhead per call says more than a ratio; from 64 KiB up the bytes dominate
SUMMARY_BANDS = ((BELOW_LARGE, "overhead_us"), (FROM_LARGE, "ratio"))

DTYPE = np.float32
ITEMSIZE = np.dtype(DTYPE).itemsize

#: what each implementation calls, per operation (printed and stored in the JSON)
CALLS = {
    "allreduce": {
        "hpcdist": "hpcdist.allreduce(x)",
        "mpi4py": "comm.Allreduce(x, np.empty_like(x))",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
        "gloo": "o = t.clone(); dist.all_reduce(o)",
    },
    "allreduce_out": {
        "hpcdist": "hpcdist.allreduce(x, out=out)",
        "mpi4py": "comm.Allreduce(x, out)",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
        "gloo": "dist.all_reduce(out_t)  # in place",
    },
    "broadcast": {
        "hpcdist": "hpcdist.broadcast(buf, root=0)",
        "mpi4py": "comm.Bcast(buf, root=0)",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
        "gloo": "dist.broadcast(buf_t, src=0)",
    },
    "broadcast_known": {
        "hpcdist": "hpcdist.broadcast(buf, root=0, shape_known=True)",
        "mpi4py": "comm.Bcast(buf, root=0)",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
        "gloo": "dist.broadcast(buf_t, src=0)",
    },
    "broadcast_none": {
        "hpcdist": "hpcdist.broadcast(x if rank == 0 else None, root=0)",
        "mpi4py": "comm.bcast(x if rank == 0 else None, root=0)  # pickle",
        "pkl5": f"pkl5.Intracomm(comm).bcast(x if rank == 0 else None, root=0)  "
                f"# from {format_size(PKL5_FROM)}",
    },
    "allgather": {
        "hpcdist": "hpcdist.allgather(x, counts=[n] * size)",
        "mpi4py": "comm.Allgather(x, np.empty(n * size))",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
        "gloo": "dist.all_gather_single(torch.empty(n * size), t)",
    },
    "allgather_uneven": {
        "hpcdist": "hpcdist.allgather(x)",
        "mpi4py": "comm.Allgather(n, counts); out = np.empty(sum(counts)); "
                  "comm.Allgather(x, out) if the counts are equal else Allgatherv",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
    },
    "pingpong": {
        "hpcdist": "rank 0: hpcdist.send(x, 1); hpcdist.recv(1, out=buf)  "
                   "rank 1: hpcdist.recv(0, out=buf); hpcdist.send(buf, 0)",
        "mpi4py": "rank 0: comm.Send(x, 1); comm.Recv(buf, 1)  "
                  "rank 1: comm.Recv(buf, 0); comm.Send(buf, 0)",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
    },
    "pingpong_known": {
        "hpcdist": "the same with shape_known=True on send and recv",
        "mpi4py": "rank 0: comm.Send(x, 1); comm.Recv(buf, 1)  "
                  "rank 1: comm.Recv(buf, 0); comm.Send(buf, 0)",
        "floor": "the mpi4py call between ctx._begin and ctx._end (the bookkeeping)",
    },
}
#: calls each rank makes per timed unit, where not 1 (the overhead is per call)
CALLS_PER_ROUND = {"pingpong": 2, "pingpong_known": 2}


@dataclass
class Backends:
    """Everything the implementations run on.

    Attributes
    ----------
    comm : mpi4py.MPI.Comm
        ``MPI.COMM_WORLD.Dup()`` for the mpi4py baseline.
    ctrl : mpi4py.MPI.Comm
        Another duplicate, for barriers and timing reductions.
    pkl5 : mpi4py.util.pkl5.Intracomm
        ``pkl5.Intracomm(comm)``, built once, for the pkl5 baseline.
    ctx : Context
        hpcdist's default context, whose bookkeeping the floor baseline adds.
    torch, dist : module or None
        ``torch`` and ``torch.distributed`` with a gloo group started, or None.
    """

    comm: Any
    ctrl: Any
    pkl5: Any
    ctx: Any = None
    torch: Any = None
    dist: Any = None

    @property
    def rank(self) -> int:
        return self.ctrl.Get_rank()

    @property
    def size(self) -> int:
        return self.ctrl.Get_size()


# -- arguments ------------------------------------------------------------------------------

def _operation_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(name not in OPERATIONS for name in names):
        raise argparse.ArgumentTypeError(
            f"operations={text!r} should be a comma list of {', '.join(OPERATIONS)}")
    return [name for name in OPERATIONS if name in names]


def _build_parser() -> argparse.ArgumentParser:
    parser = benchmark_parser(
        "collectives",
        "Time hpcdist's allreduce, broadcast, allgather and send/recv against the mpi4py code "
        "doing the same job and torch.distributed (gloo), interleaved on the same buffers, "
        "and report the ratios. Run it under mpiexec, with OMP_NUM_THREADS=1.",
        quick=f"short run: 8 B, 1 KiB, 64 KiB, 1 MiB, {QUICK_REPETITIONS} repetitions, "
              f"{QUICK_BATCH_MS:g} ms batches")
    parser.add_argument(
        "--sizes", type=byte_size_list(ITEMSIZE, "float32"),
        help="comma list of bytes per rank, suffixes K, M, G for KiB, MiB, GiB "
             "(default: 8 B, then powers of 4 from 64 B to 64 MiB)")
    parser.add_argument(
        "--repetitions", type=int,
        help=f"timed repetitions per size (default {DEFAULT_REPETITIONS})")
    parser.add_argument(
        "--batch-ms", type=positive_float,
        help=f"target duration of one timed batch (default {DEFAULT_BATCH_MS:g} ms)")
    parser.add_argument(
        "--operations", type=_operation_list, default=list(OPERATIONS),
        help=f"comma list of operations (default: all of {', '.join(OPERATIONS)})")
    parser.add_argument("--no-gloo", action="store_true",
                        help="leave torch.distributed out even when torch is importable")
    return parser


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.repetitions is not None and args.repetitions < 1:
        parser.error(f"--repetitions={args.repetitions} should be >= 1")
    if args.sizes is None:
        args.sizes = list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    if args.batch_ms is None:
        args.batch_ms = QUICK_BATCH_MS if args.quick else DEFAULT_BATCH_MS
    return args


def _repetitions(args: argparse.Namespace) -> int:
    """Timed repetitions per size: as given, else the default of the mode."""
    if args.repetitions is not None:
        return args.repetitions
    return QUICK_REPETITIONS if args.quick else DEFAULT_REPETITIONS


# -- operations -----------------------------------------------------------------------------
# A builder returns (implementations, expected): name -> zero-argument callable
# returning the result, and the result this rank should get (None: nothing to check
# here, as on the ranks a ping-pong leaves idle).

def _local_vector(n: int, rank: int) -> np.ndarray:
    """Rank-dependent small integers as float32, so that sums are exact."""
    return (np.arange(n) % 13 + rank).astype(DTYPE)


def _gathered(n: int, size: int) -> np.ndarray:
    return np.concatenate([_local_vector(n, r) for r in range(size)])


def _summed(n: int, size: int) -> np.ndarray:
    return sum(_local_vector(n, r).astype(np.float64) for r in range(size)).astype(DTYPE)


def _build_allreduce(b: Backends, n: int):
    x = _local_vector(n, b.rank)

    def mpi4py_allreduce():
        out = np.empty_like(x)
        b.comm.Allreduce(x, out)
        return out

    impls = {"hpcdist": lambda: allreduce(x), "mpi4py": mpi4py_allreduce}
    if b.dist is not None:
        t = b.torch.from_numpy(x)

        def gloo_allreduce():
            out = t.clone()
            b.dist.all_reduce(out)
            return out

        impls["gloo"] = gloo_allreduce
    return impls, _summed(n, b.size)


def _build_allreduce_out(b: Backends, n: int):
    x = _local_vector(n, b.rank)
    out = np.empty_like(x)

    def mpi4py_allreduce_out():
        b.comm.Allreduce(x, out)
        return out

    impls = {"hpcdist": lambda: allreduce(x, out=out), "mpi4py": mpi4py_allreduce_out}
    if b.dist is not None:
        out_t = b.torch.from_numpy(out)
        impls["gloo"] = lambda: b.dist.all_reduce(out_t)
    return impls, _summed(n, b.size)


def _build_broadcast(b: Backends, n: int, **options):
    buf = _local_vector(n, 0) if b.rank == 0 else np.zeros(n, dtype=DTYPE)

    def mpi4py_broadcast():
        b.comm.Bcast(buf, root=0)
        return buf

    impls = {"hpcdist": lambda: broadcast(buf, root=0, **options),
             "mpi4py": mpi4py_broadcast}
    if b.dist is not None:
        buf_t = b.torch.from_numpy(buf)
        impls["gloo"] = lambda: b.dist.broadcast(buf_t, src=0)
    return impls, _local_vector(n, 0)


def _build_broadcast_none(b: Backends, n: int):
    x = _local_vector(n, 0) if b.rank == 0 else None
    impls = {"hpcdist": lambda: broadcast(x, root=0),
             "mpi4py": lambda: b.comm.bcast(x, root=0)}
    if n * ITEMSIZE >= PKL5_FROM:
        impls["pkl5"] = lambda: b.pkl5.bcast(x, root=0)
    return impls, _local_vector(n, 0)


def _build_allgather(b: Backends, n: int):
    x = _local_vector(n, b.rank)
    counts = [n] * b.size

    def mpi4py_allgather():
        out = np.empty(n * b.size, dtype=x.dtype)
        b.comm.Allgather(x, out)
        return out

    impls = {"hpcdist": lambda: allgather(x, counts=counts), "mpi4py": mpi4py_allgather}
    if b.dist is not None:
        t = b.torch.from_numpy(x)
        gather_into = getattr(b.dist, "all_gather_single", None) or b.dist.all_gather_into_tensor

        def gloo_allgather():
            out = b.torch.empty(n * b.size, dtype=t.dtype)
            gather_into(out, t)
            return out

        impls["gloo"] = gloo_allgather
    return impls, _gathered(n, b.size)


def _build_allgather_uneven(b: Backends, n: int):
    x = _local_vector(n, b.rank)
    local_count = np.array([n], dtype=np.int64)

    def mpi4py_allgather_sizes_first():
        counts = np.empty(b.size, dtype=np.int64)
        b.comm.Allgather(local_count, counts)
        out = np.empty(int(counts.sum()), dtype=x.dtype)
        if (counts == counts[0]).all():
            b.comm.Allgather(x, out)
        else:
            b.comm.Allgatherv(x, (out, counts))
        return out

    impls = {"hpcdist": lambda: allgather(x), "mpi4py": mpi4py_allgather_sizes_first}
    return impls, _gathered(n, b.size)


def _build_pingpong(b: Backends, n: int, **options):
    """Round trips between ranks 0 and 1; ``options`` go to hpcdist's send and recv.

    Each implementation has its own receive buffer, so that checking one
    result does not see another's.
    """
    if b.rank > 1:
        return {"hpcdist": lambda: None, "mpi4py": lambda: None}, None
    x = _local_vector(n, 0)
    hpcdist_buf, mpi4py_buf = np.zeros(n, dtype=DTYPE), np.zeros(n, dtype=DTYPE)
    if b.rank == 0:
        def hpcdist_pingpong():
            send(x, 1, **options)
            return recv(1, out=hpcdist_buf, **options)

        def mpi4py_pingpong():
            b.comm.Send(x, 1)
            b.comm.Recv(mpi4py_buf, 1)
            return mpi4py_buf
    else:
        def hpcdist_pingpong():
            echo = recv(0, out=hpcdist_buf, **options)
            send(echo, 0, **options)
            return echo

        def mpi4py_pingpong():
            b.comm.Recv(mpi4py_buf, 0)
            b.comm.Send(mpi4py_buf, 0)
            return mpi4py_buf
    return {"hpcdist": hpcdist_pingpong, "mpi4py": mpi4py_pingpong}, x


BUILDERS: dict[str, Callable] = {
    "allreduce": _build_allreduce,
    "allreduce_out": _build_allreduce_out,
    "broadcast": _build_broadcast,
    "broadcast_known": functools.partial(_build_broadcast, shape_known=True),
    "broadcast_none": _build_broadcast_none,
    "allgather": _build_allgather,
    "allgather_uneven": _build_allgather_uneven,
    "pingpong": _build_pingpong,
    "pingpong_known": functools.partial(_build_pingpong, shape_known=True),
}


def _with_bookkeeping(ctx, fn: Callable[[], Any], calls: int) -> Callable[[], Any]:
    """The floor: ``fn`` (an mpi4py baseline making ``calls`` calls) with the bookkeeping
    every hpcdist call does (the stall watchdog's mark and the statistics:
    ``ctx._begin`` and ``ctx._end``) once per call."""
    begin, end = ctx._begin, ctx._end

    def floor():
        start = begin("floor")
        result = fn()
        end("floor", start, 0, 0)
        return result

    def floor_of_two_calls():  # a ping-pong round: a send and a receive on each rank
        end("floor", begin("floor"), 0, 0)
        return floor()

    if calls not in (1, 2):
        raise InvalidArgumentError(f"calls={calls} should be 1 or 2")
    return floor if calls == 1 else floor_of_two_calls


# -- timing ---------------------------------------------------------------------------------

def _batch_time(fn: Callable[[], Any], k: int, ctrl) -> float:
    """Seconds per call of ``fn`` over a batch of ``k`` calls, on the slowest rank.

    Collective over ``ctrl``: every rank passes the same ``k`` and gets the
    same value back.
    """
    ctrl.Barrier()
    start = time.perf_counter()
    for _ in range(k):
        fn()
    per_call = (time.perf_counter() - start) / k
    return max(ctrl.allgather(per_call))


def _verify(fn: Callable[[], Any], expected: np.ndarray | None, ctrl) -> bool:
    """Call ``fn`` once; True on every rank when every rank got its ``expected``.

    A rank whose ``expected`` is None only makes the call.
    """
    result = fn()
    ok = expected is None or (np.shape(result) == expected.shape
                              and bool(np.array_equal(result, expected)))
    return all(ctrl.allgather(ok))


def _pilot(fn: Callable[[], Any], min_s: float, ctrl) -> float:
    """Per-call seconds, from batches grown until one lasts ``min_s``."""
    k = 1
    while True:
        per_call = _batch_time(fn, k, ctrl)
        if per_call * k >= min_s or k >= MAX_ITERATIONS:
            return min(per_call, _batch_time(fn, k, ctrl))  # a second look, past any hiccup
        k = min(MAX_ITERATIONS, max(2 * k, math.ceil(1.2 * min_s / max(per_call, 1e-9))))


def _choose_iterations(impls: dict, target_s: float, ctrl) -> dict[str, int]:
    """Calls per batch, per implementation, so that a batch lasts ``target_s``.

    Decided on rank 0 from pilot batches (which also warm up) and broadcast.
    """
    per_call = {name: _pilot(fn, target_s / 4, ctrl) for name, fn in impls.items()}
    k = None
    if ctrl.Get_rank() == 0:
        k = {name: int(min(MAX_ITERATIONS, max(1, math.ceil(target_s / t))))
             for name, t in per_call.items()}
    return ctrl.bcast(k, root=0)


def _measure(impls: dict, repetitions: int, target_s: float, ctrl):
    """Warm up, pick the batch lengths, then time ``repetitions`` interleaved rounds.

    Returns
    -------
    k : dict of str to int
        Calls per timed batch, per implementation.
    times : dict of str to list of float
        Seconds per call (slowest rank) in every repetition, per implementation.
    """
    for fn in impls.values():
        _batch_time(fn, WARMUP_CALLS, ctrl)
    k = _choose_iterations(impls, target_s, ctrl)
    names = list(impls)
    times = {name: [] for name in names}
    for rep in range(repetitions):
        first = rep % len(names)
        for name in names[first:] + names[:first]:
            times[name].append(_batch_time(impls[name], k[name], ctrl))
    return k, times


def _ratios(times: dict[str, float]) -> dict[str, float]:
    """hpcdist's time over each baseline's: ``{"hpcdist/mpi4py": r, "hpcdist/gloo": r}``."""
    return {f"hpcdist/{base}": times["hpcdist"] / times[base]
            for base in BASELINES if base in times}


def _paired_ratios(times: dict[str, list[float]]) -> dict[str, float]:
    """Median over repetitions of hpcdist's time over each baseline's in the same one."""
    return {f"hpcdist/{base}": float(np.median(np.divide(times["hpcdist"], times[base])))
            for base in BASELINES if base in times}


def _overheads(times_us: dict[str, float], calls: int) -> dict[str, float]:
    """hpcdist's time minus each baseline's, per call: ``{"mpi4py": us, "gloo": us}``."""
    return {base: (times_us["hpcdist"] - times_us[base]) / calls
            for base in BASELINES if base in times_us}


def _run_case(b: Backends, operation: str, size: int, args: argparse.Namespace) -> dict:
    """Check and time one (operation, size); returns its JSON record."""
    n = size // ITEMSIZE
    impls, expected = BUILDERS[operation](b, n)
    if "floor" in CALLS[operation]:
        impls["floor"] = _with_bookkeeping(b.ctx, impls["mpi4py"],
                                           CALLS_PER_ROUND.get(operation, 1))
    verified = {name: _verify(fn, expected, b.ctrl) for name, fn in impls.items()
                if name != "gloo"}  # gloo's in-place calls return nothing to check
    repetitions = _repetitions(args)
    k, times = _measure(impls, repetitions, args.batch_ms / 1e3, b.ctrl)
    times_us = {name: [t * 1e6 for t in values] for name, values in times.items()}
    medians = {name: float(np.median(values)) for name, values in times_us.items()}
    minimums = {name: min(values) for name, values in times_us.items()}
    return {
        "size_bytes": size, "elements": n, "iterations_per_batch": k,
        "repetitions": repetitions, "verified": verified,
        "median_us": medians, "min_us": minimums, "times_us": times_us,
        "ratio": _ratios(medians), "ratio_of_minimums": _ratios(minimums),
        "ratio_paired": _paired_ratios(times),
        "overhead_us": _overheads(medians, CALLS_PER_ROUND.get(operation, 1)),
    }


# -- summary --------------------------------------------------------------------------------

def _measured(record: dict, baseline: str, measure: str) -> float | None:
    """A record's ratio or overhead against ``baseline``; None where it has no such column."""
    if measure == "ratio":
        return record["ratio"].get(f"hpcdist/{baseline}")
    return record["overhead_us"].get(baseline)


def _in_band(size: int, sizes: tuple) -> bool:
    low, high = sizes
    return size >= low and (high is None or size < high)


def summarize(operations: dict) -> dict:
    """The worst row of each band of :data:`SUMMARY_BANDS`, per operation and baseline.

    Parameters
    ----------
    operations : dict
        Operation name -> ``{"results": [record, ...]}``, a record holding
        ``size_bytes``, ``ratio`` (``{"hpcdist/mpi4py": r, ...}``) and
        ``overhead_us`` (``{"mpi4py": us, ...}``), as the benchmark writes them.

    Returns
    -------
    dict
        Operation name -> one entry per baseline and band with a row:
        ``baseline``, ``sizes`` (``[low, high)`` in bytes, ``high`` None
        for no end), ``measure`` (``"overhead_us"`` or ``"ratio"``),
        ``worst`` (the band's largest value) and ``at_size_bytes``.
    """
    summary = {}
    for operation, entry in operations.items():
        records = entry["results"]
        summary[operation] = []
        for baseline in BASELINES:
            for sizes, measure in SUMMARY_BANDS:
                values = [(value, record["size_bytes"]) for record in records
                          if _in_band(record["size_bytes"], sizes)
                          and (value := _measured(record, baseline, measure)) is not None]
                if values:
                    worst, at = max(values)
                    summary[operation].append({"baseline": baseline, "sizes": list(sizes),
                                               "measure": measure, "worst": worst,
                                               "at_size_bytes": at})
    return summary


# -- report ---------------------------------------------------------------------------------

def _baselines(operation: str, gloo: bool) -> list[str]:
    """The baselines the table shows for ``operation``."""
    return [name for name in CALLS[operation] if name != "hpcdist" and (gloo or name != "gloo")]


def _header(operation: str, baselines: list[str]) -> str:
    calls = "\n".join(f"  {name:8s} {CALLS[operation][name]}" for name in ["hpcdist"] + baselines)
    columns = f"{'size':>8} {'hpcdist us':>12}" + "".join(
        f" {name + ' us':>12} {'ratio':>7}  {'+us/call':>9} " for name in baselines)
    return f"\n{operation}:\n{calls}\n{columns}"


def _cell(record: dict, baseline: str) -> str:
    """Baseline's time, ratio and hpcdist's overhead per call."""
    if baseline not in record["median_us"]:
        return f" {'-':>12} {'-':>7}  {'-':>9} "
    ratio, overhead = (f"{_measured(record, baseline, measure):{spec}} "
                       for measure, spec in (("ratio", "7.3f"), ("overhead_us", "+9.2f")))
    return f" {record['median_us'][baseline]:12.2f} {ratio} {overhead}"


def _row(operation: str, record: dict, baselines: list[str]) -> str:
    """One table line: size, hpcdist's time, then time, ratio and overhead per baseline."""
    text = f"{format_size(record['size_bytes']):>8} {record['median_us']['hpcdist']:12.2f}"
    text += "".join(_cell(record, baseline) for baseline in baselines)
    wrong = [name for name, ok in record["verified"].items() if not ok]
    return text + (f"  WRONG RESULT: {', '.join(wrong)}" if wrong else "")


MEASURE_LABELS = {"ratio": "ratio", "overhead_us": "+us/call"}


def _band_text(sizes: tuple) -> str:
    """``(0, 65536)`` as ``"< 64 KiB"``, ``(65536, None)`` as ``">= 64 KiB"``."""
    low, high = sizes
    if high is None:
        return "every size" if low == 0 else f">= {format_size(low)}"
    return f"< {format_size(high)}" if low == 0 else f"{format_size(low)} - {format_size(high)}"


def _summary_line(operation: str, entry: dict) -> str:
    """One summary row: operation, baseline, sizes, measure, worst value and its size."""
    value = format(entry["worst"], ".3f" if entry["measure"] == "ratio" else "+.2f")
    return (f"{operation:<18} {entry['baseline']:<7} {_band_text(entry['sizes']):<11} "
            f"{MEASURE_LABELS[entry['measure']]:<9} {value:>9} @ "
            f"{format_size(entry['at_size_bytes'])}")


def _summary_text(summary: dict, ranks: int) -> str:
    lines = [f"\nSummary at {ranks} ranks: the worst row of each band of sizes (+us/call: "
             "hpcdist's median minus the baseline's, per call, in microseconds; ratio: "
             "hpcdist's median over the baseline's)",
             f"{'operation':<18} {'vs':<7} {'sizes':<11} {'measure':<9} {'worst':>9}"]
    lines += [_summary_line(operation, entry)
              for operation, entries in summary.items() for entry in entries]
    return "\n".join(lines)


def _machine_info(b: Backends, load_before: list[float] | None) -> dict:
    return machine_info(b.ctrl, torch=None if b.torch is None else str(b.torch.__version__),
                        load_average_before=load_before, load_average_after=load_average())


def _settings(args: argparse.Namespace) -> dict:
    return {
        "sizes_bytes": list(args.sizes),
        "dtype": np.dtype(DTYPE).name,
        "quick": args.quick,
        "repetitions": args.repetitions,
        "batch_ms": args.batch_ms,
        "timing": "per repetition and implementation: barrier, batch of k calls (k per "
                  "implementation), per-call time of the slowest rank; implementations "
                  "interleaved, the first one rotating; medians over repetitions",
        "overhead": "hpcdist's median minus the baseline's, in microseconds, per call (a "
                    "ping-pong round trip is 2 calls on each rank)",
    }


# -- plot -----------------------------------------------------------------------------------

def _size_axis(ax, sizes: list[int]) -> None:
    """Log x axis labelled 8 B, 1 KiB, 1 MiB, ..."""
    ax.set_xscale("log", base=2)
    ticks = sizes[::-2][::-1] if len(sizes) > 6 else sizes  # every other one, the largest kept
    ax.set_xticks(ticks, [format_size(s) for s in ticks], fontsize="small")
    ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def _plot_times(ax, entry: dict, sizes: list[int]) -> None:
    """Median time of each implementation against size (pkl5 from 1 MiB only)."""
    for name in entry["implementations"]:
        points = [(r["size_bytes"], r["median_us"][name]) for r in entry["results"]
                  if name in r["median_us"]]
        ax.plot(*zip(*points), "o-", ms=3, label=name)
    ax.set_yscale("log")
    _size_axis(ax, sizes)
    ax.legend(fontsize="small")


COLORS = {"mpi4py": "tab:blue", "floor": "tab:purple", "pkl5": "tab:orange",
          "gloo": "tab:green"}


def _plot_measure(ax, operation: str, entry: dict, sizes: list[int], measure: str,
                  baselines: tuple) -> None:
    """hpcdist's ratio or overhead against each baseline and size."""
    plotted = False
    for baseline in baselines:
        points = [(r["size_bytes"], value) for r in entry["results"]
                  if (value := _measured(r, baseline, measure)) is not None]
        if points:
            ax.plot(*zip(*points), "o-", ms=3, label=f"vs {baseline}", color=COLORS[baseline])
            plotted = True
    if not plotted:
        ax.text(0.5, 0.5, f"no {' or '.join(baselines)} baseline", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    if measure == "overhead_us":
        ax.set_yscale("symlog", linthresh=1.0)  # microseconds below 64 KiB, more above
        ax.axhline(0.0, color="gray", lw=0.8)
    elif "gloo" in baselines:
        ax.set_yscale("log")
    else:
        ax.axhline(1.0, color="gray", lw=0.8)
    _size_axis(ax, sizes)
    ax.legend(fontsize="small")


#: the plot's rows below the times: (measure, baselines, y label)
PLOT_ROWS = (("ratio", ("mpi4py", "pkl5"), "hpcdist / baseline"),
             ("overhead_us", ("mpi4py", "floor", "pkl5"), "hpcdist - baseline (us per call)"),
             ("ratio", ("gloo",), "hpcdist / gloo"))


def _plot(report: dict, path: Path) -> bool:
    """Time, ratios and overheads against size, one column per operation.

    Returns False (and writes nothing) without matplotlib.
    """
    plt = pyplot()
    if plt is None:
        return False
    operations = report["operations"]
    fig, axes = plt.subplots(1 + len(PLOT_ROWS), len(operations),
                             figsize=(4.2 * len(operations), 13), squeeze=False)
    for col, (operation, entry) in enumerate(operations.items()):
        sizes = [r["size_bytes"] for r in entry["results"]]
        _plot_times(axes[0, col], entry, sizes)
        for row, (measure, baselines, _) in enumerate(PLOT_ROWS, start=1):
            _plot_measure(axes[row, col], operation, entry, sizes, measure, baselines)
        axes[0, col].set_title(operation)
        axes[-1, col].set_xlabel("bytes per rank")
    axes[0, 0].set_ylabel("median time per call (us;\nping-pong: per round trip)")
    for row, (_, _, label) in enumerate(PLOT_ROWS, start=1):
        axes[row, 0].set_ylabel(label)
    machine = report["machine"]
    fig.suptitle(f"hpcdist collectives: {machine['ranks']} ranks on {machine['hostname']} "
                 f"({machine['cpu_count']} cores), {machine['mpi_library']}, {machine['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _write_outputs(report: dict, args: argparse.Namespace) -> None:
    write_report(report, args.output_dir, args.name, plot=None if args.no_plot else _plot)


# -- main -----------------------------------------------------------------------------------

def _run(b: Backends, args: argparse.Namespace) -> dict:
    """Measure every requested operation and size; rank 0 prints rows as they come."""
    operations = {}
    for operation in args.operations:
        if operation in PINGPONGS and b.size < 2:
            if b.rank == 0:
                print(f"\n{operation}: skipped (a ping-pong needs 2 ranks)", flush=True)
            continue
        baselines = _baselines(operation, gloo=b.dist is not None)
        if b.rank == 0:
            print(_header(operation, baselines), flush=True)
        records = []
        for size in args.sizes:
            records.append(_run_case(b, operation, size, args))
            if b.rank == 0:
                print(_row(operation, records[-1], baselines), flush=True)
        implementations = [name for name in IMPLEMENTATIONS
                           if any(name in record["median_us"] for record in records)]
        operations[operation] = {
            "implementations": implementations,
            "calls": {name: CALLS[operation][name] for name in implementations},
            "results": records,
        }
    return operations


def _pkl5_intracomm(comm):
    """``mpi4py.util.pkl5.Intracomm(comm)``, the communicator of the pkl5 baseline.

    Imported here rather than at the top: importing ``mpi4py.util.pkl5``
    imports ``mpi4py.MPI``, which initialises MPI, and importing an hpcdist
    module must start no MPI (only :mod:`hpcdist.comm.mpi` loads it, on first
    use). By the time this runs, ``comm`` exists, so MPI is already loaded.
    """
    from mpi4py.util import pkl5  # baselines may call mpi4py (setup.cfg's import contract)

    return pkl5.Intracomm(comm)


def main(argv: list[str] | None = None) -> int:
    """Run the collective benchmark under ``mpiexec``; rank 0 reports.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments without the program name (default
        ``sys.argv[1:]``); ``--help`` lists them.

    Returns
    -------
    int
        Exit status, 0 on success.
    """
    args = _parse_args(argv)
    ctx = init()  # the default context, on which hpcdist.allreduce(x) and the others run
    ctx.check = False
    comm, ctrl = MPI.COMM_WORLD.Dup(), MPI.COMM_WORLD.Dup()
    torch, dist = init_gloo(ctrl, enabled=not args.no_gloo)
    b = Backends(comm=comm, ctrl=ctrl, pkl5=_pkl5_intracomm(comm), ctx=ctx, torch=torch,
                 dist=dist)
    load_before = load_average()
    try:
        if b.rank == 0:
            library = library_name()
            print(f"hpcdist collectives benchmark: {b.size} ranks, {library}, "
                  f"gloo {'on' if dist else 'off'}, {os.cpu_count()} cores, load average "
                  f"{load_before}\ntimes: median per call in microseconds (ping-pong: per "
                  f"round trip); ratio: hpcdist/baseline; +us/call: hpcdist's overhead per "
                  f"call above the baseline", flush=True)
        operations = _run(b, args)
        machine = _machine_info(b, load_before)
        if b.rank == 0:
            summary = summarize(operations)
            print(_summary_text(summary, b.size), flush=True)
            _write_outputs({"benchmark": "collectives", "machine": machine,
                            "settings": _settings(args), "operations": operations,
                            "summary": summary}, args)
    finally:
        if dist is not None:
            dist.destroy_process_group()
        comm.Free()
        ctrl.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
