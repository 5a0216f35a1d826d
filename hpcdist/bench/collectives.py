"""Collective benchmark: hpcdist against raw mpi4py and torch.distributed (gloo).

Run under MPI with one thread per rank (the benchmark does not set these
itself; they keep NumPy and torch from oversubscribing the cores)::

    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1
    mpiexec -n 2 python -m hpcdist.bench.collectives           # 8 B .. 64 MiB, 1-3 minutes
    mpiexec -n 2 python -m hpcdist.bench.collectives --quick   # 4 sizes, < 20 s
    hpcdist bench collectives --sizes 8,64K,16M --repetitions 9

Other work on the machine makes the numbers noisy (MPI ranks busy-poll, so a
rank that loses its core stalls the others): the load average before and
after is printed and kept in the JSON.

Operations (float32 vectors; "size" is the bytes each rank contributes):

``allreduce``
    ``hpcdist.allreduce(x)`` vs ``comm.Allreduce(x, np.empty_like(x))`` vs
    ``o = t.clone(); dist.all_reduce(o)``: a new result array per call.
``allreduce_out``
    ``hpcdist.allreduce(x, out=out)`` vs ``comm.Allreduce(x, out)`` vs
    ``dist.all_reduce(out_t)`` (gloo's in-place form; the buffer's values
    grow, which does not change the speed).
``broadcast``
    ``hpcdist.broadcast(buf, root=0)`` vs ``comm.Bcast(buf, root=0)`` vs
    ``dist.broadcast(buf_t, src=0)``, non-root ``buf`` preallocated.
``broadcast_known``
    The same with ``hpcdist.broadcast(buf, root=0, shape_known=True)``: every
    rank promises an array of the root's shape, so no header message.
``allgather``
    ``hpcdist.allgather(x, counts=[n] * size)`` vs
    ``comm.Allgather(x, np.empty(n * size))`` vs ``dist.all_gather_single``
    into a new tensor.
``allgather_uneven``
    ``hpcdist.allgather(x)`` (sizes exchanged first, so they may differ per
    rank) vs mpi4py doing the same work: ``Allgather`` of the counts, then
    ``Allgather`` when they are all equal (as here, and as hpcdist does),
    else ``Allgatherv``. (With MPICH, ``Allgatherv`` is up to 2x slower than
    ``Allgather`` at large sizes, so always calling it would flatter
    hpcdist.) No gloo column: gloo needs equal sizes.

The mpi4py baseline runs on ``MPI.COMM_WORLD.Dup()`` (same MPI library,
separate communicator); barriers and timing reductions run on another
duplicate. torch tensors share memory with the NumPy buffers
(``torch.from_numpy``); gloo is left out when torch cannot be imported.

Timing: per (operation, size), each implementation's result is checked once,
then it is warmed up and timed in R repetitions. A repetition runs every
implementation once, one after another (the first one rotates between
repetitions): a barrier, then a batch of k calls, k chosen per implementation
on rank 0 so a batch lasts about ``--batch-ms``, and broadcast. A
repetition's time is the per-call time of the slowest rank. Reported: the
median over repetitions and the ratios hpcdist/mpi4py and hpcdist/gloo of the
medians. The JSON also keeps every repetition, the minimums, the ratio of the
minimums and the median of the per-repetition ratios, which are less
sensitive to other load.

Output: a table on rank 0, ``<output-dir>/<name>.json`` (machine, settings,
every repetition, medians, ratios, summary) and ``<output-dir>/<name>.png``
(time and ratios against size; skipped when matplotlib is missing).
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..comm import allgather, allreduce, broadcast, init
from ..comm.mpi import MPI
from .common import (
    KIB,
    MIB,
    format_size,
    init_gloo,
    load_average,
    machine_info,
    pyplot,
    write_report,
)

__all__ = ["main", "OPERATIONS"]

OPERATIONS = ("allreduce", "allreduce_out", "broadcast", "broadcast_known", "allgather",
              "allgather_uneven")
IMPLEMENTATIONS = ("hpcdist", "mpi4py", "gloo")

DEFAULT_SIZES = (8,) + tuple(4**k for k in range(3, 14))  # 8 B, 64 B, 256 B, ..., 64 MiB
QUICK_SIZES = (8, KIB, 64 * KIB, MIB)
DEFAULT_REPETITIONS = 15  # at every size: 5 left single big-message points at 1.3x on a noisy VM
QUICK_REPETITIONS = 5
DEFAULT_BATCH_MS = 10.0
QUICK_BATCH_MS = 2.0
MAX_ITERATIONS = 200_000  # cap on k, the calls per timed batch
WARMUP_CALLS = 3

LARGE_MESSAGE = 64 * KIB  # where the hpcdist/mpi4py target changes
TARGET_LARGE = 1.05  # hpcdist/mpi4py from LARGE_MESSAGE up
TARGET_SMALL = 1.5  # hpcdist/mpi4py below LARGE_MESSAGE
TARGET_GLOO = 1.0  # hpcdist/gloo must stay below this at every size

DTYPE = np.float32
ITEMSIZE = np.dtype(DTYPE).itemsize

#: what each implementation calls, per operation (printed and stored in the JSON)
CALLS = {
    "allreduce": {
        "hpcdist": "hpcdist.allreduce(x)",
        "mpi4py": "comm.Allreduce(x, np.empty_like(x))",
        "gloo": "o = t.clone(); dist.all_reduce(o)",
    },
    "allreduce_out": {
        "hpcdist": "hpcdist.allreduce(x, out=out)",
        "mpi4py": "comm.Allreduce(x, out)",
        "gloo": "dist.all_reduce(out_t)  # in place",
    },
    "broadcast": {
        "hpcdist": "hpcdist.broadcast(buf, root=0)",
        "mpi4py": "comm.Bcast(buf, root=0)",
        "gloo": "dist.broadcast(buf_t, src=0)",
    },
    "broadcast_known": {
        "hpcdist": "hpcdist.broadcast(buf, root=0, shape_known=True)",
        "mpi4py": "comm.Bcast(buf, root=0)",
        "gloo": "dist.broadcast(buf_t, src=0)",
    },
    "allgather": {
        "hpcdist": "hpcdist.allgather(x, counts=[n] * size)",
        "mpi4py": "comm.Allgather(x, np.empty(n * size))",
        "gloo": "dist.all_gather_single(torch.empty(n * size), t)",
    },
    "allgather_uneven": {
        "hpcdist": "hpcdist.allgather(x)",
        "mpi4py": "comm.Allgather(n, counts); out = np.empty(sum(counts)); "
                  "comm.Allgather(x, out) if the counts are equal else Allgatherv",
    },
}


@dataclass
class Backends:
    """Everything the implementations run on.

    Attributes
    ----------
    comm : mpi4py.MPI.Comm
        ``MPI.COMM_WORLD.Dup()`` for the mpi4py baseline.
    ctrl : mpi4py.MPI.Comm
        Another duplicate, for barriers and timing reductions.
    torch, dist : module or None
        ``torch`` and ``torch.distributed`` with a gloo group started, or None.
    """

    comm: Any
    ctrl: Any
    torch: Any = None
    dist: Any = None

    @property
    def rank(self) -> int:
        return self.ctrl.Get_rank()

    @property
    def size(self) -> int:
        return self.ctrl.Get_size()


# -- arguments ------------------------------------------------------------------------------

def _parse_size(text: str) -> int:
    """``"64"``, ``"64B"``, ``"1K"``, ``"1KiB"``, ``"16M"`` in bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(i?b)?\s*", text, flags=re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"size={text!r} is not a byte count; use e.g. 8, 1K, 64KiB, 16M")
    scale = {"": 1, "k": KIB, "m": MIB, "g": 1024 * MIB}[match.group(2).lower()]
    value = int(match.group(1)) * scale
    if value < ITEMSIZE or value % ITEMSIZE:
        raise argparse.ArgumentTypeError(
            f"size={text!r} ({value} B) should be a positive multiple of {ITEMSIZE} (float32)")
    return value


def _size_list(text: str) -> list[int]:
    return sorted({_parse_size(part) for part in text.split(",") if part.strip()})


def _operation_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    if not names or any(name not in OPERATIONS for name in names):
        raise argparse.ArgumentTypeError(
            f"operations={text!r} should be a comma list of {', '.join(OPERATIONS)}")
    return [name for name in OPERATIONS if name in names]


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcdist bench collectives",
        description="Time hpcdist's allreduce, broadcast and allgather against raw mpi4py and "
                    "torch.distributed (gloo), interleaved on the same buffers. Run it under "
                    "mpiexec, with OMP_NUM_THREADS=1.")
    parser.add_argument(
        "--sizes", type=_size_list,
        help="comma list of bytes per rank, suffixes K, M, G for KiB, MiB, GiB "
             "(default: 8 B, then powers of 4 from 64 B to 64 MiB)")
    parser.add_argument(
        "--quick", action="store_true",
        help=f"short run: 8 B, 1 KiB, 64 KiB, 1 MiB, {QUICK_REPETITIONS} repetitions, "
             f"{QUICK_BATCH_MS:g} ms batches")
    parser.add_argument(
        "--repetitions", type=int,
        help=f"timed repetitions per size (default {DEFAULT_REPETITIONS})")
    parser.add_argument(
        "--batch-ms", type=float,
        help=f"target duration of one timed batch (default {DEFAULT_BATCH_MS:g} ms)")
    parser.add_argument(
        "--operations", type=_operation_list, default=list(OPERATIONS),
        help=f"comma list of operations (default: all of {', '.join(OPERATIONS)})")
    parser.add_argument("--no-gloo", action="store_true",
                        help="leave torch.distributed out even when torch is importable")
    parser.add_argument("--no-plot", action="store_true", help="do not write the PNG plot")
    parser.add_argument("--output-dir", type=Path, default=Path("benchmarks") / "results",
                        help="where NAME.json and NAME.png go (default: ./benchmarks/results)")
    parser.add_argument("--name", default="collectives",
                        help="file name stem of the outputs (default: collectives)")
    return parser


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.repetitions is not None and args.repetitions < 1:
        parser.error(f"--repetitions={args.repetitions} should be >= 1")
    if args.batch_ms is not None and args.batch_ms <= 0:
        parser.error(f"--batch-ms={args.batch_ms} should be > 0")
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
# returning the result, and the result every rank should get.

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


BUILDERS: dict[str, Callable] = {
    "allreduce": _build_allreduce,
    "allreduce_out": _build_allreduce_out,
    "broadcast": _build_broadcast,
    "broadcast_known": functools.partial(_build_broadcast, shape_known=True),
    "allgather": _build_allgather,
    "allgather_uneven": _build_allgather_uneven,
}


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


def _verify(fn: Callable[[], Any], expected: np.ndarray, ctrl) -> bool:
    """Call ``fn`` once; True on every rank when every rank got ``expected``."""
    result = np.asarray(fn())
    ok = result.shape == expected.shape and bool(np.array_equal(result, expected))
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
            for base in ("mpi4py", "gloo") if base in times}


def _paired_ratios(times: dict[str, list[float]]) -> dict[str, float]:
    """Median over repetitions of hpcdist's time over each baseline's in the same one."""
    return {f"hpcdist/{base}": float(np.median(np.divide(times["hpcdist"], times[base])))
            for base in ("mpi4py", "gloo") if base in times}


def _run_case(b: Backends, operation: str, size: int, args: argparse.Namespace) -> dict:
    """Check and time one (operation, size); returns its JSON record."""
    n = size // ITEMSIZE
    impls, expected = BUILDERS[operation](b, n)
    verified = {name: _verify(impls[name], expected, b.ctrl) for name in ("hpcdist", "mpi4py")}
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
    }


# -- report ---------------------------------------------------------------------------------

def _target(size: int) -> float:
    return TARGET_LARGE if size >= LARGE_MESSAGE else TARGET_SMALL


def _header(operation: str, gloo: bool) -> str:
    calls = "\n".join(f"  {name:8s} {call}" for name, call in CALLS[operation].items()
                      if gloo or name != "gloo")
    columns = (f"{'size':>8} {'hpcdist us':>12} {'mpi4py us':>12} {'ratio':>7}  "
               f"{'gloo us':>12} {'ratio':>7}")
    return f"\n{operation}:\n{calls}\n{columns}"


def _cell(time_us: float | None, ratio: float | None, missed: bool) -> str:
    if ratio is None:
        return f"{'-':>12} {'-':>7} "
    return f"{time_us:12.2f} {ratio:7.3f}{'!' if missed else ' '}"


def _row(record: dict) -> str:
    """One table line: size, hpcdist, mpi4py and ratio, gloo and ratio; '!' = missed."""
    med, ratio, size = record["median_us"], record["ratio"], record["size_bytes"]
    vs_mpi, vs_gloo = ratio["hpcdist/mpi4py"], ratio.get("hpcdist/gloo")
    text = (f"{format_size(size):>8} {med['hpcdist']:12.2f} "
            + _cell(med["mpi4py"], vs_mpi, vs_mpi > _target(size)) + " "
            + _cell(med.get("gloo"), vs_gloo, vs_gloo is not None and vs_gloo >= TARGET_GLOO))
    wrong = [name for name, ok in record["verified"].items() if not ok]
    return text + (f"  WRONG RESULT: {', '.join(wrong)}" if wrong else "")


#: summary bands: (ratio, sizes included, target, whether the target may be reached)
BANDS = {
    "small": ("hpcdist/mpi4py", lambda size: size < LARGE_MESSAGE, TARGET_SMALL, True),
    "large": ("hpcdist/mpi4py", lambda size: size >= LARGE_MESSAGE, TARGET_LARGE, True),
    "gloo": ("hpcdist/gloo", lambda size: True, TARGET_GLOO, False),
}


def _band_summary(records: list[dict], band: str) -> dict:
    """Worst ratio of one band of sizes against its target, with PASS/MISS/n/a."""
    key, keep, target, inclusive = BANDS[band]
    found = [(r["ratio"][key], r["size_bytes"]) for r in records
             if key in r["ratio"] and keep(r["size_bytes"])]
    if not found:
        return {"ratio": key, "target": target, "worst": None, "at_size_bytes": None,
                "status": "n/a"}
    worst, at = max(found)
    passed = worst <= target if inclusive else worst < target
    return {"ratio": key, "target": target, "worst": worst, "at_size_bytes": at,
            "status": "PASS" if passed else "MISS"}


def _summarize(operations: dict) -> dict:
    return {operation: {band: _band_summary(entry["results"], band) for band in BANDS}
            for operation, entry in operations.items()}


def _summary_text(summary: dict) -> str:
    large = format_size(LARGE_MESSAGE)
    lines = [f"\nSummary: worst ratio per operation against the targets (hpcdist/mpi4py <= "
             f"{TARGET_SMALL} below {large}, <= {TARGET_LARGE} from {large} up; "
             f"hpcdist/gloo < {TARGET_GLOO:g} at every size)",
             f"{'operation':<18} {'< 64 KiB vs mpi4py':>26} {'>= 64 KiB vs mpi4py':>26} "
             f"{'all sizes vs gloo':>26}"]
    for operation, bands in summary.items():
        cells = ["n/a" if c["worst"] is None else
                 f"{c['worst']:.3f} @ {format_size(c['at_size_bytes'])} {c['status']}"
                 for c in bands.values()]
        lines.append(f"{operation:<18} " + " ".join(f"{c:>26}" for c in cells))
    misses = sum(c["status"] == "MISS" for bands in summary.values() for c in bands.values())
    lines.append("All targets met." if not misses
                 else f"{misses} target(s) missed ('!' marks the rows above).")
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
        "targets": {"hpcdist/mpi4py below 64 KiB": TARGET_SMALL,
                    "hpcdist/mpi4py from 64 KiB": TARGET_LARGE,
                    "hpcdist/gloo": f"< {TARGET_GLOO:g}"},
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
    for name in entry["implementations"]:
        ax.plot(sizes, [r["median_us"][name] for r in entry["results"]], "o-", ms=3,
                label=name)
    ax.set_yscale("log")
    _size_axis(ax, sizes)
    ax.legend(fontsize="small")


def _plot_ratio(ax, entry: dict, sizes: list[int], key: str) -> None:
    """One ratio against size, with its target dotted in red."""
    points = [(r["size_bytes"], r["ratio"][key]) for r in entry["results"] if key in r["ratio"]]
    if not points:
        ax.text(0.5, 0.5, f"no {key.split('/')[1]} baseline", ha="center", va="center",
                transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.plot(*zip(*points), "o-", ms=3, label=key,
            color="tab:green" if key.endswith("gloo") else "tab:blue")
    lo, hi = sizes[0], sizes[-1]
    if key.endswith("gloo"):
        ax.set_yscale("log")
        ax.axhline(TARGET_GLOO, color="red", ls=":", label="target")
    else:
        if lo < LARGE_MESSAGE:
            ax.hlines(TARGET_SMALL, lo, min(hi, LARGE_MESSAGE), colors="red", linestyles=":",
                      label="target")
        if hi >= LARGE_MESSAGE:
            ax.hlines(TARGET_LARGE, max(lo, LARGE_MESSAGE), hi, colors="red", linestyles=":")
        ax.axhline(1.0, color="gray", lw=0.8)
    _size_axis(ax, sizes)
    ax.legend(fontsize="small")


def _plot(report: dict, path: Path) -> bool:
    """Time and ratios against size, one column per operation; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    operations = report["operations"]
    fig, axes = plt.subplots(3, len(operations), figsize=(4.2 * len(operations), 10),
                             squeeze=False)
    for col, (operation, entry) in enumerate(operations.items()):
        sizes = [r["size_bytes"] for r in entry["results"]]
        _plot_times(axes[0, col], entry, sizes)
        _plot_ratio(axes[1, col], entry, sizes, "hpcdist/mpi4py")
        _plot_ratio(axes[2, col], entry, sizes, "hpcdist/gloo")
        axes[0, col].set_title(operation)
        axes[2, col].set_xlabel("bytes per rank")
    axes[0, 0].set_ylabel("median time per call (us)")
    axes[1, 0].set_ylabel("hpcdist / mpi4py")
    axes[2, 0].set_ylabel("hpcdist / gloo")
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
        if b.rank == 0:
            print(_header(operation, gloo=b.dist is not None), flush=True)
        records = []
        for size in args.sizes:
            records.append(_run_case(b, operation, size, args))
            if b.rank == 0:
                print(_row(records[-1]), flush=True)
        implementations = list(records[0]["median_us"]) if records else []
        operations[operation] = {
            "implementations": implementations,
            "calls": {name: CALLS[operation][name] for name in implementations},
            "results": records,
        }
    return operations


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
    b = Backends(comm=comm, ctrl=ctrl, torch=torch, dist=dist)
    load_before = load_average()
    try:
        if b.rank == 0:
            library = " ".join(MPI.Get_library_version().splitlines()[0].split())
            print(f"hpcdist collectives benchmark: {b.size} ranks, {library}, "
                  f"gloo {'on' if dist else 'off'}, {os.cpu_count()} cores, load average "
                  f"{load_before}\ntimes: median per call in microseconds; '!' marks a missed "
                  f"target", flush=True)
        operations = _run(b, args)
        machine = _machine_info(b, load_before)
        if b.rank == 0:
            summary = _summarize(operations)
            print(_summary_text(summary), flush=True)
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
