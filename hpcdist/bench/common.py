"""Helpers shared by the benchmarks: sizes, versions, machine description, timing."""

import datetime
import os
import platform
import socket
import statistics
import time

import numpy as np

__all__ = ["KIB", "MIB", "format_size", "package_version", "load_average", "machine_info",
           "median_seconds"]

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
