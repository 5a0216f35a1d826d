"""PreemptionHandler and Preempted: a stop signal on any rank stops every rank."""
import os
import signal
import subprocess
import threading

import pytest

from hpcdist._preemption import EXIT_RESUME, Preempted, PreemptionHandler
from tests.helpers import assert_on_all_ranks, run_mpi_script


def test_preemption_handler_single_process(ctx):
    before = signal.getsignal(signal.SIGUSR1)
    with PreemptionHandler(ctx) as handler:
        assert not handler.should_stop()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert handler.should_stop() and handler.received == "SIGUSR1"
    assert signal.getsignal(signal.SIGUSR1) == before  # the previous handler is back
    error = Preempted(7)
    assert error.code == EXIT_RESUME == 75 and "step 7" in str(error)


@pytest.mark.mpi(min_size=2)
def test_a_signal_on_one_rank_stops_every_rank(ctx):
    with PreemptionHandler(ctx) as handler:
        assert not handler.should_stop()
        if ctx.rank == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        stopped = handler.should_stop()
    assert_on_all_ranks(stopped, "a rank did not see the stop request")


def test_on_terminate_runs_at_once_from_the_handlers_thread(ctx):
    called = threading.Event()
    threads = []

    def on_terminate():
        threads.append(threading.current_thread().name)
        called.set()

    with PreemptionHandler(ctx, on_terminate=on_terminate) as handler:
        os.kill(os.getpid(), signal.SIGUSR1)
        assert not called.wait(0.5), "on_terminate ran on SIGUSR1"
        os.kill(os.getpid(), signal.SIGTERM)
        assert called.wait(10), "on_terminate did not run on SIGTERM"
        assert handler.should_stop() and handler.received == "SIGTERM"
    assert threads == ["hpcdist-preemption"]
    assert signal.set_wakeup_fd(-1) == -1  # the previous wakeup fd is back


_STUCK_AFTER_SIGTERM = """
import os, signal, threading, time
import hpcdist
from hpcdist._preemption import PreemptionHandler
from hpcdist.comm.watchdog import end_stalls_after_termination
ctx = hpcdist.init()
if ctx.rank == 1:
    time.sleep(120)  # a rank that never arrives (as one that died)
else:
    with PreemptionHandler(ctx, on_terminate=end_stalls_after_termination):
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM)).start()
        ctx.allreduce(1.0)  # waits for rank 1; Python runs no handler meanwhile
"""


def test_sigterm_ends_a_collective_stuck_on_a_missing_rank_within_seconds(tmp_path):
    rc, seconds, output = run_mpi_script(_STUCK_AFTER_SIGTERM, tmp_path, n=2, timeout=90,
                                         HPCDIST_STALL_TIMEOUT=300,
                                         HPCDIST_TERM_STALL_TIMEOUT=2)
    assert rc != 0, output
    assert "(HPCDIST_TERM_STALL_TIMEOUT=2 after SIGTERM)" in output, output
    assert "Ranks that have not arrived in allreduce: rank 1" in output, output
    assert seconds < 30, f"{seconds:.1f} s\n{output}"


def test_leaving_with_preempted_ignores_later_stop_signals(ctx, tmp_path):
    with pytest.raises(Preempted):
        with PreemptionHandler(ctx):
            raise Preempted(3)
    try:
        for signum in (signal.SIGTERM, signal.SIGUSR1):
            assert callable(signal.getsignal(signum))  # Python's: children do not inherit it
        os.kill(os.getpid(), signal.SIGTERM)  # noted and ignored: the test goes on
        child = subprocess.run(["sh", "-c", "trap 'echo trapped' USR1; kill -USR1 $$"],
                               capture_output=True, text=True, timeout=60)
        assert child.stdout.strip() == "trapped"  # a child can still trap it
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
