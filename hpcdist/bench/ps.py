"""``hpcdist bench ps``, its RPC part: hpcdist.rpc's round trip against an MPI ping-pong.

Run under mpiexec at 2 ranks (ranks above 1 stay idle), one thread per rank::

    OMP_NUM_THREADS=1 mpiexec -n 2 python -m hpcdist.bench.ps            # 8 B .. 64 MiB
    OMP_NUM_THREADS=1 mpiexec -n 2 python -m hpcdist.bench.ps --quick    # 3 sizes, seconds

Round trips of a float64 array of each size (8 B to 64 MiB), rank 0 calling
and rank 1 answering:

``rpc``
    ``rpc_sync(1, echo, args=(x,))``: rank 1's RPC service thread receives
    the call and a handler sends ``x`` back; rank 0's calling thread
    receives the reply itself, a new array.
``mpi4py``
    ``comm.Send(x, 1); comm.Recv(buf, 1)`` and rank 1's mirror on
    ``ctx.comm``, into buffers allocated once: the floor of any round trip.
``torch``
    ``torch.distributed.rpc.rpc_sync("worker1", echo, args=(t,))`` on
    ``t = torch.from_numpy(x)`` (TensorPipe backend), when torch is
    installed: the RPC a PyTorch user has.
``futures``
    ``executor.submit(echo, x).result()`` in
    ``mpi4py.futures.MPICommExecutor(ctx.comm, root=0, use_pkl5=True)``
    (pickle protocol 5, buffers out of band, as hpcdist.rpc sends them), up
    to 1 MiB: its messages progress only while its threads poll between
    backoff sleeps of up to 1 ms, so large messages take seconds. Left out,
    saying so, when mpi4py.futures does not run here.

Timing: per size, each implementation is checked once (the echo equals
``x``) and warmed up; a pilot round trip on rank 0 sets its batch length
``k`` (round trips lasting about ``--batch-ms``, at least 1). Each of the R
repetitions then runs every implementation's batch once, the first one
rotating, with sleeping barriers around each batch (no rank spins on a core
another needs); a repetition's time is rank 0's time per round trip. The
executor is entered and left around each of its batches, and makes one
untimed call first (its pool starts on the first call), outside the timed
part. Reported: medians over repetitions and the ratios rpc/baseline of the
medians; the JSON keeps every repetition and the median of the
per-repetition ratios. The RPC service threads poll (at most every 2 ms when
idle) during the baselines' batches too.

Summary: the worst ratio of the RPC round trip to the mpi4py ping-pong
from 1 MiB up, where the bytes dominate, and the ratios of the smaller sizes
as measured. The parameter server itself (steps per second of sync, async
and bounded staleness, with stragglers) is measured by
``hpcdist bench ps-modes`` (:mod:`hpcdist.bench.ps_modes`).
"""

import statistics
import sys
import time

import numpy as np

from ..comm import init
from ..rpc import init_rpc, rpc_sync, shutdown
from .common import (
    KIB,
    MIB,
    benchmark_parser,
    byte_size_list,
    format_size,
    idle_until_all_arrive,
    init_torch_rpc,
    load_average,
    machine_info,
    positive_float,
    write_report,
)

__all__ = ["main", "IMPLEMENTATIONS", "LARGE_FROM", "summarize"]

IMPLEMENTATIONS = ("rpc", "mpi4py", "torch", "futures")
BASELINES = IMPLEMENTATIONS[1:]
DTYPE = np.float64
DEFAULT_SIZES = (8, 512, 8 * KIB, 64 * KIB, 256 * KIB, MIB, 4 * MIB, 16 * MIB, 64 * MIB)
QUICK_SIZES = (8, 64 * KIB, MIB)
DEFAULT_REPETITIONS = 9
QUICK_REPETITIONS = 3
DEFAULT_BATCH_MS = 50.0
QUICK_BATCH_MS = 10.0
MAX_ROUND_TRIPS = 1000  # the longest batch
LARGE_FROM = MIB        # the summary's worst rpc/mpi4py ratio is taken from this size up
FUTURES_UP_TO = MIB     # the largest size the futures baseline runs at

CALLS = {
    "rpc": "rpc_sync(1, echo, args=(x,))",
    "mpi4py": "rank 0: comm.Send(x, 1); comm.Recv(buf, 1)  "
              "rank 1: comm.Recv(buf, 0); comm.Send(buf, 0)",
    "torch": 'torch.distributed.rpc.rpc_sync("worker1", echo, args=(torch.from_numpy(x),))',
    "futures": "MPICommExecutor(comm, root=0, use_pkl5=True): executor.submit(echo, x).result()",
}


def echo(x):
    """Return ``x`` (the function every round trip runs on rank 1)."""
    return x


# -- arguments ------------------------------------------------------------------------------

def _parse_args(argv):
    parser = benchmark_parser(
        "ps", "Round trip of hpcdist.rpc's rpc_sync (echo of a float64 array) against a raw "
              "mpi4py Send/Recv ping-pong and mpi4py.futures, interleaved, at 2 ranks.",
        quick=f"3 sizes ({', '.join(map(format_size, QUICK_SIZES))}), {QUICK_REPETITIONS} "
              f"repetitions, {QUICK_BATCH_MS:g} ms batches", plot=False)
    parser.add_argument("--sizes", type=byte_size_list(8, "float64"),
                        help="comma list of array bytes, K and M for KiB and MiB, multiples "
                             "of 8 (default: 8 B, 512 B, 8 KiB, 64 KiB ... 64 MiB)")
    parser.add_argument("--repetitions", type=int, help=f"default {DEFAULT_REPETITIONS}")
    parser.add_argument("--batch-ms", type=positive_float, help=f"default {DEFAULT_BATCH_MS:g}")
    parser.add_argument("--no-futures", action="store_true",
                        help="leave the mpi4py.futures baseline out")
    parser.add_argument("--no-torch", action="store_true",
                        help="leave the torch.distributed.rpc baseline out")
    args = parser.parse_args(argv)
    if args.repetitions is not None and args.repetitions < 1:
        parser.error(f"--repetitions={args.repetitions} should be >= 1")
    quick = args.quick
    args.sizes = args.sizes or list(QUICK_SIZES if quick else DEFAULT_SIZES)
    args.repetitions = args.repetitions or (QUICK_REPETITIONS if quick else DEFAULT_REPETITIONS)
    args.batch_ms = args.batch_ms or (QUICK_BATCH_MS if quick else DEFAULT_BATCH_MS)
    return args


# -- round trips ----------------------------------------------------------------------------
# A batch runs on every rank and returns (seconds per round trip, the last echo) on rank 0,
# (None, None) elsewhere.

def _timed(call, k):
    start = time.perf_counter()
    for _ in range(k):
        result = call()
    return (time.perf_counter() - start) / k, result


def _rpc_batch(comm, x, buf, k):
    if comm.Get_rank() != 0:
        return None, None  # rank 1's service thread answers
    return _timed(lambda: rpc_sync(1, echo, args=(x,)), k)


def _mpi4py_batch(comm, x, buf, k):
    rank = comm.Get_rank()
    if rank == 0:
        def round_trip():
            comm.Send(x, 1)
            comm.Recv(buf, 1)
            return buf

        return _timed(round_trip, k)
    if rank == 1:
        for _ in range(k):
            comm.Recv(buf, 0)
            comm.Send(buf, 0)
    return None, None


def _torch_batch(comm, x, buf, k):
    if comm.Get_rank() != 0:
        return None, None  # rank 1's TensorPipe agent answers
    import torch  # optional: imported only where init_torch_rpc found it
    import torch.distributed.rpc as rpc

    tensor = torch.from_numpy(x)
    return _timed(lambda: rpc.rpc_sync("worker1", echo, args=(tensor,)), k)


def _futures_batch(comm, x, buf, k):
    executor_class = _futures_executor()
    with executor_class(comm, root=0, use_pkl5=True) as executor:
        if executor is not None:  # rank 0; the others serve until it leaves the block
            def round_trip():
                return executor.submit(echo, x).result()

            round_trip()  # untimed: the executor starts its workers on the first call
            return _timed(round_trip, k)
    return None, None


BATCHES = {"rpc": _rpc_batch, "mpi4py": _mpi4py_batch, "torch": _torch_batch,
           "futures": _futures_batch}


def _futures_executor():
    """``mpi4py.futures.MPICommExecutor``, imported here: importing it starts MPI, which
    importing an hpcdist module must not (the baseline may call mpi4py)."""
    from mpi4py.futures import MPICommExecutor

    return MPICommExecutor


def _futures_work(comm, ctrl):
    """Whether the mpi4py.futures baseline runs here (one echo through it), on every rank."""
    try:
        seconds, result = _futures_batch(comm, np.arange(2, dtype=DTYPE), None, 1)
        ok = comm.Get_rank() != 0 or np.array_equal(result, [0.0, 1.0])
    except Exception as exc:  # noqa: BLE001 - reported, then left out
        print(f"rank {comm.Get_rank()}: mpi4py.futures does not run here "
              f"({type(exc).__name__}: {exc}): no futures baseline", flush=True)
        ok = False
    return all(ctrl.allgather(ok))


def _measure_size(comm, ctrl, names, size, args):
    """Check and time every implementation at ``size`` bytes; rank 0 gets the record."""
    names = [name for name in names if name != "futures" or size <= FUTURES_UP_TO]
    x = np.arange(size // 8, dtype=DTYPE)
    buf = np.empty_like(x)

    def batch(name, k):
        idle_until_all_arrive(ctrl)
        seconds, result = BATCHES[name](comm, x, buf, k)
        idle_until_all_arrive(ctrl)
        return seconds, result

    verified, k = {}, {}
    for name in names:
        echoed = batch(name, 1)[1]
        verified[name] = comm.Get_rank() != 0 or bool(np.array_equal(echoed, x))
        batch(name, 2)  # warm-up
        pilot = batch(name, 1)[0]
        k[name] = None if pilot is None else int(min(MAX_ROUND_TRIPS, max(
            1, args.batch_ms / 1e3 // max(pilot, 1e-9))))
    k = ctrl.bcast(k, root=0)
    times = {name: [] for name in names}
    for rep in range(args.repetitions):
        first = rep % len(names)
        for name in names[first:] + names[:first]:
            times[name].append(batch(name, k[name])[0])
    if comm.Get_rank() != 0:
        return None
    times_us = {name: [t * 1e6 for t in values] for name, values in times.items()}
    medians = {name: statistics.median(values) for name, values in times_us.items()}
    return {
        "size_bytes": size, "elements": x.size, "round_trips_per_batch": k,
        "repetitions": args.repetitions, "verified": verified, "median_us": medians,
        "times_us": times_us,
        "ratio": {f"rpc/{base}": medians["rpc"] / medians[base]
                  for base in BASELINES if base in medians},
        "ratio_paired": {f"rpc/{base}": statistics.median(np.divide(times["rpc"], times[base]))
                         for base in BASELINES if base in times},
    }


# -- report ---------------------------------------------------------------------------------

def summarize(records):
    """The records' rpc/mpi4py ratios: the worst from :data:`LARGE_FROM` up, and each
    smaller size's.

    Returns
    -------
    dict
        ``from_bytes``, ``worst`` and ``at_size_bytes`` (None without a row
        from :data:`LARGE_FROM` up) and ``below`` (size -> ratio of the
        smaller sizes).
    """
    large = [(r["ratio"]["rpc/mpi4py"], r["size_bytes"]) for r in records
             if r["size_bytes"] >= LARGE_FROM]
    worst, at = max(large) if large else (None, None)
    below = {str(r["size_bytes"]): r["ratio"]["rpc/mpi4py"] for r in records
             if r["size_bytes"] < LARGE_FROM}
    return {"from_bytes": LARGE_FROM, "worst": worst, "at_size_bytes": at, "below": below}


def _header(names):
    calls = "\n".join(f"  {name:8s} {CALLS[name]}" for name in names)
    columns = f"{'size':>8} {'rpc us':>11}" + "".join(
        f" {name + ' us':>11} {'rpc/' + name:>13}" for name in names[1:])
    return f"{calls}\n{columns}"


def _row(record, names):
    median, ratio = record["median_us"], record["ratio"]
    text = f"{format_size(record['size_bytes']):>8} {median['rpc']:11.1f}" + "".join(
        f" {median[name]:11.1f} {ratio['rpc/' + name]:12.2f}x" if name in median else
        f" {'-':>11} {'-':>13}" for name in names[1:])
    wrong = [name for name, ok in record["verified"].items() if not ok]
    return text + (f"  WRONG RESULT: {', '.join(wrong)}" if wrong else "")


def _summary_text(summary):
    below = ", ".join(f"{format_size(int(size))} {ratio:.2f}x"
                      for size, ratio in summary["below"].items()) or "none"
    worst = "no size" if summary["worst"] is None else \
        f"worst {summary['worst']:.2f}x @ {format_size(summary['at_size_bytes'])}"
    return (f"\nSummary: rpc round trip / mpi4py ping-pong from {format_size(LARGE_FROM)} up: "
            f"{worst}\nbelow {format_size(LARGE_FROM)} (rpc/mpi4py): {below}")


def main(argv=None):
    """Run the benchmark on ``argv`` (default: the command line) under ``mpiexec -n 2``.

    Rank 0 prints the table and the summary and writes ``NAME.json``; returns
    the exit status (2 with fewer than 2 ranks).
    """
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    ctx = init()
    if ctx.size < 2:
        print("hpcdist bench ps needs 2 ranks: mpiexec -n 2 python -m hpcdist.bench.ps",
              file=sys.stderr, flush=True)
        return 2
    comm, ctrl = ctx.comm, ctx.comm.Dup()
    load_before = load_average()
    init_rpc(ctx)
    torch_rpc = init_torch_rpc(ctrl, enabled=not args.no_torch)
    try:
        names = list(IMPLEMENTATIONS)
        if torch_rpc is None:
            names.remove("torch")
        if args.no_futures or not _futures_work(comm, ctrl):
            names.remove("futures")
        if ctx.rank == 0:
            print(f"hpcdist bench ps (RPC round trip): {ctx.size} ranks, load average "
                  f"{load_before}; medians of {args.repetitions} in microseconds per round "
                  f"trip (a loaded machine makes them noisy)\n{_header(names)}", flush=True)
        records = []
        for size in args.sizes:
            records.append(_measure_size(comm, ctrl, names, size, args))
            if ctx.rank == 0:
                print(_row(records[-1], names), flush=True)
        machine = machine_info(ctrl, load_average_before=load_before,
                               load_average_after=load_average())
    finally:
        if torch_rpc is not None:
            torch_rpc.shutdown()
        shutdown()
        ctrl.Free()
    if ctx.rank == 0:
        summary = summarize(records)
        print(_summary_text(summary), flush=True)
        settings = {"sizes_bytes": args.sizes, "dtype": "float64", "quick": args.quick,
                    "repetitions": args.repetitions, "batch_ms": args.batch_ms,
                    "calls": {name: CALLS[name] for name in names},
                    "timing": "per repetition, each implementation's batch once (first "
                              "rotating), sleeping barriers around it; rank 0's time per "
                              "round trip; medians over repetitions"}
        write_report({"benchmark": "ps", "machine": machine, "settings": settings,
                      "implementations": names, "rpc": records, "summary": summary},
                     args.output_dir, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
