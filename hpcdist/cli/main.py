"""Entry point of the ``hpcdist`` console script.

Building the parser loads no estimator, no MPI and no benchmark: a command's
module is imported when that command runs (``hpcdist run`` and usage errors
start in a fraction of a second).
"""

import argparse
import importlib
import os
import subprocess
import sys

from .._environment import environment_mistakes
from .._version import __version__
from ..exceptions import InvalidArgumentError
from ..launch.environment import under_mpi_launcher
from ..launch.launchers import find_mpiexec
from ..launch.runner import fault_tolerant_launch, run_job
from .arguments import RankZeroArgumentParser, finite_float
from .train_options import add_train_parser, check_train_arguments

__all__ = ["main", "build_parser"]

#: benchmark name -> module with a ``main(argv)``
BENCHMARKS = {"collectives": "hpcdist.bench.collectives",
              "compression": "hpcdist.bench.compression",
              "mlp": "hpcdist.bench.mlp",
              "kmeans": "hpcdist.bench.kmeans",
              "forest": "hpcdist.bench.forest",
              "checkpoint": "hpcdist.bench.checkpoint",
              "strategies": "hpcdist.bench.strategies",
              "pipeline": "hpcdist.bench.pipeline",
              "ps": "hpcdist.bench.ps",
              "ps-modes": "hpcdist.bench.ps_modes",
              "sharded": "hpcdist.bench.sharded",
              "startup": "hpcdist.bench.startup",
              "recovery": "hpcdist.bench.recovery",
              "gpu": "hpcdist.bench.gpu"}
#: benchmarks that start one mpiexec job per rank count themselves: ``-n N``
#: becomes ``--ranks 1,N`` (measured at 1 rank and at N ranks)
SELF_LAUNCHING = {"mlp", "kmeans", "forest", "checkpoint", "strategies", "pipeline", "ps-modes",
                  "startup"}
#: benchmarks that drive jobs of their own design from this process (their --ranks, not -n)
DRIVERS = {"recovery"}


def build_parser():
    """The argument parser of every subcommand (usage errors printed once in an MPI job)."""
    parser = RankZeroArgumentParser(
        prog="hpcdist", description="MPI-first toolkit for distributed machine learning.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--version", action="version", version=f"hpcdist {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    info = commands.add_parser(
        "info", help="versions, MPI library, CUDA-awareness, threading and the rank layout",
        description="Print versions, the MPI library, CUDA-awareness, Numba threading, h5py "
                    "parallelism, GPUs and, under mpiexec, where every rank runs.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    info.add_argument("--json", action="store_true", help="print JSON instead of a table")

    run = commands.add_parser(
        "run", help="run a command on N ranks; restart it after failures",
        description="Start CMD on N ranks under the MPI launcher (mpiexec from this "
                    "environment, or srun inside a SLURM allocation), watch it, and restart "
                    "it after a failure with exponential backoff. Each rank gets RANK, "
                    "WORLD_SIZE, LOCAL_RANK and HPCDIST_RESTART_COUNT. Exit code 75 means "
                    "'checkpoint written on a signal': the job is started again to resume "
                    "(or, when hpcdist run itself got the signal, it exits with 75).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    run.add_argument("-n", "--np", type=int, default=1, dest="ranks", help="number of ranks")
    run.add_argument("--max-restarts", type=int, default=0,
                     help="restarts allowed after failures")
    run.add_argument("--launcher", choices=("auto", "mpiexec", "srun"), default="auto",
                     help="auto: srun inside a SLURM allocation, else mpiexec")
    run.add_argument("--backoff", type=finite_float(0, unit="seconds"), default=1.0,
                     help="seconds before the first restart; doubles each time (max 30)")
    run.add_argument("--launcher-args", default="",
                     help="extra launcher options, e.g. '--oversubscribe' for Open MPI")
    run.add_argument("--fault-tolerant", nargs="?", const="shrink", default=None,
                     choices=("shrink", "respawn"),
                     help="survive a lost rank (Open MPI 5 with ULFM: mpirun --with-ft ulfm); "
                          "hpcdist.init takes the mode (default shrink) from the environment")
    run.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ...",
                     help="the command every rank runs")

    add_train_parser(commands)

    bench = commands.add_parser(
        "bench", help="run a benchmark against its baseline",
        description="Run a benchmark that measures hpcdist and its baseline side by side. "
                    "Outside mpiexec it starts itself under mpiexec with -n ranks; options "
                    "after the name go to the benchmark (see hpcdist bench NAME --help).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    bench.add_argument("name", choices=sorted(BENCHMARKS), help="which benchmark")
    bench.add_argument("-n", "--np", type=int, default=2, dest="ranks",
                       help="ranks to start when not already running under mpiexec")
    bench.add_argument("options", nargs=argparse.REMAINDER, help="options for the benchmark")

    compile_ = commands.add_parser(
        "compile", help="compile every Numba kernel into the cache, ahead of time",
        description="Compile the Numba kernels of every estimator (each signature a fit, "
                    "predict or score uses) into Numba's cache: NUMBA_CACHE_DIR when set, "
                    "else ~/.cache/hpcdist/numba ($XDG_CACHE_HOME/hpcdist/numba). Afterwards "
                    "a first run on this node is as fast as a second. Run it once per "
                    "installation and node type: in a short job before the first batch "
                    "jobs, or while building a container image (with NUMBA_CACHE_DIR set "
                    "to a folder inside the image); again after upgrading hpcdist or Numba. "
                    "Plainly it runs in --jobs processes; under mpiexec or srun the ranks "
                    "of each node share the work.")
    compile_.add_argument("-j", "--jobs", type=int, default=None,
                          help="processes (default: the cores this process may use)")
    compile_.add_argument("--only", nargs="+", metavar="TASK", default=None,
                          help="run only these tasks (names as printed by a full run)")
    return parser


def _take_ranks_option(parser, args):
    """Accept ``-n N`` after the benchmark's name too (``hpcdist bench collectives -n 4``)."""
    options = list(args.options)
    for flag in ("-n", "--np"):
        while flag in options:
            index = options.index(flag)
            if index + 1 == len(options):
                parser.error(f"bench: {flag} needs a number of ranks")
            try:
                args.ranks = int(options[index + 1])
            except ValueError:
                parser.error(f"bench: {flag} {options[index + 1]!r} is not a number of ranks; "
                             "pass an integer >= 1")
            del options[index:index + 2]
    args.options = options
    if args.ranks < 1:
        parser.error(f"bench: -n {args.ranks} should be >= 1")


def _run_bench(parser, args):
    _take_ranks_option(parser, args)
    module = BENCHMARKS[args.name]
    if args.name in DRIVERS:
        return importlib.import_module(module).main(args.options)
    if args.name in SELF_LAUNCHING and not under_mpi_launcher():
        ranks = ",".join(str(n) for n in sorted({1, args.ranks}))
        return importlib.import_module(module).main(["--ranks", ranks, *args.options])
    if under_mpi_launcher() or args.ranks == 1 or {"-h", "--help"} & set(args.options):
        return importlib.import_module(module).main(args.options)  # help: no job to start
    command = [find_mpiexec(), "-n", str(args.ranks), sys.executable, "-m", module, *args.options]
    print("+ " + " ".join(command), flush=True)
    return subprocess.call(command, env=os.environ.copy())


def _relaunch(ranks, argv, options=(), env=None):
    """Start ``hpcdist ARGV`` under mpiexec (with launcher ``options`` and extra
    environment ``env``) with ``ranks`` ranks; returns its exit code."""
    command = [find_mpiexec(), *options, "-n", str(ranks), sys.executable, "-m",
               "hpcdist.cli.main", *argv]
    print("+ " + " ".join(command), flush=True)
    return subprocess.call(command, env={**os.environ, **(env or {})})


def _run_train(args):
    check_train_arguments(args)
    if args.ranks and args.ranks > 1 and not under_mpi_launcher():
        argv = list(sys.argv[1:])
        for flag in ("-n", "--np"):
            while flag in argv:
                index = argv.index(flag)
                del argv[index:index + 2]
        options, env = (), None
        if args.fault_tolerant:
            try:  # mpirun --with-ft ulfm, or why this MPI cannot
                options, env = fault_tolerant_launch(args.fault_tolerant, "mpiexec")
            except InvalidArgumentError as error:
                args.model_parser.error(str(error).replace("hpcdist run: ", "", 1))
        return _relaunch(args.ranks, argv, options, env)
    return importlib.import_module(".train", __package__).run_train(args)


def _run_job(parser, args):
    command = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if args.ranks < 1:
        parser.error(f"run: -n {args.ranks} should be >= 1")
    if args.max_restarts < 0:
        parser.error(f"run: --max-restarts {args.max_restarts} should be >= 0")
    if not command:
        parser.error("run: no command given; usage: hpcdist run -n N -- CMD ...")
    result = run_job(command, args.ranks, launcher=args.launcher,
                     max_restarts=args.max_restarts, backoff=args.backoff,
                     launcher_args=args.launcher_args.split(),
                     fault_tolerant=args.fault_tolerant)
    return result.returncode


def _run_compile(parser, args):
    if args.jobs is not None and args.jobs < 1:
        parser.error(f"compile: --jobs {args.jobs} should be >= 1")
    module = importlib.import_module(".compile", __package__)
    unknown = sorted(set(args.only or ()) - set(module.TASKS))
    if unknown:
        parser.error(f"compile: --only {' '.join(unknown)}: no such task; choose from "
                     f"{', '.join(module.TASKS)}")
    args.under_mpi = under_mpi_launcher()
    return module.run_compile(args)


def main(argv=None):
    """Run the ``hpcdist`` command line; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    mistakes = environment_mistakes()  # before any work: a usage error, not a traceback
    if mistakes:
        parser.error("; ".join(mistakes))
    if args.command == "run":
        return _run_job(parser, args)
    if args.command == "train":
        return _run_train(args)
    if args.command == "info":
        return importlib.import_module(".info", __package__).run_info(args)
    if args.command == "bench":
        return _run_bench(parser, args)
    if args.command == "compile":
        return _run_compile(parser, args)
    raise AssertionError(args.command)  # argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
