"""``hpcdist train {mlp,kmeans,forest}``: train an estimator on built-in or HDF5 data.

The command line and what it promises are in :mod:`hpcdist.cli.train_options`;
this module loads the data, fits the estimator and reports the global metrics.
"""

import json
import sys
import time

import numpy as np
from sklearn import cluster, ensemble, neural_network

from ..checkpoint import CheckpointManager
from ..comm import allgather, allreduce, gather, init
from ..comm.checks import mark_raised_on_every_rank, raised_on_every_rank
from ..comm.mpi import MPI
from ..data import load_digits, load_hdf5, make_blobs, make_classification
from ..exceptions import HpcdistError, InvalidArgumentError
from ..ml import KMeans, MLPClassifier, MLPRegressor, RandomForestClassifier, RandomForestRegressor
from .train_options import classification_shape
from .train_resilient import fit_surviving_lost_ranks

__all__ = ["FACTORIES", "run_train"]

_HELD_OUT_EVERY = 5  # global rows with index % 5 == 4 are the test set


def _is_classification(args, y, ctx):
    """``--task``, where ``auto`` means: integer labels, or floats that are whole
    numbers on every rank."""
    if args.task != "auto":
        return args.task == "classification"
    if y is None or y.dtype.kind in "iub":
        return y is not None
    return bool(allreduce(int(np.all(y == np.round(y))), op="min", ctx=ctx))


def _make_mlp(args, y, ctx):
    cls = MLPClassifier if _is_classification(args, y, ctx) else MLPRegressor
    return cls(args.hidden_layer_sizes, activation=args.activation, solver=args.solver,
               learning_rate_init=args.learning_rate_init, batch_size=args.batch_size,
               max_iter=args.max_iter, random_state=args.random_state, comm=ctx,
               verbose=int(not args.quiet))


def _make_kmeans(args, y, ctx):
    return KMeans(args.n_clusters, init=args.init, n_init=args.n_init, max_iter=args.max_iter,
                  tol=args.tol, random_state=args.random_state, comm=ctx,
                  verbose=int(not args.quiet))


def _make_forest(args, y, ctx):
    cls = RandomForestClassifier if _is_classification(args, y, ctx) else RandomForestRegressor
    return cls(args.n_estimators, max_depth=args.max_depth, max_features=args.max_features,
               min_samples_leaf=args.min_samples_leaf, max_bins=args.max_bins,
               random_state=args.random_state, comm=ctx, verbose=int(not args.quiet))


def _sklearn_twin(name, estimator):
    """The scikit-learn estimator that does the same job, for ``--compare-sklearn``."""
    params = estimator.get_params()
    if name == "kmeans":
        return cluster.KMeans(params["n_clusters"], init="k-means++" if params["init"] ==
                              "k-means||" else params["init"], n_init=params["n_init"],
                              max_iter=params["max_iter"], tol=params["tol"],
                              random_state=params["random_state"])
    if name == "forest":
        cls = (ensemble.RandomForestClassifier if hasattr(estimator, "predict_proba")
               else ensemble.RandomForestRegressor)
        return cls(params["n_estimators"], max_depth=params["max_depth"],
                   max_features=params["max_features"],
                   min_samples_leaf=params["min_samples_leaf"],
                   random_state=params["random_state"], n_jobs=-1)
    cls = (neural_network.MLPClassifier if hasattr(estimator, "predict_proba")
           else neural_network.MLPRegressor)
    return cls(hidden_layer_sizes=params["hidden_layer_sizes"], activation=params["activation"],
               solver=params["solver"], learning_rate_init=params["learning_rate_init"],
               batch_size=params["batch_size"], max_iter=params["max_iter"],
               random_state=params["random_state"])


#: model name -> factory(args, y_local, ctx) of its estimator
FACTORIES = {"mlp": _make_mlp, "kmeans": _make_kmeans, "forest": _make_forest}


# -- data ------------------------------------------------------------------------------

def _held_out_split(X, y, ctx):
    """Every fifth global row is test data; returns (X, y, X_test, y_test)."""
    counts = allgather(np.array([len(X)]), ctx=ctx)  # every rank's row count
    offset = int(counts[:ctx.rank].sum())
    test = (offset + np.arange(len(X))) % _HELD_OUT_EVERY == _HELD_OUT_EVERY - 1
    y_test = None if y is None else y[test]
    y_train = None if y is None else y[~test]
    return X[~test], y_train, X[test], y_test


def _check_targets(args, X, y, ctx):
    """``--y``: numbers, one per row of ``--x`` (the same verdict on every rank)."""
    if y.dtype.kind not in "biuf":  # the file's dtype: the same on every rank
        raise mark_raised_on_every_rank(InvalidArgumentError(
            f"--y {args.y}: the targets in {args.data} have dtype {y.dtype}, not numbers; "
            "store class labels as integers 0..k-1"))
    rows, targets = allreduce(np.array([len(X), len(y)]), ctx=ctx)
    if rows != targets:
        raise mark_raised_on_every_rank(InvalidArgumentError(
            f"--y {args.y} has {targets} row(s) but --x {args.x} has {rows} in {args.data}; "
            "pass datasets with one target per row"))


def load_data(args, ctx):
    """This rank's train and test rows as ``(X, y, X_test, y_test)``."""
    if args.data:
        X = load_hdf5(args.data, args.x, ctx=ctx)
        y = load_hdf5(args.data, args.y, ctx=ctx) if args.y else None
        if y is not None:
            _check_targets(args, X, y, ctx)
        return _held_out_split(X, y, ctx)
    if args.dataset == "digits":
        X, y = load_digits(ctx, split="train", random_state=args.random_state)
        X_test, y_test = load_digits(ctx, split="test", random_state=args.random_state)
        return X, y, X_test, y_test
    if args.dataset == "blobs":
        X, y = make_blobs(args.n_samples, args.n_features, args.n_classes,
                          random_state=args.random_state, ctx=ctx)
    else:
        n_informative, n_redundant = classification_shape(args.n_features, args.n_classes)
        X, y = make_classification(args.n_samples, args.n_features, args.n_classes,
                                   n_informative=n_informative, n_redundant=n_redundant,
                                   random_state=args.random_state, ctx=ctx)
    return _held_out_split(X, y, ctx)


# -- running ---------------------------------------------------------------------------

def _metrics(name, estimator, X, y, X_test, y_test):
    if name == "kmeans":
        return {"inertia": float(estimator.inertia_), "n_iter": int(estimator.n_iter_),
                "test_inertia": float(-estimator.score(X_test))}
    metric = "accuracy" if hasattr(estimator, "predict_proba") else "r2"
    result = {f"train_{metric}": float(estimator.score(X, y)),
              f"test_{metric}": float(estimator.score(X_test, y_test))}
    if hasattr(estimator, "n_iter_"):
        result["epochs"] = int(estimator.n_iter_)
    return result


def _sklearn_metrics(name, estimator, X, y, X_test, y_test, ctx):
    """Fit scikit-learn on the gathered rows on rank 0; None elsewhere."""
    parts = [gather(a, ctx=ctx) if a is not None else None for a in (X, y, X_test, y_test)]
    if ctx.rank != 0:
        return None
    X_all, y_all, X_test_all, y_test_all = parts
    twin = _sklearn_twin(name, estimator)
    start = time.perf_counter()
    twin.fit(X_all, y_all) if y_all is not None else twin.fit(X_all)
    seconds = time.perf_counter() - start
    if name == "kmeans":
        return {"seconds": seconds, "inertia": float(twin.inertia_),
                "test_inertia": float(-twin.score(X_test_all))}
    metric = "accuracy" if hasattr(twin, "predict_proba") else "r2"
    return {"seconds": seconds, f"train_{metric}": float(twin.score(X_all, y_all)),
            f"test_{metric}": float(twin.score(X_test_all, y_test_all))}


def _table(rows):
    width = max(len(key) for key, _ in rows)
    return "\n".join(f"  {key:<{width}}  {value}" for key, value in rows)


def _format(value):
    return f"{value:.4f}" if isinstance(value, float) else str(value)


def _init(args):
    """The default context, with ``--fault-tolerant``'s mode; None after printing why
    fault tolerance is not available (on every rank, so every rank exits 2)."""
    if not args.fault_tolerant:
        return init()
    try:
        return init(fault_tolerance=args.fault_tolerant)
    except InvalidArgumentError as error:
        if MPI.COMM_WORLD.Get_rank() == 0:
            print(f"hpcdist train {args.model}: --fault-tolerant {args.fault_tolerant}: {error}",
                  file=sys.stderr, flush=True)
        return None


def run_train(args):
    """Train, print the global metrics on rank 0, return the exit code."""
    ctx = _init(args)
    if ctx is None:
        return 2
    name = args.model
    try:
        return _train_and_report(args, ctx)
    except Exception as error:
        # an hpcdist error in a one-rank job is raised on every rank too
        alone = ctx.size == 1 and isinstance(error, HpcdistError)
        if not (alone or raised_on_every_rank(error)):
            raise  # a bug, or a failure on some ranks only: the traceback, and the job aborts
        # a user mistake that every rank raised (bad data, hyper-parameters, settings that
        # differ): one line from rank 0, exit status 2 everywhere, no traceback
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        if ctx.rank == 0:
            print(f"hpcdist train {name}: {message}", file=sys.stderr, flush=True)
        return 2


def _check_batch_size(args, X, ctx):
    """An MLP's ``--batch-size`` fits in the training rows of all ranks together."""
    rows = int(allreduce(len(X), ctx=ctx))
    if args.batch_size > rows:
        raise mark_raised_on_every_rank(InvalidArgumentError(
            f"--batch-size {args.batch_size} is more than the {rows} training row(s) of all "
            "ranks; lower --batch-size" + ("" if args.data else " or raise --n-samples")))


def _fit_and_measure(args, ctx, checkpoint, start=None):
    """Load this rank's rows, build the estimator, fit it (saving progress to
    ``checkpoint`` when given) and measure it: the report, the same on every rank.

    ``seconds`` in it counts from ``start`` (a ``time.perf_counter()``) when
    given, else the fit alone."""
    name = args.model
    X, y, X_test, y_test = load_data(args, ctx)
    if name == "mlp":
        _check_batch_size(args, X, ctx)
    estimator = FACTORIES[name](args, y, ctx)
    if start is None:
        start = time.perf_counter()
    if checkpoint is not None:
        estimator.fit(X, y, checkpoint=checkpoint, checkpoint_every=args.checkpoint_every)
    else:
        estimator.fit(X, y)
    seconds = allreduce(time.perf_counter() - start, op="max", ctx=ctx)
    report = {"model": name, "estimator": type(estimator).__name__, "ranks": ctx.size,
              "rows": int(allreduce(len(X), ctx=ctx)),
              "test_rows": int(allreduce(len(X_test), ctx=ctx)),
              "features": int(X.shape[1]), "seconds": seconds,
              **_metrics(name, estimator, X, y, X_test, y_test)}
    if args.compare_sklearn:
        report["sklearn"] = _sklearn_metrics(name, estimator, X, y, X_test, y_test, ctx)
    return report


def _train_and_report(args, ctx):
    name = args.model
    if ctx.fault_tolerance is not None and args.checkpoint_dir:  # the mode from the environment
        raise mark_raised_on_every_rank(InvalidArgumentError(
            f"--checkpoint-dir {args.checkpoint_dir}: fault tolerance is on (HPCDIST_FAULT_"
            f"TOLERANCE={ctx.fault_tolerance}, as hpcdist run --fault-tolerant sets it), which "
            "keeps the progress in memory; leave --checkpoint-dir out, or run without fault "
            "tolerance"))
    if ctx.fault_tolerance is not None:  # --fault-tolerant, or hpcdist run --fault-tolerant
        # seconds from the start: recoveries and the reloading of rows included
        start = time.perf_counter()
        report, lost = fit_surviving_lost_ranks(
            lambda progress: _fit_and_measure(args, ctx, progress, start), ctx)
        report["ranks_lost"] = lost
    else:
        checkpoint = None
        if args.checkpoint_dir:
            checkpoint = CheckpointManager(args.checkpoint_dir, ctx=ctx)
        report = _fit_and_measure(args, ctx, checkpoint)
    if ctx.rank == 0:
        rows = [(key, _format(value)) for key, value in report.items() if key != "sklearn"]
        rows += [(f"sklearn {key}", _format(value))
                 for key, value in (report.get("sklearn") or {}).items()]
        print(f"hpcdist train {name}: results (global over {ctx.size} ranks)")
        print(_table(rows), flush=True)
        if args.output:
            with open(args.output, "w") as handle:
                json.dump(report, handle, indent=2)
    return 0
