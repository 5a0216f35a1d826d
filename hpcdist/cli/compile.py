"""``hpcdist compile``: compile the Numba kernels of every estimator into the cache, ahead of time.

Each *task* fits one estimator on a few hundred rows of random data and
predicts and scores with it, the way ``hpcdist train`` does: every kernel, at
every signature such a run uses, is compiled and saved in Numba's cache
(:func:`hpcdist._numba.cache_dir`), so that the next run on this node loads
instead of compiling. Run plainly, the tasks are shared by a pool of processes
over the node's cores; under ``mpiexec`` or ``srun`` the ranks of each node
share them (every node fills its own cache, which may be node-local). Two
processes that reach the same kernel do not both compile it: one waits for the
other's cache entry.
"""

import concurrent.futures
import multiprocessing
import os
import sys
import time
import warnings

import numpy as np
from numba.core.registry import CPUDispatcher

from .._numba import cache_dir
from ..comm import init
from ..ml import KMeans, MLPClassifier, MLPRegressor, RandomForestClassifier, RandomForestRegressor

__all__ = ["TASKS", "run_task", "run_compile", "default_jobs"]

_ROWS = 400


def _classification(dtype, n_features=6, n_classes=3):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(_ROWS, n_features)).astype(dtype)
    y = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.5)
    return X, y % n_classes


def _regression(dtype, n_features=6):
    X, _ = _classification(dtype, n_features)
    return X, (X[:, 0] * 2.0 - X[:, 2]).astype(np.float64)


def _forest(cls, data, comm, **options):
    X, y = data
    model = cls(4, max_depth=6, random_state=0, comm=comm, **options).fit(X, y)
    model.predict(X)
    model.predict(np.asfortranarray(X))  # column-major data bins with its own signature
    model.score(X, y)
    if hasattr(model, "predict_proba"):
        model.predict_proba(X)


def _kmeans(dtype, init_name, comm):
    X, _ = _classification(dtype, n_features=5)
    model = KMeans(4, init=init_name, n_init=1, max_iter=5, random_state=0, comm=comm).fit(X)
    model.predict(X)
    model.score(X)
    model.transform(X)


def _mlp(cls, data, comm):
    X, y = data
    model = cls((16,), max_iter=2, batch_size=64, random_state=0, comm=comm).fit(X, y)
    model.predict(X)
    model.score(X, y)


#: task name -> function(comm) running it, slowest first (the pool starts them in this order).
#: Forests grow whole trees by default and level by level, then in subtrees, with a
#: ``local_threshold``; K-means' initialisations each have their kernels.
TASKS = {
    "forest-classifier": lambda comm: _forest(RandomForestClassifier,
                                              _classification(np.float64), comm),
    "forest-classifier-levels": lambda comm: _forest(RandomForestClassifier,
                                                     _classification(np.float64), comm,
                                                     local_threshold=50),
    "forest-regressor": lambda comm: _forest(RandomForestRegressor, _regression(np.float64),
                                             comm),
    "forest-regressor-levels": lambda comm: _forest(RandomForestRegressor,
                                                    _regression(np.float64), comm,
                                                    local_threshold=50),
    "forest-float32": lambda comm: _forest(RandomForestClassifier,
                                           _classification(np.float32), comm),
    "kmeans-float64": lambda comm: [_kmeans(np.float64, init_name, comm)
                                    for init_name in ("k-means++", "k-means||", "random")],
    "kmeans-float32": lambda comm: [_kmeans(np.float32, init_name, comm)
                                    for init_name in ("k-means++", "k-means||", "random")],
    "mlp": lambda comm: (_mlp(MLPClassifier, _classification(np.float64), comm),
                         _mlp(MLPRegressor, _regression(np.float64), comm)),
}


def _kernel_counts():
    """(signatures compiled, signatures loaded from the cache) by hpcdist's kernels so far
    in this process."""
    compiled = loaded = 0
    for name, module in list(sys.modules.items()):
        if not name.startswith("hpcdist.") or module is None:
            continue
        for value in list(vars(module).values()):
            if isinstance(value, CPUDispatcher) and value.py_func.__module__ == name:
                stats = value.stats
                compiled += sum(stats.cache_misses.values())
                loaded += sum(stats.cache_hits.values())
    return compiled, loaded


def run_task(name, comm=None):
    """Run task ``name`` of :data:`TASKS`; returns ``(name, seconds, compiled, loaded)``:
    the signatures it compiled and loaded from the cache (counted in this process)."""
    before = _kernel_counts()
    start = time.perf_counter()
    with warnings.catch_warnings():  # two epochs of an MLP do not converge: not news here
        warnings.simplefilter("ignore")
        TASKS[name](comm)
    seconds = time.perf_counter() - start
    after = _kernel_counts()
    return name, seconds, after[0] - before[0], after[1] - before[1]


def default_jobs():
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _in_pool(names, jobs):
    """Run ``names`` in ``jobs`` fresh processes (no MPI in them: each is a one-rank run)."""
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        return list(pool.map(run_task, names))


def _on_node_ranks(names):
    """Run ``names`` shared by the ranks of each node (collective); every rank gets all
    results, each tagged with the rank that ran it."""
    ctx = init()
    alone = ctx.split(ctx.rank)  # a task is a one-rank fit
    try:
        mine = [(ctx.rank, *run_task(name, comm=alone))
                for name in names[ctx.local_rank::ctx.local_size]]
    finally:
        alone.free()
    return ctx, ctx.gather_object(mine)


def _print_report(rows, seconds, workers):
    width = max(len(row[0]) for row in rows)
    for name, task_seconds, compiled, loaded, where in rows:
        print(f"  {name:<{width}}  {task_seconds:7.1f} s  compiled {compiled:3d}, "
              f"loaded {loaded:3d}  ({where})")
    compiled = sum(row[2] for row in rows)
    loaded = sum(row[3] for row in rows)
    print(f"hpcdist compile: {compiled} kernel signatures compiled, {loaded} loaded from the "
          f"cache, {len(rows)} tasks on {workers} in {seconds:.1f} s", flush=True)


def run_compile(args):
    """Compile every task's kernels; prints what was done on rank 0; returns the exit code."""
    names = list(TASKS) if not args.only else args.only
    start = time.perf_counter()
    folder = cache_dir() or "the installation's __pycache__ folders"
    if args.under_mpi:
        ctx, results = _on_node_ranks(names)
        if ctx.rank != 0:
            return 0
        print(f"hpcdist compile: {len(names)} tasks shared by the ranks of each node, kernels "
              f"cached in {folder}", flush=True)
        rows = [(name, s, c, lo, f"rank {rank}") for part in results
                for rank, name, s, c, lo in part]
        workers = f"{ctx.size} ranks"
    else:
        jobs = max(1, min(args.jobs or default_jobs(), len(names)))
        print(f"hpcdist compile: {len(names)} tasks in {jobs} processes, kernels cached in "
              f"{folder}", flush=True)
        rows = [(name, s, c, lo, "pool") for name, s, c, lo in _in_pool(names, jobs)]
        workers = f"{jobs} processes"
    _print_report(rows, time.perf_counter() - start, workers)
    return 0
