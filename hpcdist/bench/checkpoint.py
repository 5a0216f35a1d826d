"""``hpcdist bench checkpoint``: checkpoint save/restore throughput against raw h5py.

The state is ``--size`` bytes (default 1 GiB) of float32, as a training
state with distributed optimizer state looks::

    {"params": Sharded(size/2), "moments": {"m": Sharded(size/4), "v": Sharded(size/4 - 1 MiB)},
     "head": 1 MiB replicated array, "step": int, "lr": float, "name": str}

(each Sharded entry split evenly over the ranks). Cases, at N ranks:

``hpcdist <backend> save``
    ``CheckpointManager(dir, backend=..., max_to_keep=1).save(step, state)``:
    files written, fsynced, CRC-32 checked, committed (manifest, COMMIT,
    rename), the previous step deleted. ``mpio`` only where h5py is
    parallel (``h5py.get_config().mpi``).
``hpcdist <backend> restore``
    ``mgr.restore()`` of the newest step that backend wrote (at N ranks,
    each rank reads its blocks; the CRCs of all files are verified first,
    the work spread over the ranks).
``h5py save`` (the baseline)
    One writer (rank 0) writes the same bytes, the same global arrays, into
    a new file with ``h5py.File(path, "w")`` and ``create_dataset(name,
    data=array)``, then closes it: no fsync (the data may still be in the
    page cache), no checksum. (After the clock stops the file is fsynced,
    so that the next case does not wait for its write-back, and the
    previous one is deleted, as hpcdist deletes its previous step.)
``h5py+fsync save``
    The same, then ``os.fsync`` of the file: what durability costs.
``h5py restore``
    Rank 0 reads the baseline's file back whole.

Rank counts. Each rank count is its own ``mpiexec -n N`` job::

    python benchmarks/bench_checkpoint.py               # 1 and 2 ranks, merged
    hpcdist bench checkpoint [-n N]                     # 1 and N ranks
    python -m hpcdist.bench.checkpoint --ranks 1,2,4 --size 4G --dir /scratch/me
    mpiexec -n 2 python -m hpcdist.bench.checkpoint     # this rank count only

Timing: every case is run once untimed (and the restored state checked
against the saved one), then ``--repetitions`` rounds each run every case
once, the first case rotating between rounds. A case's time is that of the
slowest rank (barrier before). Reported: median seconds, GiB/s
(``size / time``), and hpcdist's save throughput over the baseline's; also
the fastest repetition of each case and the ratio of those (other load on
the machine mostly adds slow outliers).
After every case, untimed, the disk is left quiet: the baseline's file is
fsynced and its previous one deleted, hpcdist's background deletion of its
previous step is waited for, and ``os.sync()`` runs, so no case pays for
the write-back or the deletions of the one before it. Writes go to the
page cache first; ``h5py save`` returns before the disk has the data,
while hpcdist's save returns once its fsyncs are done (it starts flushing
while it writes), so the numbers depend on the storage and on what else
runs (the load average before and after is kept).

Summary: save throughput over the raw h5py writer's (plain write + close),
for each backend at 1 and 2 ranks ("not measured" where the run has no such
figure); the JSON keeps the ratio to ``h5py+fsync`` too.

Output: a table per rank count and a summary on rank 0 (or the launching
process), ``<output-dir>/<name>.json`` and ``<name>.png`` (skipped without
matplotlib).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import h5py
import numpy as np

from .._hdf5_blocks import h5py_is_parallel
from ..checkpoint import CheckpointCorruptError, CheckpointManager, Sharded
from ..checkpoint.commit import fsync_file, wait_for_deletions
from ..comm import init
from ..comm.mpi import MPI
from ..data import DataPartitioner
from . import common

__all__ = ["main", "parse_size"]

GIB = 1024 * common.MIB
DEFAULT_RANKS = (1, 2)
DEFAULT_SIZE = GIB
DEFAULT_REPETITIONS = 5
QUICK = {"size": 16 * common.MIB, "repetitions": 2}
REPLICATED_BYTES = common.MIB
BACKENDS = ("sharded", "mpio")
SUMMARY_RANKS = (1, 2)  # the rank counts the summary compares with raw h5py at
DTYPE = np.float32


# -- arguments ------------------------------------------------------------------------------

def parse_size(text):
    """``"1G"``, ``"256MiB"``, ``"64m"``, ``"4096"`` as a number of bytes."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*", str(text), re.IGNORECASE)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size such as 1G, 256M or 4096")
    scale = 1024 ** " kmgt".index(match.group(2).lower() or " ")
    size = int(float(match.group(1)) * scale)
    if size < 4 * common.MIB:
        raise argparse.ArgumentTypeError(f"{text!r}: the state should be at least 4 MiB")
    return size


def _backend_list(text):
    values = [part.strip() for part in text.split(",") if part.strip()]
    if not values or any(value not in BACKENDS for value in values):
        raise argparse.ArgumentTypeError(f"{text!r} should be a comma list of {BACKENDS}")
    return values


def _build_parser():
    parser = common.benchmark_parser(
        "checkpoint",
        "Checkpoint save and restore throughput (hpcdist.checkpoint, sharded and mpio "
        "backends) against one raw h5py writer of the same bytes, at each rank count. "
        "Outside mpiexec it launches one job per rank count.",
        quick="short run for tests: 16 MiB of state, 2 repetitions")
    parser.add_argument("--size", type=parse_size,
                        help="bytes of state, e.g. 1G or 256M (default 1G; 16M with --quick)")
    parser.add_argument("--repetitions", type=int,
                        help=f"timed rounds (default {DEFAULT_REPETITIONS}; "
                             f"{QUICK['repetitions']} with --quick)")
    parser.add_argument("--backends", type=_backend_list, default=list(BACKENDS),
                        help="hpcdist backends to time (default sharded,mpio; mpio is left "
                             "out where h5py is not parallel)")
    parser.add_argument("--dir", type=Path,
                        help="where the checkpoints are written (a fresh directory is made "
                             "in it and removed afterwards; default: the system's temporary "
                             "directory). Use the file system you checkpoint to.")
    common.add_job_options(parser, default_ranks=DEFAULT_RANKS)
    return parser


def _parse_args(argv):
    parser = _build_parser()
    args = parser.parse_args(argv)
    if args.size is None:
        args.size = QUICK["size"] if args.quick else DEFAULT_SIZE
    if args.repetitions is None:
        args.repetitions = QUICK["repetitions"] if args.quick else DEFAULT_REPETITIONS
    elif args.repetitions < 1:
        parser.error(f"--repetitions={args.repetitions} should be >= 1")
    return args


# -- the state and the cases ------------------------------------------------------------------

def _layout(size):
    """``{path: global element count}`` of the Sharded float32 entries."""
    items = size // np.dtype(DTYPE).itemsize
    replicated = REPLICATED_BYTES // np.dtype(DTYPE).itemsize
    half, quarter = items // 2, items // 4
    return {"params": half, "moments/m": quarter,
            "moments/v": items - half - quarter - replicated}


def _values(path, start, stop):
    """Elements ``start:stop`` of the global array ``path`` (cheap, deterministic)."""
    seed = sum(path.encode())
    return (np.arange(start, stop, dtype=np.int64) % 1_000_003 + seed).astype(DTYPE)


def _make_state(ctx, size):
    entries = {}
    for path, count in _layout(size).items():
        start, stop = DataPartitioner(count, ctx.size).get_partition(ctx.rank)
        entries[path] = Sharded(_values(path, start, stop))
    head = _values("head", 0, REPLICATED_BYTES // np.dtype(DTYPE).itemsize)
    return {"params": entries["params"],
            "moments": {"m": entries["moments/m"], "v": entries["moments/v"]},
            "head": head, "step": 0, "lr": 0.01, "name": "bench"}


def _global_arrays(size):
    """What the baseline writes: the same global arrays (rank 0 only)."""
    arrays = {path: _values(path, 0, count) for path, count in _layout(size).items()}
    arrays["head"] = _values("head", 0, REPLICATED_BYTES // np.dtype(DTYPE).itemsize)
    return arrays


def _raw_save(path, arrays, fsync):
    with h5py.File(path, "w") as h5file:
        for name, array in arrays.items():
            h5file.create_dataset(name, data=array)
    if fsync:
        fsync_file(path)


def _raw_restore(path):
    with h5py.File(path, "r") as h5file:
        return {name: h5file[name][...] for name in ("params", "moments/m", "moments/v", "head")}


class _Cases:
    """Every case of this job as name -> callable; the calls run on every rank."""

    def __init__(self, ctx, args, directory, backends):
        self.ctx, self.state = ctx, _make_state(ctx, args.size)
        self.arrays = _global_arrays(args.size) if ctx.rank == 0 else None
        self.directory = directory
        self.raw_path = None  # the baseline's newest file (each save writes a new one)
        self.raw_count = 0
        self.managers = {backend: CheckpointManager(os.path.join(directory, backend),
                                                    backend=backend, max_to_keep=1, ctx=ctx)
                         for backend in backends}
        self.step = 0
        self.calls = {"h5py save": lambda: self._raw(fsync=False),
                      "h5py+fsync save": lambda: self._raw(fsync=True)}
        #: untimed work after a case, so that the next case finds a quiet disk: the
        #: baseline's dirty pages are written out and its previous file is deleted; hpcdist's
        #: previous step, which it deletes in a background thread, is gone
        self.after = {"h5py save": self._settle_raw, "h5py+fsync save": self._settle_raw}
        for backend in backends:
            self.calls[f"hpcdist {backend} save"] = lambda b=backend: self._save(b)
            self.after[f"hpcdist {backend} save"] = wait_for_deletions
        self.calls["h5py restore"] = self._raw_restore
        for backend in backends:
            self.calls[f"hpcdist {backend} restore"] = lambda b=backend: self._restore(b)

    def _raw(self, fsync):
        if self.ctx.rank == 0:
            self.raw_count += 1
            _raw_save(os.path.join(self.directory, f"raw-{self.raw_count}.h5"), self.arrays,
                      fsync)

    def _settle_raw(self):
        if self.ctx.rank == 0:
            path = os.path.join(self.directory, f"raw-{self.raw_count}.h5")
            fsync_file(path)
            if self.raw_path is not None:
                os.remove(self.raw_path)
            self.raw_path = path

    def _raw_restore(self):
        if self.ctx.rank == 0:
            _raw_restore(self.raw_path)

    def _save(self, backend):
        self.step += 1
        self.state["step"] = self.step
        self.managers[backend].save(self.step, self.state)

    def _restore(self, backend):
        return self.managers[backend].restore()

    def check(self):
        """Compare each backend's restored state with the saved one (untimed, once)."""
        for backend in self.managers:
            restored = self._restore(backend)
            saved = self.state
            same = (np.array_equal(restored["params"], saved["params"].array)
                    and np.array_equal(restored["moments"]["v"], saved["moments"]["v"].array)
                    and np.array_equal(restored["head"], saved["head"])
                    and restored["name"] == "bench")
            if not same:
                raise CheckpointCorruptError(f"hpcdist bench checkpoint: the {backend} backend "
                                             "restored a state that differs from the one it "
                                             "saved")


def _time_case(ctrl, call, after=None):
    ctrl.Barrier()
    start = time.perf_counter()
    call()
    elapsed = time.perf_counter() - start
    if after is not None:
        after()
    os.sync()  # nothing of this case is left for the disk to do during the next one
    return ctrl.allreduce(elapsed, op=MPI.MAX)


def _measure(ctrl, cases, repetitions):
    names = list(cases.calls)
    for name in names:  # warm-up: files exist, caches are hot
        _time_case(ctrl, cases.calls[name], cases.after.get(name))
    cases.check()
    seconds = {name: [] for name in names}
    for rep in range(repetitions):
        first = rep % len(names)
        for name in names[first:] + names[:first]:
            seconds[name].append(_time_case(ctrl, cases.calls[name], cases.after.get(name)))
    return seconds


def _run_record(ctx, args, seconds, backends, extra):
    records = {}
    for name, times in seconds.items():
        median = float(np.median(times))
        records[name] = {"operation": name.rsplit(" ", 1)[1], "median_seconds": median,
                         "gib_per_second": args.size / GIB / median,
                         "min_seconds": float(min(times)), "seconds": times}
    run = {"ranks": ctx.size, "state_bytes": args.size, "repetitions": args.repetitions,
           "backends": backends, **extra, "cases": records}
    ratios = {}
    for backend in backends:
        for baseline in ("h5py", "h5py+fsync"):
            ratios[f"hpcdist {backend} save / {baseline} save"] = (
                records[f"hpcdist {backend} save"]["gib_per_second"]
                / records[f"{baseline} save"]["gib_per_second"])
        ratios[f"hpcdist {backend} restore / h5py restore"] = (
            records[f"hpcdist {backend} restore"]["gib_per_second"]
            / records["h5py restore"]["gib_per_second"])
        ratios[f"hpcdist {backend} save / h5py save, paired"] = float(np.median(
            np.divide(seconds["h5py save"], seconds[f"hpcdist {backend} save"])))
        for baseline in ("h5py", "h5py+fsync"):  # fastest repetitions: less sensitive to load
            ratios[f"hpcdist {backend} save / {baseline} save, best"] = (
                records[f"{baseline} save"]["min_seconds"]
                / records[f"hpcdist {backend} save"]["min_seconds"])
    run["ratios"] = ratios
    return run


def _measure_job(args):
    """Measure at this job's rank count; returns the record on rank 0, else None."""
    ctx = init()
    ctx.check = False
    ctrl = ctx.comm.Dup()
    parallel = h5py_is_parallel()
    backends = [b for b in args.backends if b != "mpio" or parallel]
    left_out = [b for b in args.backends if b not in backends]
    directory = None
    if ctx.rank == 0:
        base = str(args.dir) if args.dir is not None else None
        if base is not None:
            os.makedirs(base, exist_ok=True)
        directory = tempfile.mkdtemp(prefix="hpcdist-bench-checkpoint-", dir=base)
    directory = ctrl.bcast(directory, root=0)
    load_before = common.load_average()
    try:
        cases = _Cases(ctx, args, directory, backends)
        seconds = _measure(ctrl, cases, args.repetitions)
        extra = {"directory": directory, "h5py_parallel": parallel,
                 "left_out": {b: "h5py is not parallel (h5py.get_config().mpi is False)"
                              for b in left_out},
                 "machine": common.machine_info(ctrl, h5py=_h5py_version(),
                                                load_average_before=load_before,
                                                load_average_after=common.load_average())}
        run = _run_record(ctx, args, seconds, backends, extra)
    finally:
        ctrl.Barrier()
        if ctx.rank == 0:
            shutil.rmtree(directory, ignore_errors=True)
        ctrl.Free()
    return run if ctx.rank == 0 else None


def _h5py_version():
    return f"{h5py.__version__} (HDF5 {h5py.version.hdf5_version}, mpi={h5py.get_config().mpi})"


# -- launching one job per rank count -----------------------------------------------------------

# -- report -----------------------------------------------------------------------------------

def _size_text(size):
    return f"{size / GIB:g} GiB" if size >= GIB else f"{size / common.MIB:g} MiB"


def _run_text(run):
    lines = [f"\n{run['ranks']} rank(s): {_size_text(run['state_bytes'])} of state, "
             f"{run['repetitions']} repetitions, backends {', '.join(run['backends'])}"
             + "".join(f"; {b} left out: {why}" for b, why in run["left_out"].items()),
             f"  {'case':26s} {'median s':>9s} {'GiB/s':>8s} {'vs h5py':>8s} {'min s':>8s} "
             f"{'vs h5py':>8s}"]
    cases = run["cases"]
    for name, record in cases.items():
        baseline = cases[f"h5py {record['operation']}"]
        lines.append(f"  {name:26s} {record['median_seconds']:9.3f} "
                     f"{record['gib_per_second']:8.2f} "
                     f"{record['gib_per_second'] / baseline['gib_per_second']:8.2f} "
                     f"{record['min_seconds']:8.3f} "
                     f"{baseline['min_seconds'] / record['min_seconds']:8.2f}")
    return "\n".join(lines)


def _summarize(runs, args):
    summary = {}
    for n in SUMMARY_RANKS:
        for backend in BACKENDS:
            if backend not in args.backends:
                continue
            ratio = (runs.get(n, {}).get("ratios", {})
                     .get(f"hpcdist {backend} save / h5py save"))
            summary[f"save_{backend}_vs_h5py_at_{n}_ranks"] = common.summary_entry(
                f"hpcdist {backend} save GiB/s / raw h5py save GiB/s", ratio)
    return summary


def _summary_text(summary):
    return "\n".join(common.summary_lines(summary))


def _settings(args):
    return {"state_bytes": args.size, "rank_counts": list(args.ranks),
            "repetitions": args.repetitions, "backends": list(args.backends),
            "quick": args.quick, "dtype": np.dtype(DTYPE).name,
            "state": "params Sharded(size/2), moments/m Sharded(size/4), moments/v "
                     "Sharded(size/4 - 1 MiB), head 1 MiB replicated, 3 scalars",
            "baseline": "rank 0 writes the same global arrays with h5py create_dataset(data=) "
                        "and closes the file (h5py+fsync: then fsyncs it)",
            "timing": "one mpiexec job per rank count; a warm-up round, then rounds running "
                      "every case once (first case rotating); a case's time is the slowest "
                      "rank's; medians over rounds"}


def _plot(report, path):
    """GiB/s per case and rank count; False without matplotlib."""
    plt = common.pyplot()
    if plt is None:
        return False
    runs = report["runs"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, operation in zip(axes, ("save", "restore")):
        names = [name for name in next(iter(runs.values()))["cases"]
                 if name.endswith(" " + operation)]
        width = 0.8 / max(len(names), 1)
        for index, name in enumerate(names):
            values = [run["cases"].get(name, {}).get("gib_per_second", 0)
                      for run in runs.values()]
            ax.bar(np.arange(len(runs)) + (index - (len(names) - 1) / 2) * width, values,
                   width=width, label=name)
        ax.set_xticks(range(len(runs)), [f"{n} rank(s)" for n in runs])
        ax.set_ylabel("GiB/s (median)")
        ax.set_title(operation)
        ax.legend(fontsize="small")
    machine = report["machine"]
    fig.suptitle(f"hpcdist checkpoint, {_size_text(report['settings']['state_bytes'])} of "
                 f"state: {machine['hostname']} ({machine['cpu_count']} cores), "
                 f"{machine['date']}", fontsize="medium")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _write_report(runs, args):
    summary = _summarize(runs, args)
    common.finish_report("checkpoint", runs, args, settings=_settings(args), summary=summary,
                         text=_summary_text(summary), plot=_plot)


# -- main -------------------------------------------------------------------------------------

def main(argv=None):
    """Run the checkpoint benchmark with ``argv`` (default ``sys.argv[1:]``, see ``--help``);
    returns the exit status. See the module docstring."""
    return common.run_per_rank_count(argv, _parse_args, module="hpcdist.bench.checkpoint",
                                     title="hpcdist checkpoint benchmark", measure_job=_measure_job,
                                     describe=lambda run, runs: _run_text(run), write=_write_report)


if __name__ == "__main__":
    sys.exit(main())
