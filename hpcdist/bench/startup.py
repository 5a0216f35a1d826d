"""``hpcdist bench startup``: what a first run pays to compile kernels, against a second run.

For each command of :data:`COMMANDS` (``hpcdist train forest|kmeans|mlp``) and
each rank count of ``--ranks``, in this order and in one run:

* *first*: the command with ``NUMBA_CACHE_DIR`` pointed at an empty folder, as
  on a new installation (every kernel compiles);
* *second*: the same command again with that folder (every kernel loads);
* *after compile*: the command with a folder that ``hpcdist compile`` filled
  (``hpcdist compile``'s own wall time, for the tasks of the commands
  measured, is taken once, before these).

Each is the wall time of the whole command (interpreter start, imports, data,
fit, scoring) and the fit's seconds as the command reports them. Then the
wall times of ``python -c "import hpcdist"`` and ``python -c "import hpcdist.ml"``
(medians of ``--repetitions``). ``--reference DIR`` runs the first and second
runs of another source tree (e.g. an older checkout) beside this one's, in the
same run. Commands run from this process, each its own ``mpiexec`` job where
it has more than one rank (``hpcdist train -n N``); thread variables are
passed on as they are set here.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..cli.compile import TASKS
from .common import (
    add_job_options,
    benchmark_parser,
    cpu_model,
    installed_versions,
    load_average,
    package_version,
    summary_entry,
    summary_lines,
    write_report,
)

__all__ = ["COMMANDS", "QUICK_COMMANDS", "main"]

#: name -> the ``hpcdist train`` options measured
COMMANDS = {
    "forest": ["forest", "--dataset", "classification", "--n-samples", "50000", "--n-features",
               "20", "--n-estimators", "50", "--max-depth", "12"],
    "kmeans": ["kmeans", "--dataset", "blobs", "--n-samples", "200000", "--n-features", "16",
               "--n-classes", "16", "--n-clusters", "16"],
    "mlp": ["mlp", "--dataset", "digits"],
}
#: ``--quick``: smaller data (compile time does not depend on the data's size)
QUICK_COMMANDS = {
    "forest": ["forest", "--dataset", "classification", "--n-samples", "5000", "--n-features",
               "20", "--n-estimators", "10", "--max-depth", "12"],
    "kmeans": ["kmeans", "--dataset", "blobs", "--n-samples", "20000", "--n-features", "16",
               "--n-classes", "16", "--n-clusters", "16"],
    "mlp": ["mlp", "--dataset", "digits", "--max-iter", "20"],
}
_SOURCE = str(Path(__file__).resolve().parents[2])


def _parse_args(argv):
    parser = benchmark_parser(
        "startup", __doc__.split("\n\n")[0], plot=False,
        quick="smaller data sets (the compile time is the same)")
    add_job_options(parser)
    parser.add_argument("--commands", default=",".join(COMMANDS),
                        help="which of forest,kmeans,mlp to run")
    parser.add_argument("--repetitions", type=int, default=3,
                        help="runs of each import whose median is reported")
    parser.add_argument("--reference", type=Path, default=None, metavar="DIR",
                        help="also measure the first and second runs of the hpcdist source "
                             "tree in DIR (its hpcdist/ folder), e.g. an older checkout")
    args = parser.parse_args(argv)
    names = [name for name in args.commands.split(",") if name]
    unknown = sorted(set(names) - set(COMMANDS))
    if unknown or not names:
        parser.error(f"--commands {args.commands}: choose among {','.join(COMMANDS)}")
    if args.repetitions < 1:
        parser.error(f"--repetitions={args.repetitions} should be >= 1")
    if args.reference is not None and not (args.reference / "hpcdist").is_dir():
        parser.error(f"--reference {args.reference}: no hpcdist/ folder in it; name the "
                     "root of an hpcdist source tree")
    args.names = names
    return args


def _environment(cache, source=_SOURCE):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache))
    env["PYTHONPATH"] = os.pathsep.join([source] + ([env["PYTHONPATH"]]
                                                    if env.get("PYTHONPATH") else []))
    return env


def _timed(command, env):
    """Wall seconds of ``command``, run in an empty folder (``python -m`` and ``-c`` put
    the current folder first on ``sys.path``: not a checkout's hpcdist there); raises
    when it fails."""
    with tempfile.TemporaryDirectory(prefix="hpcdist-startup-") as folder:
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, cwd=folder)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        print(f"{' '.join(command)} failed (exit status {done.returncode}):\n"
              f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}", file=sys.stderr)
        raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
    return seconds


def _train(options, ranks, cache, source=_SOURCE):
    """``{"wall": s, "fit": s}`` of one ``hpcdist train`` run."""
    with tempfile.TemporaryDirectory(prefix="hpcdist-startup-") as tmp:
        output = Path(tmp) / "metrics.json"
        command = [sys.executable, "-m", "hpcdist.cli.main", "train", *options, "--quiet",
                   "-n", str(ranks), "--output", str(output)]
        wall = _timed(command, _environment(cache, source))
        return {"wall": wall, "fit": json.loads(output.read_text())["seconds"]}


def _first_and_second(options, ranks, source=_SOURCE):
    with tempfile.TemporaryDirectory(prefix="hpcdist-numba-") as cache:
        first = _train(options, ranks, cache, source)
        second = _train(options, ranks, cache, source)
    return {"first": first, "second": second,
            "first_over_second": first["wall"] / second["wall"],
            "first_minus_second": first["wall"] - second["wall"]}


def _import_seconds(statement, repetitions):
    env = _environment(tempfile.gettempdir())
    env.pop("NUMBA_CACHE_DIR")
    return statistics.median(_timed([sys.executable, "-c", statement], env)
                             for _ in range(repetitions))


def _line(name, ranks, run):
    text = (f"  {name:6s} {ranks} rank(s): first {run['first']['wall']:6.1f} s "
            f"(fit {run['first']['fit']:5.1f}), second {run['second']['wall']:6.1f} s "
            f"(fit {run['second']['fit']:5.1f}): {run['first_over_second']:.2f}x, "
            f"+{run['first_minus_second']:.1f} s")
    if "after_compile" in run:
        text += f"; after hpcdist compile {run['after_compile']['wall']:6.1f} s"
    return text


def _measure(args):
    commands = QUICK_COMMANDS if args.quick else COMMANDS
    runs = {}
    for name in args.names:
        for ranks in args.ranks:
            runs[f"{name}@{ranks}"] = run = _first_and_second(commands[name], ranks)
            print(_line(name, ranks, run), flush=True)
    with tempfile.TemporaryDirectory(prefix="hpcdist-numba-") as cache:
        tasks = [task for task in TASKS if task.startswith(tuple(args.names))]
        compile_seconds = _timed([sys.executable, "-m", "hpcdist.cli.main", "compile",
                                  "--only", *tasks], _environment(cache))
        print(f"  hpcdist compile: {compile_seconds:.1f} s", flush=True)
        for name in args.names:
            for ranks in args.ranks:
                run = runs[f"{name}@{ranks}"]
                run["after_compile"] = _train(commands[name], ranks, cache)
                print(_line(name, ranks, run), flush=True)
    reference = {}
    if args.reference is not None:
        for name in args.names:
            for ranks in args.ranks:
                reference[f"{name}@{ranks}"] = run = _first_and_second(
                    commands[name], ranks, str(args.reference.resolve()))
                print("  reference" + _line(name, ranks, run), flush=True)
    imports = {statement: _import_seconds(statement, args.repetitions)
               for statement in ("import hpcdist", "import hpcdist.ml")}
    for statement, seconds in imports.items():
        print(f"  {statement}: {seconds:.2f} s", flush=True)
    return runs, compile_seconds, reference, imports


def _summary(runs, compile_seconds, reference, imports):
    summary = {}
    for key, run in runs.items():
        summary[f"{key} first/second wall"] = summary_entry(
            "first run's wall time (empty cache) over the second's", run["first_over_second"])
        summary[f"{key} first-second wall"] = summary_entry(
            "seconds the first run takes more than the second", run["first_minus_second"])
        summary[f"{key} after compile/second wall"] = summary_entry(
            "wall time of a first run after hpcdist compile over the second run's",
            run["after_compile"]["wall"] / run["second"]["wall"])
        if key in reference:
            summary[f"{key} second wall/reference second"] = summary_entry(
                "second run's wall time over the reference tree's second run",
                run["second"]["wall"] / reference[key]["second"]["wall"])
            summary[f"{key} first wall/reference first"] = summary_entry(
                "first run's wall time over the reference tree's first run",
                run["first"]["wall"] / reference[key]["first"]["wall"])
    summary["hpcdist compile seconds"] = summary_entry(
        "wall seconds of hpcdist compile into an empty cache", compile_seconds)
    for statement, seconds in imports.items():
        summary[f"{statement} seconds"] = summary_entry(
            f"wall seconds of python -c '{statement}' (median)", seconds)
    return summary


def main(argv=None):
    """Run the benchmark; returns the exit status."""
    args = _parse_args(sys.argv[1:] if argv is None else list(argv))
    commands = QUICK_COMMANDS if args.quick else COMMANDS
    print("hpcdist bench startup: first run (empty Numba cache) against second run",
          flush=True)
    runs, compile_seconds, reference, imports = _measure(args)
    summary = _summary(runs, compile_seconds, reference, imports)
    print("\n".join(summary_lines(summary)), flush=True)
    machine = {"cpu_model": cpu_model(), "cpu_count": os.cpu_count(),
               "cpus_available": len(os.sched_getaffinity(0))
               if hasattr(os, "sched_getaffinity") else None,
               "python": sys.version.split()[0], "numba": package_version("numba"),
               "hpcdist": package_version("hpcdist"), **installed_versions(),
               "thread_env": {name: os.environ.get(name) for name in
                              ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")},
               "load_average": load_average()}
    settings = {"quick": args.quick, "ranks": args.ranks, "repetitions": args.repetitions,
                "commands": {name: "hpcdist train " + " ".join(commands[name])
                             for name in args.names},
                "reference": None if args.reference is None else str(args.reference)}
    report = {"benchmark": "startup", "machine": machine, "settings": settings,
              "runs": runs, "hpcdist_compile_seconds": compile_seconds,
              "reference_runs": reference, "import_seconds": imports, "summary": summary}
    write_report(report, args.output_dir, args.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
