"""``hpcdist train``'s command line: the options of each model and the checks argparse
cannot make alone. Importing it loads no estimator, so a usage error costs no start-up
time; :mod:`hpcdist.cli.train` runs the training."""

import argparse
import os

from .._environment import FAULT_TOLERANCE_MODES as FAULT_TOLERANT_MODES
from .arguments import unwritable_directory

__all__ = ["MODELS", "add_train_parser", "check_train_arguments", "classification_shape"]

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


def _int_or_word(word, value):
    """An argparse type: an integer >= 1, or ``word`` (any case), which gives ``value``."""
    def parse(text):
        if text.lower() == word:
            return value
        try:
            number = int(text)
        except ValueError:
            number = 0
        if number < 1:
            raise argparse.ArgumentTypeError(f"{text!r} should be an integer >= 1 or {word!r}")
        return number

    return parse


def _max_features(text):
    """``--max-features``: sqrt, log2, a count >= 1 or a fraction in (0, 1]."""
    if text in ("sqrt", "log2"):
        return text
    try:
        value = float(text) if "." in text else int(text)
    except ValueError:
        value = 0
    if not (0 < value <= 1 if isinstance(value, float) else value >= 1):
        raise argparse.ArgumentTypeError(
            f"{text!r} should be sqrt, log2, an integer >= 1 or a fraction in (0, 1]")
    return value


def classification_shape(n_features, n_classes):
    """``(n_informative, n_redundant)`` of ``--dataset classification``: half the
    features informative (at least 2, and enough for ``n_classes`` distinct
    hypercube vertices), up to 2 redundant; ``n_informative`` may exceed
    ``n_features``, which :func:`check_train_arguments` reports."""
    n_informative = max(2, n_features // 2, (n_classes - 1).bit_length())
    return n_informative, max(0, min(2, n_features - n_informative))


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
    parser.add_argument("--n-init", type=_int_or_word("auto", "auto"), default="auto",
                        help="runs with different seeds, or auto")
    parser.add_argument("--max-iter", type=int, default=300)
    parser.add_argument("--tol", type=float, default=1e-4)


def _forest_options(parser):
    parser.add_argument("--n-estimators", type=int, default=100)
    parser.add_argument("--max-depth", type=_int_or_word("none", None), default=None,
                        help="int or none")
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
                         help="epochs (iterations, tree batches) between checkpoints "
                              "(with --fault-tolerant: between in-memory commits)")
        run.add_argument("--fault-tolerant", nargs="?", const="shrink", default=None,
                         choices=FAULT_TOLERANT_MODES, metavar="{shrink,respawn}",
                         help="survive a lost rank: the survivors take over its rows and "
                              "finish from the last commit (mode shrink, the default), or a "
                              "replacement process takes its rank and rows (respawn; "
                              "needs Open MPI 5 launched with "
                              "mpirun --with-ft ulfm; -n N launches it so; on by itself under "
                              "hpcdist run --fault-tolerant); the JSON output records the "
                              "ranks lost")
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
    if (args.x or args.y) and not args.data:
        parser.error(f"{'--x' if args.x else '--y'} names a dataset of --data FILE.h5; "
                     "pass --data too (or leave --x and --y out to use --dataset)")
    for option, value in (("--n-samples", args.n_samples), ("--n-features", args.n_features),
                          ("--n-classes", args.n_classes),
                          ("--checkpoint-every", args.checkpoint_every)):
        if value < 1:
            parser.error(f"{option} {value} should be >= 1")
    if not 0 <= args.random_state < 2 ** 32:
        parser.error(f"--random-state {args.random_state} should be in [0, 2**32 - 1]")
    if not args.data:
        _check_generated_data(parser, args)
    if args.fault_tolerant and args.checkpoint_dir:
        parser.error("--fault-tolerant keeps the progress in memory, not in --checkpoint-dir; "
                     "pass one of them")
    problem = args.checkpoint_dir and unwritable_directory(args.checkpoint_dir)
    if problem:
        parser.error(f"--checkpoint-dir {args.checkpoint_dir}: {problem}; name a directory "
                     "you can write to")
    if args.output:
        folder = os.path.dirname(os.path.abspath(args.output))
        if os.path.isdir(args.output) or not os.path.isdir(folder):
            parser.error(f"--output {args.output}: "
                         + ("is a directory; name a file" if os.path.isdir(args.output)
                            else f"no directory {folder}; create it first"))
        if not os.access(folder, os.W_OK):
            parser.error(f"--output {args.output}: {folder} is not writable")


def _check_generated_data(parser, args):
    """The flags of a built-in data set that its generator or the estimator would refuse."""
    classifier = args.model != "kmeans" and args.task != "regression"
    if args.n_classes < 2 and (args.dataset == "classification"
                               or (args.dataset == "blobs" and classifier)):
        parser.error(f"--n-classes {args.n_classes} should be >= 2 for --dataset "
                     f"{args.dataset}" + (" (or pass --task regression)" if classifier else ""))
    n_informative = classification_shape(args.n_features, args.n_classes)[0]
    if args.dataset == "classification" and n_informative > args.n_features:
        parser.error(f"--n-features {args.n_features} is too few for --dataset classification "
                     f"with --n-classes {args.n_classes}: raise --n-features to "
                     f"{n_informative} or more")
