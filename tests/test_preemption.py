"""PreemptionHandler and Preempted: a stop signal on any rank stops every rank."""
import os
import signal

import pytest

from hpcdist._preemption import EXIT_RESUME, Preempted, PreemptionHandler
from tests.helpers import assert_on_all_ranks


def test_preemption_handler_single_process(ctx):
    with PreemptionHandler(ctx) as handler:
        assert not handler.should_stop()
        os.kill(os.getpid(), signal.SIGUSR1)
        assert handler.should_stop() and handler.received == "SIGUSR1"
    assert signal.getsignal(signal.SIGUSR1) == signal.SIG_DFL
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
