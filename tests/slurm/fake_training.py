"""A stand-in for ``hpcdist train`` in the SLURM template tests.

Every rank prints its arguments (and the variables named by ``--print-env``),
installs handlers for SIGUSR1 and SIGTERM, says it is ready by creating
``$FAKE_READY_DIR/rank-R``, and "trains" for ``--seconds``. Like hpcdist's
training loops, the handler only sets a flag; at the next step boundary the
rank writes ``checkpoint-R`` into ``--checkpoint-dir`` and exits with 75.
Without a signal it writes ``--output`` (rank 0) and exits with ``--exit``.
It never imports MPI, so it starts in a fraction of a second.
"""

import argparse
import functools
import json
import os
import signal
import sys
import time

EXIT_RESUME = 75
STEP_SECONDS = 0.05


def _say(rank, text):
    """One line in one write: the ranks share the launcher's output stream, and
    print() makes two writes (text, newline) when Python runs unbuffered
    (PYTHONUNBUFFERED), so another rank's line could land between them."""
    sys.stdout.write(f"[fake rank {rank}] {text}\n")
    sys.stdout.flush()


def _wait_for_every_checkpoint(directory, timeout=30.0):
    """A file barrier: return once ``checkpoint-R`` exists for every rank."""
    size = int(os.environ.get("WORLD_SIZE") or os.environ.get("PMI_SIZE") or "1")
    deadline = time.monotonic() + timeout
    paths = [os.path.join(directory, f"checkpoint-{r}") for r in range(size)]
    while not all(map(os.path.exists, paths)) and time.monotonic() < deadline:
        time.sleep(0.01)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=0.0, help="how long to train")
    parser.add_argument("--exit", type=int, default=0, help="exit code without a signal")
    parser.add_argument("--print-env", default="", help="comma-separated variable names")
    parser.add_argument("--checkpoint-dir")
    parser.add_argument("--output")
    args, _ = parser.parse_known_args()
    rank = os.environ.get("RANK") or os.environ.get("PMI_RANK") or "0"
    received = []

    def stop(signum, _frame):
        received.append(signal.Signals(signum).name)

    for signum in (signal.SIGUSR1, signal.SIGTERM):
        signal.signal(signum, stop)
    say = functools.partial(_say, rank)
    say(f"args {json.dumps(sys.argv[1:])}")
    for name in filter(None, args.print_env.split(",")):
        say(f"{name}={os.environ.get(name, '<unset>')}")
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
    if os.environ.get("FAKE_READY_DIR"):
        with open(os.path.join(os.environ["FAKE_READY_DIR"], f"rank-{rank}"), "w"):
            pass

    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        if received:  # a step boundary: checkpoint and ask to be resumed
            # the launcher and hpcdist's rank wrapper both deliver the signal;
            # a copy arriving while Python shuts down must not kill the rank
            for signum in (signal.SIGUSR1, signal.SIGTERM):
                signal.signal(signum, signal.SIG_IGN)
            if args.checkpoint_dir:
                path = os.path.join(args.checkpoint_dir, f"checkpoint-{rank}")
                with open(path + ".tmp", "w") as f:
                    f.write(received[0])
            say(f"got {received[0]}: checkpoint written, exit 75")
            if args.checkpoint_dir:  # the file appears only after the message is out
                os.replace(path + ".tmp", path)
                _wait_for_every_checkpoint(args.checkpoint_dir)
            return EXIT_RESUME
        time.sleep(STEP_SECONDS)
    if args.output and rank == "0":
        with open(args.output, "w") as f:
            json.dump({"args": sys.argv[1:]}, f)
    say(f"done, exit {args.exit}")
    return args.exit


if __name__ == "__main__":
    sys.exit(main())
