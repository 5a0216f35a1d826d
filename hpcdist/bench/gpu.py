"""``hpcdist bench gpu``: hpcdist's CuPy paths against the same work on host arrays.

Needs CuPy and a CUDA GPU. Three parts (``--parts``, default all), each
written to ``<output-dir>/<name>_<part>.json`` (``gpu_allreduce.json`` ...):

``allreduce``
    ``ctx.allreduce(x, "sum", out=x)`` of float32 CuPy arrays from 8 B to
    256 MiB (CUDA-aware when the MPI library is, else staged through pinned
    host memory), against the same call on NumPy arrays, and against what a
    user would write by hand with mpi4py, also in place: ``Allreduce`` with
    ``IN_PLACE`` on the host array, and for the device array a copy to pinned
    memory, ``Allreduce``, a copy back. One more column times
    ``ctx.allreduce(x, "sum")`` on the device array, which returns a new one.
    Run it with two or more ranks (``hpcdist bench gpu -n 2``); ranks share
    the node's GPUs round robin.
``compression``
    The compression kernels (``hpcdist.kernels``) on a CuPy array against the
    same kernels on a NumPy array (their Numba versions), on rank 0.
``kmeans``
    ``hpcdist.ml.KMeans`` fitted on a CuPy array against the same fit on the
    host array (1M x 32, k = 64 by default; same initial centers, ``tol=0``),
    on rank 0: seconds per iteration and the agreement of the inertias.

Timing: device work is followed by a device synchronisation before the clock
stops; a measurement is the median over ``--repetitions`` blocks (for the
allreduce, a block is a loop of calls between barriers, timed on the slowest
rank). Host kernels run with the rank's Numba/BLAS threads (``hpcdist.init``
gives each rank ``cores / ranks``): run the kernel parts at one rank to give
the CPU side every core.
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

from ..comm import init
from ..comm.mpi import MPI
from ..data import make_blobs
from ..kernels import (
    error_feedback_update,
    from_half,
    int8_dequantize,
    int8_quantize,
    qsgd_dequantize,
    qsgd_quantize,
    scale_add,
    scatter_add,
    sign_pack,
    sign_unpack,
    to_half,
    topk,
    topk_threshold,
)
from ..ml import KMeans
from . import common

try:
    import cupy
    import cupyx
except ImportError:  # checked in main(), with the fix in the message
    cupy = cupyx = None

__all__ = ["main", "PARTS", "DEFAULTS", "QUICK"]

PARTS = ("allreduce", "compression", "kmeans")
DEFAULTS = {"max_bytes": 256 * common.MIB, "elements": 1 << 24, "samples": 1_000_000,
            "features": 32, "clusters": 64, "iterations": 20, "repetitions": 5}
QUICK = {"max_bytes": 1 * common.MIB, "elements": 1 << 16, "samples": 20_000,
         "features": 8, "clusters": 8, "iterations": 3, "repetitions": 2}
MIN_BYTES = 8
#: the allreduce part's cases, in table order
ALLREDUCE_CASES = ("hpcdist_device", "hpcdist_host", "mpi4py_device_staged", "mpi4py_host",
                   "hpcdist_device_new")
SIZE_STEP = 8            # allreduce sizes 8 B, 64 B, ... (and max_bytes itself)
BLOCK_BYTES = 256 * common.MIB  # bytes reduced per timed allreduce block (at least 2 calls)
CHUNK = 1024             # chunk size of the int8 and sign kernels
TOPK_RATIO = 0.01


def _build_parser():
    parser = common.benchmark_parser(
        "gpu", "hpcdist's CuPy paths (allreduce, compression kernels, K-means) against the "
        "same work on host arrays. Needs CuPy and a CUDA GPU.",
        quick="small sizes: a check that every part runs", plot=False)
    parser.set_defaults(name="gpu")
    parser.add_argument("--parts", default=",".join(PARTS),
                        help=f"comma-separated parts to run, of {', '.join(PARTS)}")
    for key in DEFAULTS:
        parser.add_argument("--" + key.replace("_", "-"), type=int, default=None,
                            help=f"default {DEFAULTS[key]:,} ({QUICK[key]:,} with --quick)")
    return parser


def _parse_args(argv):
    parser = _build_parser()
    args = parser.parse_args(argv)
    parts = [part.strip() for part in args.parts.split(",") if part.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown or not parts:
        parser.error(f"--parts {args.parts!r}: unknown part(s) {', '.join(unknown) or '(none)'}; "
                     f"choose from {', '.join(PARTS)}")
    args.parts = parts
    common.fill_sizes(parser, args, DEFAULTS, QUICK, minimums={"max_bytes": MIN_BYTES})
    return args


def _synchronize():
    cupy.cuda.get_current_stream().synchronize()


def _device_seconds(function, repetitions):
    """Median time of ``function()`` including the device work it queued."""
    def synchronized():
        function()
        _synchronize()
    return common.median_seconds(synchronized, repetitions)


# -- allreduce -----------------------------------------------------------------------------------

def _allreduce_sizes(max_bytes):
    sizes = []
    size = MIN_BYTES
    while size < max_bytes:
        sizes.append(size)
        size *= SIZE_STEP
    return sizes + [max_bytes]


def _block_seconds(ctrl, call, calls, repetitions):
    """Median over blocks of the slowest rank's time per call."""
    call()
    _synchronize()
    times = []
    for _ in range(repetitions):
        ctrl.Barrier()
        start = time.perf_counter()
        for _ in range(calls):
            call()
        _synchronize()
        times.append(ctrl.allreduce((time.perf_counter() - start) / calls, op=MPI.MAX))
    return statistics.median(times)


def _allreduce_cases(ctx, ctrl, n):
    host = np.zeros(n, dtype=np.float32)
    device = cupy.zeros(n, dtype=cupy.float32)
    pinned = cupyx.empty_pinned(n, dtype=np.float32)

    def by_hand_device():
        device.get(out=pinned)
        ctrl.Allreduce(MPI.IN_PLACE, pinned, op=MPI.SUM)
        device.set(pinned)

    calls = (lambda: ctx.allreduce(device, "sum", out=device),
             lambda: ctx.allreduce(host, "sum", out=host),
             by_hand_device, lambda: ctrl.Allreduce(MPI.IN_PLACE, host, op=MPI.SUM),
             lambda: ctx.allreduce(device, "sum"))
    return dict(zip(ALLREDUCE_CASES, calls))


def _allreduce_part(ctx, ctrl, args):
    rows = []
    for nbytes in _allreduce_sizes(args.max_bytes):
        n = max(1, nbytes // 4)
        calls = max(2, min(1000, BLOCK_BYTES // nbytes))
        row = {"bytes": n * 4, "calls_per_block": calls}
        for case, call in _allreduce_cases(ctx, ctrl, n).items():
            row[case + "_us"] = _block_seconds(ctrl, call, calls, args.repetitions) * 1e6
        row["device_over_host"] = row["hpcdist_device_us"] / row["hpcdist_host_us"]
        row["device_vs_by_hand"] = row["mpi4py_device_staged_us"] / row["hpcdist_device_us"]
        rows.append(row)
        if ctx.rank == 0:
            print(f"  {common.format_size(row['bytes']):>9s} "
                  + " ".join(f"{row[c + '_us']:12.1f}" for c in ALLREDUCE_CASES)
                  + f" {row['device_over_host']:8.2f}x {row['device_vs_by_hand']:8.2f}x",
                  flush=True)
    return {"mode": "cuda-aware" if ctx.cuda_aware else "staged", "rows": rows}


# -- compression kernels ----------------------------------------------------------------------

def _kernel_calls(x, seed):
    """name -> call of one hpcdist kernel on ``x`` (a NumPy or a CuPy array)."""
    n = x.size
    k = max(1, int(TOPK_RATIO * n))
    indices, values = topk(x, k)
    norm, levels = qsgd_quantize(x, 127, seed)
    q, scales = int8_quantize(x, CHUNK)
    packed, sign_scales = sign_pack(x, CHUNK)
    half = to_half(x, "float16")
    dense = x * 0
    residual = x * 0
    return {
        "topk": lambda: topk(x, k),
        "topk_threshold": lambda: topk_threshold(x, k, seed=seed),
        "qsgd_quantize": lambda: qsgd_quantize(x, 127, seed),
        "qsgd_dequantize": lambda: qsgd_dequantize(norm, levels, 127, x.dtype),
        "int8_quantize": lambda: int8_quantize(x, CHUNK),
        "int8_dequantize": lambda: int8_dequantize(q, scales, CHUNK, x.dtype),
        "sign_pack": lambda: sign_pack(x, CHUNK),
        "sign_unpack": lambda: sign_unpack(packed, sign_scales, n, CHUNK, x.dtype),
        "to_half float16": lambda: to_half(x, "float16"),
        "to_half bfloat16": lambda: to_half(x, "bfloat16"),
        "from_half float16": lambda: from_half(half, x.dtype),
        "scatter_add": lambda: scatter_add(dense, indices, values),
        "scale_add": lambda: scale_add(dense, x, 0.5),
        "error_feedback_update": lambda: error_feedback_update(residual, x, dense),
    }


def _compression_part(args):
    host = np.random.default_rng(7).standard_normal(args.elements, dtype=np.float32)
    device = cupy.asarray(host)
    host_calls = _kernel_calls(host, seed=7)
    rows = []
    for name, device_call in _kernel_calls(device, seed=7).items():
        device_seconds = _device_seconds(device_call, args.repetitions)
        host_seconds = common.median_seconds(host_calls[name], args.repetitions)
        rows.append({"kernel": name, "device_ms": device_seconds * 1e3,
                     "host_ms": host_seconds * 1e3, "speedup": host_seconds / device_seconds,
                     "device_gb_s": host.nbytes / device_seconds / 1e9})
        print(f"  {name:22s} {rows[-1]['device_ms']:10.3f} {rows[-1]['host_ms']:10.3f} "
              f"{rows[-1]['speedup']:8.1f}x {rows[-1]['device_gb_s']:8.1f}", flush=True)
    return {"elements": args.elements, "dtype": "float32", "rows": rows}


# -- K-means -----------------------------------------------------------------------------------

def _kmeans_part(args):
    X, _ = make_blobs(args.samples, args.features, centers=args.clusters, cluster_std=4.0,
                      random_state=0, ctx=MPI.COMM_SELF, dtype=np.float32)
    centers = X[np.random.default_rng(1).choice(len(X), args.clusters, replace=False)]
    X_device = cupy.asarray(X)
    results = {}
    for where, data in (("device", X_device), ("host", X)):
        def fit():
            return KMeans(args.clusters, init=centers, n_init=1, max_iter=args.iterations,
                          tol=0.0, comm=MPI.COMM_SELF).fit(data)
        model = fit()  # warm-up: Numba compilation, CuPy kernel cache
        _synchronize()
        seconds = _device_seconds(fit, args.repetitions)
        results[where] = {"seconds_per_fit": seconds, "n_iter": int(model.n_iter_),
                          "seconds_per_iteration": seconds / model.n_iter_,
                          "inertia": float(model.inertia_)}
    device, host = results["device"], results["host"]
    return {"samples": args.samples, "features": args.features, "clusters": args.clusters,
            "max_iter": args.iterations, "device": device, "host": host,
            "speedup_per_iteration": host["seconds_per_iteration"]
            / device["seconds_per_iteration"],
            "inertia_relative_difference": abs(device["inertia"] - host["inertia"])
            / host["inertia"]}


# -- main ----------------------------------------------------------------------------------------

def _device_info():
    properties = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    return {"gpu": properties["name"].decode(),
            "gpu_memory_bytes": int(properties["totalGlobalMem"]),
            "cuda_runtime": cupy.cuda.runtime.runtimeGetVersion(),
            "cuda_driver": cupy.cuda.runtime.driverGetVersion(), "cupy": cupy.__version__}


def main(argv=None):
    """Run the parts asked for; rank 0 prints each and writes ``<name>_<part>.json``."""
    args = _parse_args(argv)
    if cupy is None:
        _build_parser().error("CuPy is not installed: install hpcdist[gpu] (CUDA 12) or "
                              "hpcdist[gpu-cuda13] (CUDA 13), or the CuPy package for your CUDA "
                              "version, on a node with a GPU")
    ctx = init(device="cuda")
    ctrl = ctx.comm.Dup()
    settings = {"repetitions": args.repetitions, "quick": args.quick}
    for part in args.parts:
        if ctx.rank == 0:
            print(f"\n== {part} ({ctx.size} rank(s), device {ctx.device})", flush=True)
        if part == "allreduce":
            if ctx.rank == 0:
                print("       size " + " ".join(f"{c[:12]:>12s}" for c in ALLREDUCE_CASES)
                      + "  dev/host  by-hand/dev  (us per call)", flush=True)
            result = _allreduce_part(ctx, ctrl, args)
        elif ctx.rank == 0:
            result = _compression_part(args) if part == "compression" else _kmeans_part(args)
            if part == "kmeans":
                print(f"  {result}", flush=True)
        common.idle_until_all_arrive(ctrl)
        machine = common.machine_info(ctrl, **_device_info())
        if ctx.rank == 0:
            report = {"benchmark": f"gpu_{part}", "machine": machine, "settings": settings,
                      part: result}
            common.write_report(report, args.output_dir, f"{args.name}_{part}")
    ctrl.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
