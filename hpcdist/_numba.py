"""Numba compilation flags for every kernel of hpcdist (one place: hpcdist.kernels and
the 16-bit float kernels of hpcdist.comm.sixteen_bit_floats), and where and how
compiled kernels are cached.

``fastmath`` deliberately leaves out ``nnan`` and ``ninf`` so that NaN and
infinity propagate through the kernels instead of being optimised away.
Cached kernels take no compiled functions as arguments: Numba would key their
cache by the function object, new in every process (see
:func:`hpcdist.comm.sixteen_bit_floats.half_format`).

The cache
    Kernels are compiled on first use and kept in Numba's on-disk cache. When
    ``NUMBA_CACHE_DIR`` is set, that folder is used; otherwise hpcdist points
    Numba at a persistent per-user folder, :func:`default_cache_dir`
    (``$XDG_CACHE_HOME/hpcdist/numba`` or ``~/.cache/hpcdist/numba``), which works
    the same for a read-only installation (a container image, a site module),
    for every job of a user and for ``hpcdist compile``, which fills it ahead
    of time. Processes that share the cache (the ranks of a node, concurrent
    jobs) do not compile the same kernel at once: the first one compiles it
    while the others wait on a lock file beside the kernel's cache index, then
    load what it saved. An entry is written to a temporary file and renamed
    into place (Numba's own), and the index is updated under the same lock
    after the entry it names is complete, so no process reads a partial entry
    or an index naming another signature's code.
"""
import contextlib
import fcntl
import functools
import itertools
import os
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

# GNU OpenMP workers (Numba's "omp" threading layer) spin after a parallel
# region by default. Next to NumPy's OpenBLAS, whose idle threads spin too,
# each side then waits for the other's threads to be descheduled, and a short
# parallel kernel on a machine with few cores takes many times its own work.
# Passive waiting avoids it. Set before Numba loads libgomp (at the
# first parallel launch); a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import numba  # noqa: E402
from numba.core import caching as _caching  # noqa: E402
from numba.core import dispatcher as _dispatcher  # noqa: E402
from numba.core.compiler_lock import global_compiler_lock  # noqa: E402

__all__ = ["JIT", "JIT_PARALLEL", "njit", "prange", "num_threads", "in_threads",
           "default_cache_dir", "cache_dir"]

_FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}

#: Serial leaf kernels.
JIT = dict(nogil=True, fastmath=_FASTMATH, cache=True)
#: Memory-bound kernels over whole arrays, where threads pay.
JIT_PARALLEL = dict(JIT, parallel=True)

njit = numba.njit
prange = numba.prange


def num_threads():
    """Number of threads Numba's parallel kernels use right now."""
    return numba.get_num_threads()


def in_threads(kernel, n_items, *args):
    """Run ``kernel(*args, first, stop)`` over ``0:n_items`` in contiguous equal parts, one
    per Numba thread (:func:`num_threads`), as a ``prange`` loop splits its range.

    ``kernel`` must release the GIL (``nogil``). A serial kernel run this way is
    compiled once, as an ordinary function; a ``prange`` loop's body is
    compiled a second time as the parallel region's function, with the
    parallel runtime's launch code around it.
    """
    workers = max(1, min(num_threads(), n_items))
    if workers == 1:
        kernel(*args, 0, n_items)
        return
    bounds = [n_items * w // workers for w in range(workers + 1)]
    with ThreadPoolExecutor(workers) as pool:
        for done in [pool.submit(kernel, *args, bounds[w], bounds[w + 1])
                     for w in range(workers)]:
            done.result()


def default_cache_dir():
    """The per-user folder of compiled kernels used when ``NUMBA_CACHE_DIR`` is not set:
    ``$XDG_CACHE_HOME/hpcdist/numba``, or ``~/.cache/hpcdist/numba``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "hpcdist", "numba")


def cache_dir():
    """The folder Numba caches hpcdist's kernels in (``None``: Numba's own choice, the
    ``__pycache__`` folders of the installation)."""
    return numba.config.CACHE_DIR or None


def _writable_folder(path):
    """Whether ``path`` exists or can be created, and a file can be written in it."""
    try:
        os.makedirs(path, exist_ok=True)
        tempfile.TemporaryFile(dir=path).close()
    except OSError:
        return False
    return True


def _choose_cache_dir():
    """Use ``NUMBA_CACHE_DIR`` when set, else :func:`default_cache_dir` where it is
    writable; exported so that processes this one starts use the same folder."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return
    folder = default_cache_dir()
    if _writable_folder(folder):
        os.environ["NUMBA_CACHE_DIR"] = folder
        numba.config.CACHE_DIR = folder  # Numba read the environment when it was imported


# -- one compiler per kernel and cache folder ----------------------------------------------

_held = threading.local()  # lock files this thread holds: nested compiles do not lock twice


@contextlib.contextmanager
def _file_lock(path):
    """An exclusive ``flock`` on ``path`` (created if missing) for the block; nothing
    where the file cannot be opened (a read-only cache: Numba does not save there)."""
    held = _held.__dict__.setdefault("paths", set())
    if path in held:
        yield
        return
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError:
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # a file system without flock
            pass
        held.add(path)
        try:
            yield
        finally:
            held.discard(path)
    finally:
        os.close(fd)  # releases the lock


def _lock_path(index_path):
    return index_path + ".lock"


def _cache_lock_of(dispatcher):
    """The lock file of a cached dispatcher's index (``None`` when it is not cached)."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    index_path = getattr(cache_file, "_index_path", None)
    return None if index_path is None else _lock_path(index_path)


def _locked_compile(compile_):
    @functools.wraps(compile_)
    def compile(self, sig):
        path = _cache_lock_of(self)
        if path is None:
            return compile_(self, sig)
        # Numba's process-wide lock first: threads of one process never wait on each
        # other's file locks, only processes do (in call-graph order: no cycle)
        with global_compiler_lock, _file_lock(path):  # another process compiling it:
            return compile_(self, sig)                 # wait, then load what it saved
    return compile


def _locked_save(self, key, data):
    """Numba's ``IndexDataCacheFile.save`` under the index's lock, the entry written before
    the index names it (two processes saving two signatures at once each keep their own)."""
    with _file_lock(_lock_path(self._index_path)):
        overloads = self._load_index()
        data_name = overloads.get(key)
        if data_name is None:
            existing = set(overloads.values())
            data_name = next(name for name in map(self._data_name, itertools.count(1))
                             if name not in existing)
        self._save_data(data_name, data)
        if overloads.get(key) != data_name:
            overloads[key] = data_name
            self._save_index(overloads)


#: the parts of Numba's cache that the locked save relies on
_CACHE_FILE_METHODS = ("_load_index", "_save_index", "_save_data", "_data_name")


def _install_cache_locks():
    """Lock compiles and index updates per cached kernel; where this Numba's cache lacks
    the methods the locked save uses, Numba's own compile and save stay as they are."""
    if not all(hasattr(_caching.IndexDataCacheFile, name) for name in _CACHE_FILE_METHODS):
        return
    dispatcher = _dispatcher.Dispatcher
    if not getattr(dispatcher.compile, "_hpcdist_locked", False):
        dispatcher.compile = _locked_compile(dispatcher.compile)
        dispatcher.compile._hpcdist_locked = True
    _caching.IndexDataCacheFile.save = _locked_save


_choose_cache_dir()
_install_cache_locks()
