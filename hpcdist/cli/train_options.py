"""``hpcdist train``'s command line: the options of each model and the checks argparse
cannot make alone. Importing it loads no estimator, so a usage error costs no start-up
time; :mod:`hpcdist.cli.train` runs the training."""

import argparse
import os

__all__ = ["MODELS", "add_train_parser", "check_train_arguments"]

#: what ``hpcdist train --help`` says about the command
DESCRIPTION = """Run it under ``mpiexec``/``srun`` or ``hpcdist run`` (or give ``-n N`` and it
starts itself under mpiexec). Every rank loads only its rows. One row in
five (by global row index) is held out for testing, except for ``digits``,
which has its own test split. Rank 0 prints the global metrics as a table
and writes them as JSON with ``--output``."""


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


#: model name -> (help, function adding its options)
MODELS = {
    "mlp": ("multi-layer perceptron, data-parallel (MLPClassifier/MLPRegressor)", _mlp_options),
    "kmeans": ("K-means clustering (KMeans)", _kmeans_options),
    "forest": ("random forest of histogram trees (RandomForestClassifier/Regressor)",
               _forest_options),
}


def add_train_parser(commands):
    """Add ``train`` and one sub-command per model to ``commands``."""
    train = commands.add_parser(
        "train", help="train mlp, kmeans or forest on built-in or HDF5 data",
        description=DESCRIPTION, formatter_class=argparse.RawTextHelpFormatter)
    models = train.add_subparsers(dest="model", metavar="MODEL", required=True)
    for name, (summary, add_options) in MODELS.items():
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
