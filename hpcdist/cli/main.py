"""Entry point of the ``hpcdist`` console script."""

import argparse
import os
import subprocess
import sys

from .._version import __version__

__all__ = ["main", "build_parser"]

#: benchmark name -> module with a ``main(argv)``
BENCHMARKS = {"collectives": "hpcdist.bench.collectives",
              "compression": "hpcdist.bench.compression"}


def build_parser():
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(
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
    return parser


def _take_ranks_option(args):
    """Accept ``-n N`` after the benchmark's name too (``hpcdist bench collectives -n 4``)."""
    options = list(args.options)
    for flag in ("-n", "--np"):
        while flag in options:
            index = options.index(flag)
            if index + 1 >= len(options):
                raise SystemExit(f"hpcdist bench: {flag} needs a number of ranks")
            args.ranks = int(options[index + 1])
            del options[index:index + 2]
    args.options = options


def _run_bench(args):
    _take_ranks_option(args)
    module = BENCHMARKS[args.name]
    from .launcher import find_mpiexec, under_mpi_launcher
    if under_mpi_launcher() or args.ranks == 1:
        import importlib
        return importlib.import_module(module).main(args.options)
    if args.ranks < 1:
        raise SystemExit(f"hpcdist bench: -n {args.ranks} should be >= 1")
    command = [find_mpiexec(), "-n", str(args.ranks), sys.executable, "-m", module, *args.options]
    print("+ " + " ".join(command), flush=True)
    return subprocess.call(command, env=os.environ.copy())


def main(argv=None):
    """Run the ``hpcdist`` command line; returns the exit code."""
    args = build_parser().parse_args(argv)
    if args.command == "info":
        from .info import run_info
        return run_info(args)
    if args.command == "bench":
        return _run_bench(args)
    raise AssertionError(args.command)  # argparse rejects unknown commands


if __name__ == "__main__":
    sys.exit(main())
