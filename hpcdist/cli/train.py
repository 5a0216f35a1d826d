"""``hpcdist train {mlp,kmeans,forest}``: train an estimator on built-in or HDF5 data.

Run it under ``mpiexec``/``srun`` or ``hpcdist run`` (or give ``-n N`` and it
starts itself under mpiexec). Every rank loads only its rows. One row in
five (by global row index) is held out for testing, except for ``digits``,
which has its own test split. Rank 0 prints the global metrics as a table
and writes them as JSON with ``--output``.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from sklearn import cluster, ensemble, neural_network

from ..checkpoint import CheckpointManager
from ..comm import allgather, allreduce, gather, init
from ..comm.checks import raised_on_every_rank
from ..data import load_digits, load_hdf5, make_blobs, make_classification
from ..ml import KMeans, MLPClassifier, MLPRegressor, RandomForestClassifier, RandomForestRegressor

__all__ = ["MODELS", "add_train_parser", "check_train_arguments", "run_train"]

_HELD_OUT_EVERY = 5  # global rows with index % 5 == 4 are the test set


def _hidden_sizes(text):
    try:
        sizes = tuple(int(part) for part in text.split(",") if part)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} should be comma-separated integers, "
                                         "e.g. 128,64") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} should list positive layer widths")
    return sizes


def _max_depth(text):
    return None if text.lower() == "none" else int(text)


def _max_features(text):
    if text in ("sqrt", "log2"):
        return text
    return float(text) if "." in text else int(text)


def _mlp_options(parser):
    parser.add_argument("--hidden-layer-sizes", type=_hidden_sizes, default=(64,),
                        help="widths of the hidden layers, comma-separated")
    parser.add_argument("--activation", choices=("relu", "tanh", "gelu"), default="relu")
    parser.add_argument("--solver", choices=("adam", "sgd"), default="adam")
    parser.add_argument("--learning-rate-init", type=float, default=3e-3)
    parser.add_argument("--batch-size", type=int, default=64, help="global batch size")
    parser.add_argument("--max-iter", type=int, default=40, help="epochs")
    parser.add_argument("--task", choices=("auto", "classification", "regression"),
                        default="auto", help="auto: integer labels mean classification")


def _kmeans_options(parser):
    parser.add_argument("--n-clusters", type=int, default=8)
    parser.add_argument("--init", choices=("k-means++", "k-means||", "random"),
                        default="k-means++")
    parser.add_argument("--n-init", default="auto", help="runs with different seeds, or auto")
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--tol", type=float, default=1e-4)


def _forest_options(parser):
    parser.add_argument("--n-estimators", type=int, default=100)
    parser.add_argument("--max-depth", type=_max_depth, default=None, help="int or none")
    parser.add_argument("--max-features", type=_max_features, default="sqrt",
                        help="sqrt, log2, a count or a fraction")
    parser.add_argument("--min-samples-leaf", type=int, default=1)
    parser.add_argument("--max-bins", type=int, default=256)
    parser.add_argument("--task", choices=("auto", "classification", "regression"),
                        default="auto", help="auto: integer labels mean classification")


def _is_classification(args, y):
    if args.task != "auto":
        return args.task == "classification"
    return y is not None and (y.dtype.kind in "iub" or
                              bool(np.all(np.asarray(y) == np.round(y))))


def _make_mlp(args, y, ctx):
    cls = MLPClassifier if _is_classification(args, y) else MLPRegressor
    return cls(args.hidden_layer_sizes, activation=args.activation, solver=args.solver,
               learning_rate_init=args.learning_rate_init, batch_size=args.batch_size,
               max_iter=args.max_iter, random_state=args.random_state, comm=ctx,
               verbose=int(not args.quiet))


def _make_kmeans(args, y, ctx):
    n_init = args.n_init if args.n_init == "auto" else int(args.n_init)
    return KMeans(args.n_clusters, init=args.init, n_init=n_init, max_iter=args.max_iter,
                  tol=args.tol, random_state=args.random_state, comm=ctx,
                  verbose=int(not args.quiet))


def _make_forest(args, y, ctx):
    cls = RandomForestClassifier if _is_classification(args, y) else RandomForestRegressor
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


#: model name -> (help, function adding its options, factory(args, y_local, ctx))
MODELS = {
    "mlp": ("multi-layer perceptron, data-parallel (MLPClassifier/MLPRegressor)",
            _mlp_options, _make_mlp),
    "kmeans": ("K-means clustering (KMeans)", _kmeans_options, _make_kmeans),
    "forest": ("random forest of histogram trees (RandomForestClassifier/Regressor)",
               _forest_options, _make_forest),
}


def add_train_parser(commands):
    """Add ``train`` and one sub-command per model to ``commands``."""
    train = commands.add_parser(
        "train", help="train mlp, kmeans or forest on built-in or HDF5 data",
        description=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawTextHelpFormatter)
    models = train.add_subparsers(dest="model", metavar="MODEL", required=True)
    for name, (summary, add_options, _) in MODELS.items():
        model = models.add_parser(name, help=summary, description=f"Train {summary}.",
                                  formatter_class=argparse.ArgumentDefaultsHelpFormatter)
        data = model.add_argument_group("data")
        data.add_argument("--dataset", choices=("digits", "blobs", "classification"),
                          default="digits", help="built-in data set (ignored with --data)")
        data.add_argument("--n-samples", type=int, default=20_000,
                          help="rows of a generated data set (blobs, classification)")
        data.add_argument("--n-features", type=int, default=20,
                          help="columns of a generated data set")
        data.add_argument("--n-classes", type=int, default=4,
                          help="classes (blob centres) of a generated data set")
        data.add_argument("--data", metavar="FILE.h5", help="HDF5 file to read instead")
        data.add_argument("--x", metavar="NAME", help="dataset of FILE.h5 with the features")
        data.add_argument("--y", metavar="NAME", help="dataset of FILE.h5 with the targets")
        run = model.add_argument_group("run")
        run.add_argument("--random-state", type=int, default=0)
        run.add_argument("--checkpoint-dir", metavar="DIR",
                         help="write checkpoints here; resume from it when it holds one")
        run.add_argument("--checkpoint-every", type=int, default=1,
                         help="epochs (iterations, tree batches) between checkpoints")
        run.add_argument("--output", metavar="FILE.json", help="write the metrics as JSON")
        run.add_argument("--compare-sklearn", action="store_true",
                         help="also fit scikit-learn on the gathered rows (rank 0)")
        run.add_argument("--quiet", action="store_true", help="no progress bar")
        run.add_argument("-n", "--np", type=int, default=None, dest="ranks",
                         help="ranks to start when not already under mpiexec/srun")
        add_options(model.add_argument_group(f"{name} hyper-parameters"))
        model.set_defaults(model_parser=model)  # for check_train_arguments' messages
    return train


def check_train_arguments(args):
    """Usage errors that argparse cannot see alone, reported by the model's parser
    (``args.model_parser``): printed once in an MPI job, exit status 2 on every rank."""
    parser = args.model_parser
    if args.ranks is not None and args.ranks < 1:
        parser.error(f"-n {args.ranks} should be >= 1")
    if args.data and not args.x:
        parser.error("--data needs --x NAME (the features dataset)")
    if args.data and not args.y and args.model != "kmeans":
        parser.error("needs targets: pass --y NAME with --data")
    for option, value in (("--n-samples", args.n_samples), ("--n-features", args.n_features),
                          ("--n-classes", args.n_classes),
                          ("--checkpoint-every", args.checkpoint_every)):
        if value < 1:
            parser.error(f"{option} {value} should be >= 1")
    if args.output:
        folder = os.path.dirname(os.path.abspath(args.output))
        if os.path.isdir(args.output) or not os.path.isdir(folder):
            parser.error(f"--output {args.output}: "
                         + ("is a directory; name a file" if os.path.isdir(args.output)
                            else f"no directory {folder}; create it first"))
        if not os.access(folder, os.W_OK):
            parser.error(f"--output {args.output}: {folder} is not writable")


# -- data ------------------------------------------------------------------------------

def _held_out_split(X, y, ctx):
    """Every fifth global row is test data; returns (X, y, X_test, y_test)."""
    counts = allgather(np.array([len(X)]), ctx=ctx)  # every rank's row count
    offset = int(counts[:ctx.rank].sum())
    test = (offset + np.arange(len(X))) % _HELD_OUT_EVERY == _HELD_OUT_EVERY - 1
    y_test = None if y is None else y[test]
    y_train = None if y is None else y[~test]
    return X[~test], y_train, X[test], y_test


def load_data(args, ctx):
    """This rank's train and test rows as ``(X, y, X_test, y_test)``."""
    if args.data:
        X = load_hdf5(args.data, args.x, ctx=ctx)
        y = load_hdf5(args.data, args.y, ctx=ctx) if args.y else None
        return _held_out_split(X, y, ctx)
    if args.dataset == "digits":
        X, y = load_digits(ctx, split="train", random_state=args.random_state)
        X_test, y_test = load_digits(ctx, split="test", random_state=args.random_state)
        return X, y, X_test, y_test
    if args.dataset == "blobs":
        X, y = make_blobs(args.n_samples, args.n_features, args.n_classes,
                               random_state=args.random_state, ctx=ctx)
    else:
        X, y = make_classification(args.n_samples, args.n_features, args.n_classes,
                                        n_informative=max(2, args.n_features // 2),
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


def run_train(args):
    """Train, print the global metrics on rank 0, return the exit code."""
    ctx = init()
    name = args.model
    try:
        return _train_and_report(args, ctx)
    except Exception as error:
        if not raised_on_every_rank(error):
            raise  # a bug, or a failure on some ranks only: the traceback, and the job aborts
        # a user mistake that every rank raised (bad data, hyper-parameters, settings that
        # differ): one line from rank 0, exit status 2 everywhere, no traceback
        message = error.args[0] if isinstance(error, KeyError) and error.args else error
        if ctx.rank == 0:
            print(f"hpcdist train {name}: {message}", file=sys.stderr, flush=True)
        return 2


def _train_and_report(args, ctx):
    name = args.model
    X, y, X_test, y_test = load_data(args, ctx)
    estimator = MODELS[name][2](args, y, ctx)
    checkpoint = None
    if args.checkpoint_dir:
        checkpoint = CheckpointManager(args.checkpoint_dir, ctx=ctx)
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
