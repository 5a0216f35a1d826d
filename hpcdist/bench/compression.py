"""``hpcdist bench compression``: gradient compression kernels and collectives.

Run under mpiexec (``hpcdist bench compression -n 2`` starts it so). In one run:

1. Kernel throughput on ``--elements`` float32 (default 16M) on rank 0: every
   hpcdist kernel next to its NumPy equivalent (``np.argpartition``,
   ``astype``, ``np.packbits``, ``np.add.at``, ...) and next to the machine's
   memcpy bandwidth (``np.copyto``) measured in the same run. Throughput is
   input bytes per second.
2. Every compressor on every rank: bytes on the wire, compress and decompress
   times, and ``compressed_allreduce`` against a dense ``hpcdist.allreduce``
   (median over repetitions of the slowest rank).
3. An alpha-beta model: a ring allreduce of ``b`` bytes on ``p`` ranks costs
   ``2 (p - 1) (alpha + b / (p * B))``; an allgather of compressed payloads of
   ``c`` bytes costs ``(p - 1) (alpha + c / B)``, plus the measured compression
   time. Solving "compressed <= dense" for the network bandwidth ``B`` gives
   the bandwidth below which each compressor pays off, for the run's rank
   count and for 8 and 64 ranks.

Each kernel's row gives its speedup over the NumPy version and its
throughput as a fraction of the memcpy bandwidth measured in the same run
(the bound for a kernel that reads its input once).
"""

from __future__ import annotations

import sys
import time

import numpy as np
from ml_dtypes import bfloat16

from ..comm import allreduce, init
from ..comm.mpi import MPI
from ..compression import (
    BF16Compressor,
    ErrorFeedback,
    FP16Compressor,
    NoCompression,
    PowerSGDCompressor,
    QSGDCompressor,
    RandomKCompressor,
    SignCompressor,
    TopKCompressor,
    compressed_allreduce,
)
from ..kernels import (
    error_feedback_update,
    int8_quantize,
    qsgd_quantize,
    randomk_indices,
    scale_add,
    scatter_add,
    sign_pack,
    to_half,
    topk,
    topk_threshold,
)
from .common import (
    benchmark_parser,
    idle_until_all_arrive,
    machine_info,
    median_seconds,
    write_report,
)

__all__ = ["main"]

MODEL_RANKS = (8, 64)


def _build_parser():
    parser = benchmark_parser(
        "compression",
        "Time hpcdist's compression kernels against NumPy and memcpy, and "
        "compressed_allreduce against a dense allreduce. Run under mpiexec.",
        quick="1M elements and 3 repetitions (about ten seconds)", plot=False)
    parser.add_argument("--elements", type=int, default=16 * 1024 * 1024,
                        help="float32 elements per array (default 16M)")
    parser.add_argument("--repetitions", type=int, default=5, help="timed calls per case")
    parser.add_argument("--ratio", type=float, default=0.01,
                        help="fraction kept by top-k and random-k (default 0.01)")
    return parser


def _parse_args(argv):
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.quick:
        args.elements, args.repetitions = min(args.elements, 1024 * 1024), min(args.repetitions, 3)
    if args.elements < 1024:
        parser.error(f"--elements={args.elements} should be >= 1024")
    if not 0 < args.ratio <= 1:
        parser.error(f"--ratio={args.ratio} should be in (0, 1]")
    if args.repetitions < 1:
        parser.error(f"--repetitions={args.repetitions} should be >= 1")
    return args


# -- 1. kernels against NumPy -------------------------------------------------------------

def _numpy_qsgd(x, levels, rng):
    norm = np.linalg.norm(x)
    scaled = np.abs(x) * (levels / norm)
    floor = np.floor(scaled)
    q = floor + (rng.random(x.size, dtype=np.float32) < (scaled - floor))
    return norm, (np.sign(x) * q).astype(np.int8)


def _numpy_int8(x, chunk):
    chunks = x[: x.size - x.size % chunk].reshape(-1, chunk)
    scales = np.abs(chunks).max(axis=1) / 127
    return np.round(chunks / scales[:, None]).astype(np.int8), scales


def _numpy_sign(x, chunk):
    chunks = x[: x.size - x.size % chunk].reshape(-1, chunk)
    return np.packbits(x >= 0, bitorder="little"), np.abs(chunks).mean(axis=1)


def _kernel_cases(x, k, seed):
    """(name, hpcdist call, NumPy call, kind) for every kernel; kind is ``"topk"`` (a
    selection), ``"bandwidth"`` (one pass over memory) or ``"other"``."""
    n = x.size
    chunk = 1024
    rng = np.random.default_rng(seed)
    indices = np.sort(rng.choice(n, k, replace=False)).astype(np.int64)
    values = x[indices]
    dense = np.zeros_like(x)
    residual = np.empty_like(x)
    other = x[::-1].copy()
    return [
        ("topk", lambda: topk(x, k),
         lambda: np.argpartition(np.abs(x), n - k)[n - k:], "topk"),
        ("topk_threshold", lambda: topk_threshold(x, k, seed=seed),
         lambda: np.argpartition(np.abs(x), n - k)[n - k:], "topk"),
        ("randomk_indices", lambda: randomk_indices(n, k, seed),
         lambda: np.sort(np.random.default_rng(seed).choice(n, k, replace=False)), "other"),
        ("qsgd_quantize", lambda: qsgd_quantize(x, 127, seed),
         lambda: _numpy_qsgd(x, 127, np.random.default_rng(seed)), "bandwidth"),
        ("int8_quantize", lambda: int8_quantize(x, chunk),
         lambda: _numpy_int8(x, chunk), "bandwidth"),
        ("sign_pack", lambda: sign_pack(x, chunk),
         lambda: _numpy_sign(x, chunk), "bandwidth"),
        ("to_half float16", lambda: to_half(x, "float16"),
         lambda: x.astype(np.float16), "other"),
        ("to_half bfloat16", lambda: to_half(x, "bfloat16"),
         lambda: x.astype(bfloat16), "other"),
        ("scatter_add", lambda: scatter_add(dense, indices, values),
         lambda: np.add.at(dense, indices, values), "other"),
        ("scale_add", lambda: scale_add(dense, x, 0.5),
         lambda: np.add(dense, 0.5 * x, out=dense), "other"),
        ("error_feedback_update", lambda: error_feedback_update(residual, x, other),
         lambda: np.subtract(x, other, out=residual), "other"),
    ]


def _kernel_report(x, k, repetitions, seed):
    destination = np.empty_like(x)
    memcpy_seconds = median_seconds(lambda: np.copyto(destination, x), repetitions)
    memcpy_bandwidth = x.nbytes / memcpy_seconds
    rows = []
    for name, ours, numpy_version, kind in _kernel_cases(x, k, seed):
        ours_seconds = median_seconds(ours, repetitions)
        numpy_seconds = median_seconds(numpy_version, max(1, repetitions // 2))
        row = {"kernel": name, "hpcdist_ms": ours_seconds * 1e3, "numpy_ms": numpy_seconds * 1e3,
               "speedup_vs_numpy": numpy_seconds / ours_seconds,
               "throughput_gb_s": x.nbytes / ours_seconds / 1e9,
               "fraction_of_memcpy": x.nbytes / ours_seconds / memcpy_bandwidth, "kind": kind}
        rows.append(row)
    return {"memcpy_gb_s": memcpy_bandwidth / 1e9, "kernels": rows}


# -- 2. compressors and compressed_allreduce -------------------------------------------------

def _compressors(ratio):
    return {
        "none": NoCompression(),
        "fp16": FP16Compressor(),
        "bf16": BF16Compressor(),
        "topk": TopKCompressor(ratio),
        "topk+ef": ErrorFeedback(TopKCompressor(ratio)),
        "randomk": RandomKCompressor(ratio, seed=0),
        "qsgd": QSGDCompressor(levels=127),
        "sign+ef": ErrorFeedback(SignCompressor()),
        "powersgd": PowerSGDCompressor(rank=4),
    }


def _slowest(ctrl, seconds):
    return ctrl.allreduce(seconds, op=MPI.MAX)


def _timed_collective(ctrl, function, repetitions):
    """Median over repetitions of the slowest rank's time for one call."""
    function()
    times = []
    for _ in range(repetitions):
        ctrl.Barrier()
        start = time.perf_counter()
        function()
        times.append(_slowest(ctrl, time.perf_counter() - start))
    return float(np.median(times))


def _compressor_report(x, ratio, repetitions, ctx, ctrl):
    matrix = x.reshape(1024, -1) if x.size % 1024 == 0 else x  # PowerSGD wants a matrix
    dense_seconds = _timed_collective(ctrl, lambda: allreduce(x, op="mean", ctx=ctx), repetitions)
    rows = []
    for name, compressor in _compressors(ratio).items():
        data = matrix if name == "powersgd" else x
        payload, meta = compressor.compress(data, f"bench-{name}")
        wire = sum(int(np.asarray(part).nbytes) for part in payload)
        compress_seconds = median_seconds(lambda: compressor.compress(data, f"bench-{name}"),
                                          repetitions)
        decompress_seconds = median_seconds(lambda: compressor.decompress(payload, meta),
                                            repetitions)
        collective_seconds = _timed_collective(
            ctrl, lambda: compressed_allreduce(data, compressor, name=f"ar-{name}", ctx=ctx),
            repetitions)
        rows.append({"compressor": name, "collective": compressor.collective,
                     "wire_bytes": wire, "compression_factor": x.nbytes / max(wire, 1),
                     "compress_ms": compress_seconds * 1e3,
                     "decompress_ms": decompress_seconds * 1e3,
                     "compressed_allreduce_ms": collective_seconds * 1e3,
                     "dense_allreduce_ms": dense_seconds * 1e3,
                     "speedup_vs_dense": dense_seconds / collective_seconds})
    return rows


# -- 3. alpha-beta model -----------------------------------------------------------------------

def _break_even_bandwidth(row, dense_bytes, ranks, alpha):
    """Network bandwidth (bytes/s) below which the compressor beats a dense ring allreduce.

    Dense: ``2 (p-1) (alpha + b / (p B))``. Compressed, summable payloads: the
    same ring on ``c`` bytes; gathered payloads: ``(p-1) (alpha + c / B)`` and
    ``p`` decompressions. Returns None when compression never pays.
    """
    c = row["wire_bytes"]
    compute = (row["compress_ms"] + row["decompress_ms"]
               * (ranks if row["collective"] == "allgather" else 1)) / 1e3
    if row["collective"] == "allgather":
        latency_delta = (ranks - 1) * alpha - 2 * (ranks - 1) * alpha
        bytes_saved = 2 * (ranks - 1) * dense_bytes / ranks - (ranks - 1) * c
    else:
        latency_delta = 0.0
        bytes_saved = 2 * (ranks - 1) * (dense_bytes - c) / ranks
    cost = compute + latency_delta
    if bytes_saved <= 0:
        return None
    if cost <= 0:
        return float("inf")
    return bytes_saved / cost


def _model(rows, dense_bytes, ranks, alpha):
    model = {}
    for row in rows:
        per_ranks = {}
        for p in sorted({ranks, *MODEL_RANKS}):
            bandwidth = _break_even_bandwidth(row, dense_bytes, p, alpha)
            per_ranks[str(p)] = None if bandwidth is None else bandwidth * 8 / 1e9  # Gbit/s
        model[row["compressor"]] = per_ranks
    return model


def _latency(ctx, ctrl, repetitions):
    small = np.zeros(1, dtype=np.float32)
    return _timed_collective(ctrl, lambda: [allreduce(small, ctx=ctx) for _ in range(100)],
                             repetitions) / 100


# -- report -------------------------------------------------------------------------------------

def _print_report(report):
    kernels = report["kernels"]
    print(f"\nkernels on {report['settings']['elements']:,} float32 "
          f"(memcpy {kernels['memcpy_gb_s']:.2f} GB/s):")
    print(f"  {'kernel':24s} {'hpcdist ms':>11s} {'numpy ms':>10s} {'speedup':>8s} "
          f"{'GB/s':>7s} {'of memcpy':>10s}")
    for row in kernels["kernels"]:
        print(f"  {row['kernel']:24s} {row['hpcdist_ms']:11.2f} {row['numpy_ms']:10.2f} "
              f"{row['speedup_vs_numpy']:7.1f}x {row['throughput_gb_s']:7.2f} "
              f"{row['fraction_of_memcpy']:9.0%}")
    print(f"\ncompressors at {report['machine']['ranks']} ranks "
          f"(allreduce latency {report['alpha_us']:.1f} us):")
    print(f"  {'compressor':10s} {'collective':>10s} {'wire bytes':>12s} {'factor':>7s} "
          f"{'compress ms':>12s} {'decompress':>11s} {'comp. allreduce':>16s} {'dense':>8s}"
          f"  break-even Gbit/s (p={', '.join(report['model_ranks'])})")
    for row in report["compressors"]:
        model = report["model"][row["compressor"]]
        cells = ", ".join("never" if v is None else ("any" if v == float("inf") else f"{v:.1f}")
                          for v in model.values())
        print(f"  {row['compressor']:10s} {row['collective']:>10s} {row['wire_bytes']:12,d} "
              f"{row['compression_factor']:6.1f}x {row['compress_ms']:12.2f} "
              f"{row['decompress_ms']:11.2f} {row['compressed_allreduce_ms']:13.2f} ms "
              f"{row['dense_allreduce_ms']:6.2f} ms  {cells}")


def main(argv=None):
    """Run the benchmark; rank 0 prints the report and writes ``NAME.json`` (``--name``)."""
    args = _parse_args(argv)
    ctx = init()
    ctrl = ctx.comm.Dup()
    x = np.random.default_rng(ctx.rank).standard_normal(args.elements, dtype=np.float32)
    k = max(1, int(args.ratio * x.size))
    kernels = _kernel_report(x, k, args.repetitions, seed=7) if ctx.rank == 0 else None
    idle_until_all_arrive(ctrl)  # rank 0 times the kernels alone
    compressors = _compressor_report(x, args.ratio, args.repetitions, ctx, ctrl)
    alpha = _latency(ctx, ctrl, args.repetitions)
    machine = machine_info(ctrl)
    if ctx.rank == 0:
        report = {"benchmark": "compression", "machine": machine,
                  "settings": {"elements": x.size, "dtype": "float32", "ratio": args.ratio,
                               "repetitions": args.repetitions},
                  "kernels": kernels, "compressors": compressors, "alpha_us": alpha * 1e6,
                  "model_ranks": [str(p) for p in sorted({ctx.size, *MODEL_RANKS})],
                  "model": _model(compressors, x.nbytes, ctx.size, alpha)}
        _print_report(report)
        write_report(report, args.output_dir, args.name)
    ctrl.Free()
    return 0


if __name__ == "__main__":
    sys.exit(main())
