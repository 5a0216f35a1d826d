"""``hpcdist info``: versions, MPI library, CUDA-awareness, threading and rank layout."""

import importlib
import importlib.util
import json
import os
import platform
import socket
import sys

import h5py
import numba

from .._version import __version__
from ..comm import init
from ..comm.faults import fault_tolerance_status
from ..comm.mpi import MPI, library_name
from ..comm.threads import available_cores

__all__ = ["collect_info", "rank_layout", "run_info"]


def _version(module_name):
    try:
        return importlib.import_module(module_name).__version__
    except Exception:
        return None


def _numba_info():
    layer = None
    try:
        @numba.njit(parallel=True, cache=False)
        def probe(n):
            total = 0
            for i in numba.prange(n):
                total += i
            return total
        probe(4)
        layer = numba.threading_layer()
    except Exception as error:  # report, never fail the command
        layer = f"unavailable ({error.__class__.__name__})"
    return {"version": numba.__version__, "threading_layer": layer,
            "num_threads": numba.get_num_threads()}


def _h5py_info():
    return {"version": h5py.__version__, "hdf5": h5py.version.hdf5_version,
            "parallel": bool(h5py.get_config().mpi)}


def _cupy_info():
    if importlib.util.find_spec("cupy") is None:
        return {"version": None, "gpus": []}
    try:
        import cupy
        count = cupy.cuda.runtime.getDeviceCount()
        names = [cupy.cuda.runtime.getDeviceProperties(i)["name"].decode() for i in range(count)]
        return {"version": cupy.__version__, "gpus": names}
    except Exception as error:
        return {"version": _version("cupy"), "gpus": [], "error": str(error)}


def _fault_tolerance_line():
    available, reason = fault_tolerance_status()
    return "available (ULFM)" if available else f"not available: {reason}"


def collect_info(ctx):
    """Everything ``hpcdist info`` reports about this installation, as a dict."""
    thread_levels = {MPI.THREAD_SINGLE: "single", MPI.THREAD_FUNNELED: "funneled",
                     MPI.THREAD_SERIALIZED: "serialized", MPI.THREAD_MULTIPLE: "multiple"}
    return {
        "hpcdist": __version__,
        "python": f"{platform.python_version()} ({sys.executable})",
        "numpy": _version("numpy"),
        "mpi4py": _version("mpi4py"),
        "mpi_library": library_name(),
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi_thread_level": thread_levels.get(MPI.Query_thread(), "unknown"),
        "cuda_aware_mpi": ctx.cuda_aware,
        "fault_tolerance": _fault_tolerance_line(),
        "numba": _numba_info(),
        "h5py": _h5py_info(),
        "cupy": _cupy_info(),
        "world_size": ctx.size,
        "nodes": ctx.num_nodes,
        "cores_per_rank": available_cores(),
    }


def rank_layout(ctx):
    """One row per rank: rank, host, node, local rank, device, pid (gathered on rank 0)."""
    row = {"rank": ctx.rank, "host": socket.gethostname(), "node": ctx.node_rank,
           "local_rank": ctx.local_rank, "local_size": ctx.local_size, "device": ctx.device,
           "pid": os.getpid(), "cores": available_cores(),
           "omp_threads": os.environ.get("OMP_NUM_THREADS", "")}
    return ctx.gather_object(row)


def _print_table(info, layout):
    flat = {}
    for key, value in info.items():
        if isinstance(value, dict):
            for sub, subvalue in value.items():
                flat[f"{key} {sub}" if sub != "version" else key] = subvalue
        else:
            flat[key] = value
    width = max(len(key) for key in flat)
    for key, value in flat.items():
        if isinstance(value, list):
            value = ", ".join(value) if value else "none"
        print(f"{key:<{width}}  {'not installed' if value is None else value}")
    print()
    columns = ["rank", "host", "node", "local_rank", "local_size", "device", "pid", "cores",
               "omp_threads"]
    widths = [max(len(c), *(len(str(row[c])) for row in layout)) for c in columns]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)))
    for row in layout:
        print("  ".join(str(row[c]).ljust(w) for c, w in zip(columns, widths)))


def run_info(args):
    """Print the report on rank 0 (all ranks take part in gathering the layout)."""
    ctx = init()
    info = collect_info(ctx)
    layout = rank_layout(ctx)
    if ctx.is_main:
        if args.json:
            print(json.dumps({"info": info, "layout": layout}, indent=2))
        else:
            _print_table(info, layout)
    return 0
