"""Thread hygiene: ranks x threads stays within the node's cores."""

import ctypes
import os
import subprocess
import sys
import threading

import pytest

from hpcdist.comm import threads
from tests.helpers import subprocess_env

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.fixture
def no_thread_settings(monkeypatch):
    for name in threads.THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield
    while threads._LIMITER:
        threads._LIMITER.pop().restore_original_limits()
    threads._CHOSEN.clear()


def test_limits_threads_to_cores_per_rank(no_thread_settings, monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    assert threads.limit_threads_per_rank(local_size=4, cores=8) == 2
    assert os.environ["OMP_NUM_THREADS"] == "2"


def test_leaves_user_settings_alone(no_thread_settings, monkeypatch):
    for name in threads.THREAD_VARIABLES:
        monkeypatch.setenv(name, "3")
    assert threads.limit_threads_per_rank(local_size=4, cores=8) is None
    assert os.environ["NUMBA_NUM_THREADS"] == "3"


def test_user_omp_threads_also_cap_numba(no_thread_settings, monkeypatch):
    """OMP_NUM_THREADS=1 alone must not leave Numba with a thread per core."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    if "numba" in sys.modules:
        import numba
        before = numba.get_num_threads()
        try:
            assert threads.limit_threads_per_rank(local_size=2, cores=8) == 1
            assert numba.get_num_threads() == 1
        finally:
            numba.set_num_threads(before)
    else:
        assert threads.limit_threads_per_rank(local_size=2, cores=8) == 1
        assert os.environ["NUMBA_NUM_THREADS"] == "1"
    assert os.environ["OMP_NUM_THREADS"] == "1"


def test_a_communication_thread_takes_a_core_from_hpcdists_choice(no_thread_settings,
                                                                  monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 16)
    assert threads.limit_threads_per_rank(local_size=2, cores=16) == 8
    assert threads.reserve_core_for_communication() == 7
    assert os.environ["OMP_NUM_THREADS"] == "7"


def test_no_core_is_taken_from_few_threads_or_from_the_users_choice(no_thread_settings,
                                                                    monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 16)
    assert threads.limit_threads_per_rank(local_size=8, cores=16) == 2
    assert threads.reserve_core_for_communication() is None
    assert os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.setenv("OMP_NUM_THREADS", "8")
    threads.limit_threads_per_rank(local_size=2, cores=16)
    assert threads.reserve_core_for_communication() is None
    assert os.environ["OMP_NUM_THREADS"] == "8"


def test_single_rank_per_node_keeps_all_cores(no_thread_settings, monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 8)
    assert threads.limit_threads_per_rank(local_size=1, cores=8) is None


def test_rank_bound_to_fewer_cores_gets_that_many(no_thread_settings, monkeypatch):
    monkeypatch.setattr(threads, "available_cores", lambda: 2)
    assert threads.limit_threads_per_rank(local_size=1, cores=8) == 2


def test_oversubscribed_ranks_get_one_blas_thread_each():
    """Two ranks on this machine: init caps BLAS threads so 2 x threads <= cores."""
    code = ("import hpcdist, threadpoolctl, os; ctx = hpcdist.init(); "
            "info = threadpoolctl.threadpool_info(); "
            "cores = len(os.sched_getaffinity(0)); "
            "assert all(i['num_threads'] * ctx.local_size <= max(cores, ctx.local_size) "
            "for i in info), info; print('ok', os.environ['OMP_NUM_THREADS'])")
    env = {k: v for k, v in subprocess_env().items() if k not in threads.THREAD_VARIABLES}
    completed = subprocess.run([MPIEXEC, "-n", "2", sys.executable, "-c", code], env=env,
                               capture_output=True, text=True, timeout=120)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("ok") == 2


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timer slack is Linux's")
def test_precise_short_sleeps_sets_the_calling_threads_timer_slack_only():
    libc = ctypes.CDLL(None)
    get_timer_slack = 30  # PR_GET_TIMERSLACK
    before = libc.prctl(get_timer_slack, 0, 0, 0, 0)
    seen = []

    def polling_thread():
        threads.precise_short_sleeps()
        seen.append(libc.prctl(get_timer_slack, 0, 0, 0, 0))

    worker = threading.Thread(target=polling_thread)
    worker.start()
    worker.join()
    assert seen == [1000]  # nanoseconds
    assert libc.prctl(get_timer_slack, 0, 0, 0, 0) == before  # this thread keeps its own
