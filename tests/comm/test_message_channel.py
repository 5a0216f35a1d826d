"""The message channel's send: it returns only once the message's buffers may be reused."""
import time

import numpy as np
import pytest

from hpcdist.comm.messages import IN_BAND_BYTES
from tests.helpers import all_ranks

pytestmark = pytest.mark.mpi(min_size=2)

LATE_SECONDS = 0.3
EAGER_BYTES = 64 * 1024  # MPI libraries send smaller messages at once, without the receiver


@pytest.mark.parametrize("elements", [8, IN_BAND_BYTES // 8 - 64, 4 * IN_BAND_BYTES // 8],
                         ids=["small", "in-band", "out-of-band"])
def test_a_send_to_a_late_receiver_returns_once_the_buffers_may_be_reused(ctx, elements):
    """Rank 1 starts receiving late; rank 0 overwrites what it sent as soon as ``send``
    returns, so a send that returned early would deliver the overwritten values."""
    channel = ctx.channel()
    sent = np.arange(elements, dtype=np.float64)
    received = None
    with all_ranks("channel send to a late receiver"):
        if ctx.rank == 0:
            start = time.perf_counter()
            channel.send({"values": sent, "note": "late"}, 1, 5)
            took = time.perf_counter() - start
            sent[...] = -1.0
            if elements * 8 >= EAGER_BYTES:  # not sent eagerly: it waited for the receiver
                assert took > LATE_SECONDS / 2, took
        elif ctx.rank == 1:
            time.sleep(LATE_SECONDS)
            while (received := channel.poll_from(0, 5)) is None:
                time.sleep(1e-3)
            assert received["note"] == "late"
            np.testing.assert_array_equal(received["values"], np.arange(elements,
                                                                         dtype=np.float64))
    ctx.barrier()
    channel.free()
