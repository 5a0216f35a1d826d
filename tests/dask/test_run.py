"""hpcdist.dask.run at 3 and 4 ranks on loopback: real scheduler, workers and client over TLS.

Each test is one Dask phase of the job's ranks; results are compared on every rank.
"""
import numpy as np
import pytest

pytest.importorskip("distributed", reason="the dask extra (distributed) is not installed")

import hpcdist  # noqa: E402
from hpcdist.dask import DaskPhaseError, run  # noqa: E402
from tests.helpers import all_ranks, expect_error  # noqa: E402

phase = pytest.mark.mpi(min_size=3)


def _square(x):
    return x * x


def _prepare(client, n):
    """map, submit, scatter, gather and a Dask array reduction, as a data-preparation phase."""
    import dask.array as da

    squares = client.gather(client.map(_square, range(n)))
    total = client.submit(sum, squares).result()
    [scattered] = client.scatter([np.arange(n, dtype=np.float64)], broadcast=True)
    doubled = client.submit(np.multiply, scattered, 2).result()
    array = da.arange(n * 100, chunks=n * 10, dtype=np.float64).reshape(n * 10, 10)
    column_sums = (array.sum(axis=0) / n).compute()
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return {"squares": squares, "total": total, "doubled": doubled, "columns": column_sums,
            "address": client.scheduler.address, "worker_ranks": sorted(
                int(worker["name"]) for worker in workers.values())}


@phase
def test_client_work_runs_on_the_workers_and_its_result_reaches_every_rank(ctx):
    n = 12
    result = run(_prepare, n, ctx=ctx)
    expected = np.arange(n * 100, dtype=np.float64).reshape(n * 10, 10).sum(axis=0) / n
    with all_ranks("result of the phase"):
        assert result["squares"] == [i * i for i in range(n)]
        assert result["total"] == sum(i * i for i in range(n))
        np.testing.assert_array_equal(result["doubled"], 2 * np.arange(n))
        np.testing.assert_allclose(result["columns"], expected)
        assert result["address"].startswith("tls://127.0.0.1:"), result["address"]
        assert result["worker_ranks"] == list(range(2, ctx.size))


def _who_am_i(client, *args, **kwargs):
    nthreads = sorted(worker["nthreads"] for worker in
                      client.scheduler_info(n_workers=-1)["workers"].values())
    return hpcdist.get_rank(), args, kwargs, nthreads


@phase
def test_options_stay_with_run_and_the_rest_goes_to_func(ctx):
    last = ctx.size - 1
    rank, args, kwargs, nthreads = run(_who_am_i, 1, "two", ctx=ctx, client_rank=last,
                                       threads_per_worker=2, memory_limit="8GiB",
                                       interface="lo", verbose=False, dashboard=False,
                                       color="red")
    with all_ranks("func's arguments"):
        assert rank == last
        assert args == (1, "two") and kwargs == {"color": "red"}
        assert nthreads == [2] * (ctx.size - 2)


def _sum_on_workers(client, values):
    return client.submit(sum, values).result()


@phase
def test_two_phases_with_collectives_between_and_after(ctx):
    import dask

    before = hpcdist.allreduce(np.full(3, ctx.rank, dtype=np.int64), ctx=ctx)
    first = run(_sum_on_workers, [1, 2, 3], ctx=ctx)
    between = hpcdist.allgather(np.array([ctx.rank]), ctx=ctx)
    second = run(_sum_on_workers, list(range(10)), ctx=ctx, client_rank=ctx.size - 1)
    after = hpcdist.broadcast(np.arange(4.0) if ctx.rank == 0 else None, root=0, ctx=ctx)
    with all_ranks("collectives around two phases"):
        np.testing.assert_array_equal(before, np.full(3, sum(range(ctx.size))))
        assert (first, second) == (6, 45)
        np.testing.assert_array_equal(between, np.arange(ctx.size))
        np.testing.assert_array_equal(after, np.arange(4.0))
        # the client is gone: Dask computes locally again after the phase
        assert dask.config.get("scheduler", None) in (None, "threads", "sync")


def _fails(client):
    client.submit(_square, 3).result()
    raise ValueError("no data for month 13")


@phase
def test_an_exception_in_func_is_raised_on_every_rank(ctx):
    error = expect_error(DaskPhaseError, run, _fails, ctx=ctx,
                         match=[r"client rank 1", r"ValueError: no data for month 13",
                                r"traceback on rank 1", r"in _fails"])
    with all_ranks("the error's attributes"):
        assert isinstance(error, hpcdist.HpcdistError) and isinstance(error, RuntimeError)
        assert (error.remote_rank, error.remote_type, error.remote_message) == (
            1, "ValueError", "no data for month 13")
        assert "raise ValueError" in error.remote_traceback
    assert hpcdist.allreduce(1, ctx=ctx) == ctx.size  # the job goes on


def _strangers(client):
    """Try the phase's scheduler without its certificate and with another authority's."""
    import socket
    import ssl

    from distributed import Client
    from distributed.security import Security

    address = client.scheduler.address
    outcomes = {}
    host, port = address.removeprefix("tls://").rsplit(":", 1)
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:  # TLS, but no client certificate
        with socket.create_connection((host, int(port)), timeout=5) as raw:
            with context.wrap_socket(raw) as tls:
                tls.sendall(b"\x00" * 8)
                answer = tls.recv(8)
                outcomes["no certificate"] = f"answered {answer!r}" if answer else "refused: EOF"
    except (OSError, ssl.SSLError) as error:
        outcomes["no certificate"] = f"refused: {type(error).__name__}"
    for name, address_used, security in [
            ("foreign certificate", address, Security.temporary()),
            ("plain tcp", address.replace("tls://", "tcp://"), None)]:
        try:
            Client(address_used, security=security, timeout=3).close()
            outcomes[name] = "connected"
        except Exception as error:  # noqa: BLE001 - any refusal will do
            outcomes[name] = f"refused: {type(error).__name__}"
    with Client(address, security=client.security, timeout=10) as insider:
        outcomes["the phase's certificate"] = insider.submit(_square, 4).result()
    return outcomes


@phase
def test_a_client_without_the_phase_certificate_or_with_a_foreign_one_is_refused(ctx):
    outcomes = run(_strangers, ctx=ctx)
    with all_ranks(f"strangers: {outcomes}"):
        assert outcomes["no certificate"].startswith("refused")
        assert outcomes["foreign certificate"].startswith("refused")
        assert outcomes["plain tcp"].startswith("refused")
        assert outcomes["the phase's certificate"] == 16


def _nothing(client):
    return None


_VALUE, _TYPE = hpcdist.InvalidArgumentError, hpcdist.InvalidArgumentTypeError


@phase
@pytest.mark.parametrize("options, error, match", [
    ({"client_rank": 0}, _VALUE, r"run: client_rank=0 should be in \[1, \d\] \(the schedul"),
    ({"client_rank": 99}, _VALUE, r"run: client_rank=99 should be in"),
    ({"client_rank": 1.0}, _TYPE, r"run: client_rank=1.0 should be an integer"),
    ({"threads_per_worker": 0}, _VALUE, r"run: threads_per_worker=0 should be >= 1"),
    ({"threads_per_worker": "2"}, _TYPE, r"run: threads_per_worker='2' should be an int"),
    ({"memory_limit": "lots"}, _VALUE, r"memory_limit='lots'"),
    ({"memory_limit": 1.5}, _VALUE, r"memory_limit=1.5"),
    ({"interface": 3}, _TYPE, r"interface=3"),
    ({"interface": "nosuchif9"}, _VALUE, r"'nosuchif9'.*interfaces"),
])
def test_bad_options_are_refused_on_every_rank(ctx, options, error, match):
    expect_error(error, run, _nothing, ctx=ctx, match=match, **options)
    assert hpcdist.allreduce(1, ctx=ctx) == ctx.size


@phase
def test_options_that_differ_between_ranks_are_refused(ctx):
    expect_error(hpcdist.ConfigMismatchError, run, _nothing, ctx=ctx,
                 threads_per_worker=1 + ctx.rank % 2,
                 match=r"threads_per_worker differs across ranks: "
                       r"ranks? 0\S* ha\w+ 1, ranks? 1\S* ha\w+ 2")


@pytest.mark.mpi(min_size=2)
def test_two_ranks_are_too_few(ctx):
    pair = ctx.group([0, 1])
    if pair is not None:
        with pytest.raises(hpcdist.InvalidArgumentError, match=r"at least 3 ranks.*has 2"):
            run(_nothing, ctx=pair)
    ctx.barrier()


def test_one_rank_is_too_few(ctx):
    with pytest.raises(hpcdist.InvalidArgumentError, match=r"at least 3 ranks.*has 1"):
        run(_nothing, ctx=ctx)


def test_func_must_be_callable(ctx):
    with pytest.raises(hpcdist.InvalidArgumentTypeError, match=r"func=42 should be a callable"):
        run(42, ctx=ctx)
