"""Helpers shared by the benchmarks: sizes, versions, machine description, timing."""

import datetime
import json
import os
import platform
import socket
import statistics
import time

import numpy as np

__all__ = ["KIB", "MIB", "format_size", "package_version", "load_average", "machine_info",
           "median_seconds", "init_gloo", "pyplot", "write_report"]

KIB = 1024
MIB = 1024 * KIB
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")


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
    from mpi4py import MPI

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
        "mpi_library": " ".join(MPI.Get_library_version().splitlines()[0].split()),
        "mpi_library_version": MPI.Get_library_version().strip(),
        "mpi_standard": "%d.%d" % MPI.Get_version(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": package_version("numba"),
        "mpi4py": package_version("mpi4py"),
        "hpcdist": package_version("hpcdist"),
        "thread_env": {name: os.environ.get(name) for name in THREAD_VARIABLES},
        "load_average": load_average(),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    info.update(extra)
    return info


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


def _gloo_rendezvous(ctrl):
    """gloo's ``tcp://host:port``, picked on rank 0 and shared with every rank."""
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
    output_dir.mkdir(parents=True, exist_ok=True)
    json_path = output_dir / f"{name}.json"
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {json_path}", flush=True)
    png_path = output_dir / f"{name}.png"
    if plot is not None and plot(report, png_path):
        print(f"wrote {png_path}", flush=True)
