"""Collective benchmark: hpcdist against raw mpi4py and torch.distributed (gloo).

Run under MPI with one thread per rank (the benchmark does not set these
itself; they keep NumPy/torch from oversubscribing the cores)::

    export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1
    mpiexec -n 2 python -m hpcdist.bench.collectives            # full run, 8 B .. 64 MiB
    mpiexec -n 2 python -m hpcdist.bench.collectives --quick    # a few sizes, < 20 s
    hpcdist bench collectives --sizes 8,64K,16M --repetitions 9

Operations (float32 vectors; "size" is the bytes each rank contributes):

``allreduce``
    ``hpcdist.allreduce(x)`` vs ``comm.Allreduce(x, np.empty_like(x))`` vs
    ``o = t.clone(); dist.all_reduce(o)``: a new result array per call.
``allreduce_out``
    ``hpcdist.allreduce(x, out=out)`` vs ``comm.Allreduce(x, out)`` vs
    ``dist.all_reduce(out_t)`` (gloo's in-place form; its buffer grows, which
    does not change the speed).
``broadcast``
    ``hpcdist.broadcast(buf, root=0)`` vs ``comm.Bcast(buf, root=0)`` vs
    ``dist.broadcast(buf_t, src=0)``, non-root ``buf`` preallocated.
``allgather``
    ``hpcdist.allgather(x, counts=[n] * size)`` vs
    ``comm.Allgather(x, np.empty(n * size))`` vs ``dist.all_gather_single``
    into a new tensor.
``allgather_uneven``
    ``hpcdist.allgather(x)`` (sizes exchanged first, so they may differ per
    rank) vs mpi4py doing the same work: ``Allgather`` of the counts, then
    ``Allgatherv``. No gloo column: gloo needs equal sizes.

The mpi4py baseline runs on ``MPI.COMM_WORLD.Dup()`` (same MPI library,
separate communicator); barriers and timing reductions run on another
duplicate. torch tensors share memory with the NumPy buffers
(``torch.from_numpy``); gloo is left out when torch cannot be imported.

Timing: per (operation, size), every implementation is checked once against
the expected result, warmed up, then timed in R repetitions. Each repetition
runs every implementation once, one after another (the starting one rotates
between repetitions); each run is a barrier followed by a batch of k calls, k
chosen per implementation on rank 0 so a batch lasts about ``--batch-ms``, and
broadcast. A run's
time is the per-call time of the slowest rank. Reported: the median over
repetitions and the ratios hpcdist/mpi4py and hpcdist/gloo of the medians (the
JSON also keeps every repetition, the minimums and their ratios, which are less
sensitive to other load on the machine).

Output: a table on rank 0, ``<output-dir>/<name>.json`` (machine, settings,
every repetition, medians, ratios, summary) and ``<output-dir>/<name>.png``
(time and ratio against size; skipped when matplotlib is missing).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

__all__ = ["main", "OPERATIONS"]

OPERATIONS = ("allreduce", "allreduce_out", "broadcast", "allgather", "allgather_uneven")
IMPLEMENTATIONS = ("hpcdist", "mpi4py", "gloo")

KIB = 1024
MIB = 1024 * KIB
DEFAULT_SIZES = (8,) + tuple(4**k for k in range(3, 14))  # 8 B, 64 B, 256 B, ..., 64 MiB
QUICK_SIZES = (8, KIB, 64 * KIB, MIB)
DEFAULT_REPETITIONS = 15
QUICK_REPETITIONS = 5
DEFAULT_BATCH_MS = 10.0
QUICK_BATCH_MS = 2.0
LARGE_MESSAGE = 64 * KIB  # boundary between the two hpcdist/mpi4py targets
TARGET_LARGE = 1.05  # hpcdist/mpi4py at sizes >= LARGE_MESSAGE
TARGET_SMALL = 1.5  # hpcdist/mpi4py below LARGE_MESSAGE
TARGET_GLOO = 1.0  # hpcdist/gloo: strictly faster at every size
MAX_ITERATIONS = 200_000  # cap on k, the calls per timed batch
WARMUP_CALLS = 3

DTYPE = np.float32
ITEMSIZE = np.dtype(DTYPE).itemsize
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS")

DESCRIPTIONS = {
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
    "allgather": {
        "hpcdist": "hpcdist.allgather(x, counts=[n] * size)",
        "mpi4py": "comm.Allgather(x, np.empty(n * size))",
        "gloo": "dist.all_gather_single(torch.empty(n * size), t)",
    },
    "allgather_uneven": {
        "hpcdist": "hpcdist.allgather(x)",
        "mpi4py": "comm.Allgather(n, counts); comm.Allgatherv(x, (np.empty(sum(counts)), counts))",
    },
}


@dataclass
class Backends:
    """Everything the implementations run on.

    Attributes
    ----------
    hp : module
        The ``hpcdist`` package, initialised, check mode off.
    comm : mpi4py.MPI.Comm
        ``MPI.COMM_WORLD.Dup()`` for the mpi4py baseline.
    ctrl : mpi4py.MPI.Comm
        Another duplicate for barriers and timing reductions.
    torch, dist : module or None
        ``torch`` and ``torch.distributed`` (gloo initialised), or None.
    """

    hp: Any
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


# ---------------------------------------------------------------- arguments


def _parse_size(text: str) -> int:
    """Parse ``"64"``, ``"64B"``, ``"1K"``, ``"1KiB"``, ``"16M"`` into bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(i?b)?\s*", text, flags=re.IGNORECASE)
    if match is None:
        raise argparse.ArgumentTypeError(f"size={text!r} is not a byte count; use e.g. 8, 1K, 64KiB, 16M")
    value = int(match.group(1)) * {"": 1, "k": KIB, "m": MIB, "g": 1024 * MIB}[match.group(2).lower()]
    if value < ITEMSIZE or value % ITEMSIZE:
        raise argparse.ArgumentTypeError(f"size={text!r} ({value} B) should be a positive multiple of 4 (float32)")
    return value


def _size_list(text: str) -> list[int]:
    return sorted({_parse_size(part) for part in text.split(",") if part.strip()})


def _operation_list(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in OPERATIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"operations={text!r} should be a comma list of {', '.join(OPERATIONS)}")
    return [name for name in OPERATIONS if name in names]


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hpcdist bench collectives",
        description="Time hpcdist's allreduce, broadcast and allgather against raw mpi4py and "
        "torch.distributed (gloo), interleaved on the same buffers. Run under mpiexec.",
    )
    parser.add_argument("--sizes", type=_size_list, help="comma list of message sizes in bytes per rank "
                        "(suffixes K, M, G = KiB, MiB, GiB); default 8 B, then powers of 4 from 64 B to 64 MiB")
    parser.add_argument("--quick", action="store_true", help="short run: 8 B, 1 KiB, 64 KiB, 1 MiB, "
                        f"{QUICK_REPETITIONS} repetitions, {QUICK_BATCH_MS:g} ms batches")
    parser.add_argument("--repetitions", type=int, help=f"timed repetitions per size (default "
                        f"{DEFAULT_REPETITIONS}, a third of that from 4 MiB up, at least 3)")
    parser.add_argument("--batch-ms", type=float, help=f"target duration of one timed batch (default "
                        f"{DEFAULT_BATCH_MS:g} ms)")
    parser.add_argument("--operations", type=_operation_list, default=list(OPERATIONS),
                        help=f"comma list of operations (default: all of {', '.join(OPERATIONS)})")
    parser.add_argument("--no-gloo", action="store_true", help="skip torch.distributed even if torch is importable")
    parser.add_argument("--no-plot", action="store_true", help="do not write the PNG plot")
    parser.add_argument("--output-dir", type=Path, default=Path("benchmarks") / "results",
                        help="where NAME.json and NAME.png go (default: ./benchmarks/results)")
    parser.add_argument("--name", default="collectives", help="file stem of the outputs (default: collectives)")
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


def _repetitions_for(size: int, args: argparse.Namespace) -> int:
    """Repetitions at ``size`` bytes: fewer for big messages unless given."""
    if args.repetitions is not None:
        return args.repetitions
    if args.quick:
        return QUICK_REPETITIONS
    return DEFAULT_REPETITIONS if size < 4 * MIB else max(3, DEFAULT_REPETITIONS // 3)


# ------------------------------------------------------------------- setup


def _init_hpcdist():
    """Import and initialise hpcdist with check mode off.

    Returns
    -------
    module
        The ``hpcdist`` package.
    """
    import hpcdist

    missing = [name for name in ("init", "allreduce", "broadcast", "allgather") if not hasattr(hpcdist, name)]
    if missing:
        raise RuntimeError(f"hpcdist has no {', '.join(missing)}: the benchmark needs the collectives of API section 2")
    ctx = hpcdist.init()
    ctx.check = False
    return hpcdist


def _rendezvous(ctrl) -> str:
    """Pick gloo's rendezvous address on rank 0 and share it with every rank."""
    hosts = ctrl.allgather(socket.gethostname())
    address = None
    if ctrl.Get_rank() == 0:
        host = "127.0.0.1" if len(set(hosts)) == 1 else hosts[0]
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("" if host != "127.0.0.1" else host, 0))
            port = sock.getsockname()[1]
        address = f"tcp://{host}:{port}"
    return ctrl.bcast(address, root=0)


def _init_gloo(ctrl, enabled: bool):
    """Start a torch.distributed gloo group with MPI's ranks, if torch is importable.

    Returns
    -------
    (torch, torch.distributed) or (None, None)
    """
    torch = dist = None
    if enabled:
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            torch = dist = None
    usable = dist is not None and dist.is_available() and dist.is_gloo_available()
    if not all(ctrl.allgather(usable)):
        if enabled and ctrl.Get_rank() == 0:
            print("torch.distributed with gloo is not importable on every rank: no gloo column", flush=True)
        return None, None
    dist.init_process_group("gloo", init_method=_rendezvous(ctrl), rank=ctrl.Get_rank(),
                            world_size=ctrl.Get_size(), timeout=datetime.timedelta(seconds=120))
    return torch, dist


# -------------------------------------------------------------- operations
# Each builder returns (implementations, expected): name -> zero-argument
# callable returning the result, and the result every rank should get.


def _local_vector(n: int, rank: int) -> np.ndarray:
    """Rank-dependent small integers as float32, so sums are exact."""
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

    impls = {"hpcdist": lambda: b.hp.allreduce(x), "mpi4py": mpi4py_allreduce}
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

    impls = {"hpcdist": lambda: b.hp.allreduce(x, out=out), "mpi4py": mpi4py_allreduce_out}
    if b.dist is not None:
        out_t = b.torch.from_numpy(out)
        impls["gloo"] = lambda: b.dist.all_reduce(out_t)
    return impls, _summed(n, b.size)


def _build_broadcast(b: Backends, n: int):
    buf = _local_vector(n, 0) if b.rank == 0 else np.zeros(n, dtype=DTYPE)

    def mpi4py_broadcast():
        b.comm.Bcast(buf, root=0)
        return buf

    impls = {"hpcdist": lambda: b.hp.broadcast(buf, root=0), "mpi4py": mpi4py_broadcast}
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

    impls = {"hpcdist": lambda: b.hp.allgather(x, counts=counts), "mpi4py": mpi4py_allgather}
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

    def mpi4py_allgatherv():
        counts = np.empty(b.size, dtype=np.int64)
        b.comm.Allgather(local_count, counts)
        out = np.empty(int(counts.sum()), dtype=x.dtype)
        b.comm.Allgatherv(x, (out, counts))
        return out

    impls = {"hpcdist": lambda: b.hp.allgather(x), "mpi4py": mpi4py_allgatherv}
    return impls, _gathered(n, b.size)


BUILDERS: dict[str, Callable] = {
    "allreduce": _build_allreduce,
    "allreduce_out": _build_allreduce_out,
    "broadcast": _build_broadcast,
    "allgather": _build_allgather,
    "allgather_uneven": _build_allgather_uneven,
}


# ------------------------------------------------------------------ timing


def _max_over_ranks(value: float, ctrl) -> float:
    return max(ctrl.allgather(value))


def _batch_time(fn: Callable[[], Any], k: int, ctrl) -> float:
    """Seconds per call of ``fn`` over a batch of ``k`` calls, slowest rank.

    Collective over ``ctrl``: every rank calls it with the same ``k`` and gets
    the same value back.
    """
    ctrl.Barrier()
    start = time.perf_counter()
    for _ in range(k):
        fn()
    per_call = (time.perf_counter() - start) / k
    return _max_over_ranks(per_call, ctrl)


def _verify(fn: Callable[[], Any], expected: np.ndarray, ctrl) -> bool:
    """Call ``fn`` once; True on every rank when every rank got ``expected``."""
    result = np.asarray(fn())
    ok = result.shape == expected.shape and bool(np.array_equal(result, expected))
    return all(ctrl.allgather(ok))


def _pilot(fn: Callable[[], Any], min_s: float, ctrl) -> float:
    """Per-call seconds from batches grown until one lasts ``min_s``."""
    k = 1
    while True:
        per_call = _batch_time(fn, k, ctrl)
        if per_call * k >= min_s or k >= MAX_ITERATIONS:
            return min(per_call, _batch_time(fn, k, ctrl))  # a second look, in case of a hiccup
        k = min(MAX_ITERATIONS, max(2 * k, math.ceil(1.2 * min_s / max(per_call, 1e-9))))


def _choose_iterations(impls: dict, target_s: float, ctrl) -> dict[str, int]:
    """Calls per batch for each implementation, so each batch lasts ``target_s``.

    Decided on rank 0 from pilot batches (which double as warm-up) and
    broadcast, so every rank runs the same number of calls.
    """
    per_call = {name: _pilot(fn, target_s / 4, ctrl) for name, fn in impls.items()}
    k = None
    if ctrl.Get_rank() == 0:
        k = {name: int(min(MAX_ITERATIONS, max(1, math.ceil(target_s / t)))) for name, t in per_call.items()}
    return ctrl.bcast(k, root=0)


def _measure(impls: dict, repetitions: int, target_s: float, ctrl) -> tuple[dict[str, int], dict[str, list[float]]]:
    """Warm up, pick the batch lengths, then time ``repetitions`` interleaved rounds.

    Returns
    -------
    k : dict of str to int
        Calls per timed batch, per implementation.
    times : dict of str to list of float
        Seconds per call (slowest rank) of every repetition, per implementation.
    """
    for fn in impls.values():
        _batch_time(fn, WARMUP_CALLS, ctrl)
    k = _choose_iterations(impls, target_s, ctrl)
    names = list(impls)
    times = {name: [] for name in names}
    for rep in range(repetitions):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(_batch_time(impls[name], k[name], ctrl))
    return k, times


def _ratios(times: dict[str, float]) -> dict[str, float]:
    """hpcdist's time over each baseline's: ``{"hpcdist/mpi4py": ..., "hpcdist/gloo": ...}``."""
    return {f"hpcdist/{base}": times["hpcdist"] / times[base]
            for base in ("mpi4py", "gloo") if base in times and times[base] > 0}


def _run_case(b: Backends, operation: str, size: int, args: argparse.Namespace) -> dict:
    """Verify and time one (operation, size); the record stored in the JSON."""
    n = size // ITEMSIZE
    impls, expected = BUILDERS[operation](b, n)
    verified = {name: _verify(impls[name], expected, b.ctrl) for name in ("hpcdist", "mpi4py")}
    repetitions = _repetitions_for(size, args)
    k, times = _measure(impls, repetitions, args.batch_ms / 1e3, b.ctrl)
    medians = {name: float(np.median(values)) * 1e6 for name, values in times.items()}
    minimums = {name: min(values) * 1e6 for name, values in times.items()}
    return {
        "size_bytes": size,
        "elements": n,
        "iterations_per_batch": k,
        "repetitions": repetitions,
        "verified": verified,
        "median_us": medians,
        "min_us": minimums,
        "times_us": {name: [t * 1e6 for t in values] for name, values in times.items()},
        "ratio": _ratios(medians),
        "ratio_of_minimums": _ratios(minimums),
    }


# ------------------------------------------------------------------ report


def _format_size(size: int) -> str:
    for unit, scale in (("MiB", MIB), ("KiB", KIB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _target(size: int) -> float:
    return TARGET_LARGE if size >= LARGE_MESSAGE else TARGET_SMALL


def _header(operation: str) -> str:
    desc = DESCRIPTIONS[operation]
    lines = [f"\n{operation}:  " + "  vs  ".join(f"{name}: {desc[name]}" for name in IMPLEMENTATIONS if name in desc)]
    lines.append(f"{'size':>8} {'hpcdist us':>12} {'mpi4py us':>12} {'ratio':>7}  {'gloo us':>12} {'ratio':>7}")
    return "\n".join(lines)


def _row(record: dict) -> str:
    med, ratio, size = record["median_us"], record["ratio"], record["size_bytes"]
    vs_mpi = ratio.get("hpcdist/mpi4py")
    vs_gloo = ratio.get("hpcdist/gloo")
    gloo = f"{med['gloo']:12.2f} {vs_gloo:7.3f}{'!' if vs_gloo >= TARGET_GLOO else ' '}" if vs_gloo is not None else f"{'-':>12} {'-':>7} "
    flag = "!" if vs_mpi > _target(size) else " "
    text = f"{_format_size(size):>8} {med['hpcdist']:12.2f} {med['mpi4py']:12.2f} {vs_mpi:7.3f}{flag} {gloo}"
    if not all(record["verified"].values()):
        text += "  WRONG RESULT: " + ", ".join(name for name, ok in record["verified"].items() if not ok)
    return text


def _worst(records: list[dict], key: str, keep: Callable[[int], bool]):
    """(ratio, size) of the largest ``key`` ratio among sizes kept, or None."""
    found = [(r["ratio"][key], r["size_bytes"]) for r in records if key in r["ratio"] and keep(r["size_bytes"])]
    return max(found) if found else None


def _summarize(operations: dict) -> dict:
    """Worst ratios per operation against the targets, with PASS/MISS."""
    bands = {
        "small": ("hpcdist/mpi4py", lambda s: s < LARGE_MESSAGE, TARGET_SMALL),
        "large": ("hpcdist/mpi4py", lambda s: s >= LARGE_MESSAGE, TARGET_LARGE),
        "gloo": ("hpcdist/gloo", lambda s: True, TARGET_GLOO),
    }
    summary = {}
    for operation, entry in operations.items():
        summary[operation] = {}
        for band, (key, keep, target) in bands.items():
            worst = _worst(entry["results"], key, keep)
            passed = None if worst is None else (worst[0] < target if band == "gloo" else worst[0] <= target)
            summary[operation][band] = {
                "ratio": key, "target": target, "worst": None if worst is None else worst[0],
                "at_size_bytes": None if worst is None else worst[1],
                "status": "n/a" if worst is None else ("PASS" if passed else "MISS"),
            }
    return summary


def _summary_text(summary: dict) -> str:
    lines = [
        "\nSummary: worst ratio per operation against the targets "
        f"(hpcdist/mpi4py <= {TARGET_SMALL} below {_format_size(LARGE_MESSAGE)}, "
        f"<= {TARGET_LARGE} from {_format_size(LARGE_MESSAGE)} up; hpcdist/gloo < {TARGET_GLOO:g} at every size)",
        f"{'operation':<18} {'< 64 KiB vs mpi4py':>26} {'>= 64 KiB vs mpi4py':>26} {'all sizes vs gloo':>26}",
    ]
    for operation, bands in summary.items():
        cells = []
        for band in ("small", "large", "gloo"):
            cell = bands[band]
            cells.append("n/a" if cell["worst"] is None else
                         f"{cell['worst']:.3f} @ {_format_size(cell['at_size_bytes'])} {cell['status']}")
        lines.append(f"{operation:<18} " + " ".join(f"{c:>26}" for c in cells))
    misses = sum(cell["status"] == "MISS" for bands in summary.values() for cell in bands.values())
    lines.append("All targets met." if misses == 0 else f"{misses} target(s) missed ('!' marks the rows above).")
    return "\n".join(lines)


def _version(module_name: str) -> str | None:
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    version = getattr(module, "__version__", None)
    if version is None and module_name == "hpcdist":
        try:
            from hpcdist._version import __version__ as version
        except ImportError:
            version = None
    return None if version is None else str(version)


def _load_average() -> list[float] | None:
    """1, 5 and 15 minute load averages (other work makes timings noisy)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _machine_info(b: Backends, load_before: list[float] | None) -> dict:
    from mpi4py import MPI

    hosts = b.ctrl.allgather(socket.gethostname())
    return {
        "hostname": hosts[0],
        "nodes": len(set(hosts)),
        "ranks": b.size,
        "cpu_count": os.cpu_count(),
        "cpus_available": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "mpi_library": MPI.Get_library_version().strip(),
        "mpi_standard": "%d.%d" % MPI.Get_version(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "mpi4py": _version("mpi4py"),
        "hpcdist": _version("hpcdist"),
        "torch": None if b.torch is None else str(b.torch.__version__),
        "thread_env": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "load_average_before": load_before,
        "load_average_after": _load_average(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def _size_axis(ax, sizes: list[int]) -> None:
    """Log-scaled x axis labelled 8 B, 1 KiB, 1 MiB, ..."""
    ax.set_xscale("log", base=2)
    ticks = [s for s in sizes if s == sizes[0] or s == sizes[-1] or math.log2(s) % 4 == 0] if len(sizes) > 6 else sizes
    ax.set_xticks(ticks, [_format_size(s) for s in ticks], fontsize="small")
    ax.minorticks_off()
    ax.grid(True, alpha=0.3)


def _plot_times(ax, entry: dict, sizes: list[int]) -> None:
    for name in entry["implementations"]:
        ax.plot(sizes, [r["median_us"][name] for r in entry["results"]], "o-", ms=3, label=name)
    ax.set_yscale("log")
    _size_axis(ax, sizes)
    ax.legend(fontsize="small")


def _plot_ratio(ax, entry: dict, sizes: list[int], key: str) -> None:
    """One ratio against size, with its target as a dotted red line."""
    points = [(r["size_bytes"], r["ratio"][key]) for r in entry["results"] if key in r["ratio"]]
    if not points:
        ax.text(0.5, 0.5, f"no {key.split('/')[1]} baseline", ha="center", va="center", transform=ax.transAxes)
        ax.set_xticks([])
        ax.set_yticks([])
        return
    ax.plot(*zip(*points), "o-", ms=3, color="tab:blue" if key.endswith("mpi4py") else "tab:green", label=key)
    lo, hi = sizes[0], sizes[-1]
    if key.endswith("gloo"):
        ax.set_yscale("log")
        ax.axhline(TARGET_GLOO, color="red", ls=":", label="target")
    else:
        if lo < LARGE_MESSAGE:
            ax.hlines(TARGET_SMALL, lo, min(hi, LARGE_MESSAGE), colors="red", linestyles=":", label="target")
        if hi >= LARGE_MESSAGE:
            ax.hlines(TARGET_LARGE, max(lo, LARGE_MESSAGE), hi, colors="red", linestyles=":")
        ax.axhline(1.0, color="gray", lw=0.8)
    _size_axis(ax, sizes)
    ax.legend(fontsize="small")


def _plot(report: dict, path: Path) -> bool:
    """Write time and ratios against size per operation; False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written (pip install matplotlib)", flush=True)
        return False
    operations = report["operations"]
    fig, axes = plt.subplots(3, len(operations), figsize=(4.2 * len(operations), 10), squeeze=False)
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
    library = " ".join(machine["mpi_library"].splitlines()[0].split())
    fig.suptitle(f"hpcdist collectives: {machine['ranks']} ranks on {machine['hostname']} "
                 f"({machine['cpu_count']} cores), {library}, {machine['date']}")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _write_outputs(report: dict, args: argparse.Namespace) -> None:
    args.output_dir.mkdir(parents=True, exist_ok=True)
    json_path = args.output_dir / f"{args.name}.json"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {json_path}", flush=True)
    if not args.no_plot:
        png_path = args.output_dir / f"{args.name}.png"
        if _plot(report, png_path):
            print(f"wrote {png_path}", flush=True)


# -------------------------------------------------------------------- main


def _run(b: Backends, args: argparse.Namespace) -> dict:
    """Measure every requested operation and size; print rows as they come."""
    operations = {}
    for operation in args.operations:
        if b.rank == 0:
            print(_header(operation), flush=True)
        records = []
        for size in args.sizes:
            records.append(_run_case(b, operation, size, args))
            if b.rank == 0:
                print(_row(records[-1]), flush=True)
        implementations = list(records[0]["median_us"]) if records else []
        operations[operation] = {
            "implementations": implementations,
            "calls": {name: DESCRIPTIONS[operation][name] for name in implementations},
            "results": records,
        }
    return operations


def _settings(args: argparse.Namespace) -> dict:
    return {
        "sizes_bytes": list(args.sizes),
        "dtype": np.dtype(DTYPE).name,
        "quick": args.quick,
        "repetitions": args.repetitions,
        "batch_ms": args.batch_ms,
        "timing": "per repetition: barrier, batch of k calls (k per implementation), per-call time of the slowest rank; "
                  "implementations interleaved, starting one rotating; medians over repetitions",
        "targets": {"hpcdist/mpi4py below 64 KiB": TARGET_SMALL, "hpcdist/mpi4py from 64 KiB": TARGET_LARGE,
                    "hpcdist/gloo": f"< {TARGET_GLOO:g}"},
    }


def main(argv: list[str] | None = None) -> int:
    """Run the collective benchmark (under ``mpiexec``); rank 0 reports.

    Parameters
    ----------
    argv : list of str, optional
        Command-line arguments without the program name; ``sys.argv[1:]``
        when None. ``--help`` lists them.

    Returns
    -------
    int
        Exit status, 0 on success.
    """
    args = _parse_args(argv)
    hp = _init_hpcdist()
    from mpi4py import MPI

    comm, ctrl = MPI.COMM_WORLD.Dup(), MPI.COMM_WORLD.Dup()
    torch, dist = _init_gloo(ctrl, enabled=not args.no_gloo)
    b = Backends(hp=hp, comm=comm, ctrl=ctrl, torch=torch, dist=dist)
    load_before = _load_average()
    try:
        if b.rank == 0:
            library = " ".join(MPI.Get_library_version().splitlines()[0].split())
            print(f"hpcdist collectives benchmark: {b.size} ranks, {library}, gloo {'on' if dist else 'off'}, "
                  f"load average {load_before}, {os.cpu_count()} cores\n"
                  "times: median per call in microseconds; '!' marks a missed target", flush=True)
        operations = _run(b, args)
        machine = _machine_info(b, load_before)
        if b.rank == 0:
            summary = _summarize(operations)
            report = {"benchmark": "collectives", "machine": machine, "settings": _settings(args),
                      "operations": operations, "summary": summary}
            print(_summary_text(summary), flush=True)
            _write_outputs(report, args)
    finally:
        if dist is not None:
            dist.destroy_process_group()
        comm.Free()
        ctrl.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
