"""hpcdist.dask.DaskCluster: start() and stop() on every rank, the Client's methods, worker info."""
import time

import numpy as np
import pytest

pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")

import hpcdist  # noqa: E402
from hpcdist.dask import DaskCluster, DaskPhaseError  # noqa: E402
from tests.helpers import all_ranks, expect_error  # noqa: E402


def _add(x, y):
    return x + y


@pytest.mark.mpi(min_size=3)
def test_start_and_stop_on_every_rank(ctx):
    client_rank = ctx.size - 1
    # the limit covers the whole rank process: Dask pauses a worker at 80% of it, and a
    # rank of the full suite holds about 0.9 GB (torch, earlier tests) before Dask starts
    cluster = DaskCluster(ctx=ctx, client_rank=client_rank, threads_per_worker=2,
                          memory_limit=2**33)
    with all_ranks("before start"):
        assert not cluster.is_running and cluster.client is None
    if cluster.start():
        found = {"rank": ctx.rank, "running": cluster.is_running}
        found["map"] = cluster.gather(cluster.map(_add, range(5), range(5)))
        found["submit"] = cluster.submit(_add, 2, 3).result()
        [data] = cluster.scatter([np.arange(6)])
        cluster.replicate([data])
        found["scatter"] = cluster.submit(np.sum, data).result()
        found["info"] = cluster.get_worker_info()
        cluster.stop()
        found["running after stop"] = cluster.is_running
    else:
        found = None
    found = hpcdist.broadcast_object(found, root=client_rank, ctx=ctx)
    workers = sorted(set(range(ctx.size)) - {0, client_rank})
    with all_ranks(f"what the client found: {found}"):
        assert found["rank"] == client_rank and found["running"]
        assert found["map"] == [0, 2, 4, 6, 8] and found["submit"] == 5
        assert found["scatter"] == 15
        info = found["info"]
        assert sorted(entry["rank"] for entry in info.values()) == workers
        assert all(address.startswith("tls://127.0.0.1:") for address in info)
        assert {(entry["nthreads"], entry["memory_limit"]) for entry in info.values()} == {
            (2, 2**33)}
        assert not found["running after stop"]
        assert not cluster.is_running and cluster.client is None
    cluster.stop()  # again: nothing to do, on every rank
    assert hpcdist.allreduce(1, ctx=ctx) == ctx.size


@pytest.mark.mpi(min_size=3)
def test_the_client_methods_need_the_client_rank(ctx):
    cluster = DaskCluster(ctx=ctx)
    expect_error(DaskPhaseError, cluster.map, _add, [1], [2],
                 match=r"DaskCluster.map: no client here.*client_rank=1")


@pytest.mark.mpi(min_size=3)
def test_an_existing_scheduler_serves_the_client_rank_the_others_return_at_once(ctx):
    from distributed import LocalCluster
    from distributed.security import Security

    local = security = address = None
    if ctx.rank == 1:
        security = Security.temporary()
        local = LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                             protocol="tls://", security=security, dashboard_address=None)
        address = local.scheduler_address
    else:
        address = "tls://127.0.0.1:9"  # never contacted from these ranks
    cluster = DaskCluster(ctx=ctx, scheduler_address=address, security=security)
    start = time.monotonic()
    is_client = cluster.start()
    seconds = time.monotonic() - start
    found = None
    if is_client:
        found = (cluster.submit(_add, 20, 22).result(),
                 [entry["rank"] for entry in cluster.get_worker_info().values()])
        cluster.stop()
        local.close()
    with all_ranks("external scheduler"):
        assert is_client == (ctx.rank == 1)
        if is_client:
            assert found == (42, [None])
        else:
            assert seconds < 1.0, seconds
        assert not cluster.is_running


def test_n_workers_is_not_a_parameter():
    with pytest.raises(hpcdist.InvalidArgumentTypeError,
                       match=r"n_workers=4 is not a parameter: the workers are the job's ranks "
                             r"other than the scheduler \(rank 0\) and the client"):
        DaskCluster(n_workers=4)
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) processes"):
        DaskCluster(processes=True)


def test_security_without_a_scheduler_address_is_refused(ctx):
    from distributed.security import Security

    with pytest.raises(hpcdist.InvalidArgumentError, match=r"security= is for an existing"):
        DaskCluster(ctx=ctx, security=Security.temporary()).start()


def test_one_rank_is_too_few(ctx):
    with pytest.raises(hpcdist.InvalidArgumentError, match=r"at least 3 ranks.*has 1"):
        DaskCluster(ctx=ctx).start()
