"""ctx.stats() / ctx.reset_stats() and hpcdist.timeline()."""
import json
from pathlib import Path

import numpy as np
import pytest
from mpi4py import MPI

import hpcdist
from tests.helpers import all_ranks

STAT_KEYS = {"calls", "bytes_sent", "bytes_received", "seconds"}


def _entry(stats, name):
    return stats.get(name, {"calls": 0})


# ---------------------------------------------------------------------- stats
@pytest.mark.mpi
@pytest.mark.parametrize("n", [1000, 3])
def test_stats_allreduce_calls_and_bytes(ctx, n):
    ctx.reset_stats()
    hpcdist.allreduce(np.ones(n, dtype=np.float64), "sum")
    first = ctx.stats()
    hpcdist.allreduce(np.ones(n, dtype=np.float64), "max")
    second = ctx.stats()
    with all_ranks("stats"):
        assert isinstance(first, dict)
        a = first["allreduce"]
        assert STAT_KEYS <= set(a), sorted(a)
        assert a["calls"] == 1, a
        assert a["bytes_sent"] == 8 * n, a
        assert a["bytes_received"] >= 0, a
        assert a["seconds"] >= 0.0, a
        b = second["allreduce"]
        assert b["calls"] == 2, b
        assert b["bytes_sent"] == 16 * n, b
        assert b["seconds"] >= a["seconds"], (a, b)


@pytest.mark.mpi
def test_stats_float32_bytes_and_reset(ctx):
    ctx.reset_stats()
    hpcdist.allreduce(np.ones((10, 10), dtype=np.float32), "sum")
    before = ctx.stats()
    ctx.reset_stats()
    after = ctx.stats()
    with all_ranks():
        assert before["allreduce"]["bytes_sent"] == 400
        assert _entry(after, "allreduce")["calls"] == 0, after


@pytest.mark.mpi
def test_stats_one_entry_per_operation(ctx):
    size, rank = ctx.size, ctx.rank
    ctx.reset_stats()
    hpcdist.broadcast(np.ones(4) if rank == 0 else None, root=0)
    hpcdist.reduce(np.ones(4), "sum", root=0)
    hpcdist.allgather(np.ones(2))
    hpcdist.gather(np.ones(2), root=0)
    hpcdist.scatter(np.ones(size) if rank == 0 else None, root=0)
    hpcdist.reduce_scatter(np.ones(size), "sum")
    hpcdist.alltoall(np.ones(size))
    hpcdist.allreduce(np.ones(4), "sum")
    st = ctx.stats()
    with all_ranks():
        for name in ("broadcast", "reduce", "allgather", "gather", "scatter",
                     "reduce_scatter", "alltoall", "allreduce"):
            assert name in st, (name, sorted(st))
            assert st[name]["calls"] == 1, (name, st[name])
            assert STAT_KEYS <= set(st[name]), (name, st[name])


@pytest.mark.mpi
def test_stats_are_per_context(ctx):
    sub = ctx.split(0)
    ctx.reset_stats()
    sub.reset_stats()
    sub.allreduce(np.ones(5), "sum")
    with all_ranks():
        assert sub.stats()["allreduce"]["calls"] == 1
        assert _entry(ctx.stats(), "allreduce")["calls"] == 0


def test_stats_serial(ctx):
    ctx.reset_stats()
    hpcdist.allreduce(np.ones(7), "sum")
    st = ctx.stats()
    assert STAT_KEYS <= set(st["allreduce"])
    assert st["allreduce"]["calls"] == 1
    ctx.reset_stats()
    assert _entry(ctx.stats(), "allreduce")["calls"] == 0


# ------------------------------------------------------------------- timeline
def _load(path):
    with open(path) as fh:
        data = json.load(fh)
    assert isinstance(data, dict) and isinstance(data.get("traceEvents"), list), str(data)[:300]
    return data["traceEvents"]


def _check_events(events, size, names):
    complete = [e for e in events if e.get("ph") == "X"]
    assert complete, f"no complete ('ph': 'X') events in {events[:5]}"
    for e in complete:
        assert isinstance(e.get("name"), str), e
        assert isinstance(e.get("ts"), (int, float)), e
        assert isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, e
        assert isinstance(e.get("pid"), int), e
    for name in names:
        pids = {e["pid"] for e in complete if e["name"] == name}
        assert pids == set(range(size)), f"{name}: events from ranks {sorted(pids)}"
    for r in range(size):
        starts = [min(e["ts"] for e in complete if e["pid"] == r and e["name"] == name)
                  for name in names]
        assert starts == sorted(starts), f"rank {r}: events out of order {starts}"
    return complete


@pytest.mark.mpi
@pytest.mark.parametrize("as_path", [False, True], ids=["str", "pathlib"])
def test_timeline_all_ranks(ctx, mpi_tmp_path, as_path):
    path = mpi_tmp_path / "trace.json"
    hpcdist.alltoall(np.ones(ctx.size))  # outside the timeline: not recorded
    with hpcdist.timeline(path if as_path else str(path)):
        hpcdist.allreduce(np.ones(100), "sum")
        hpcdist.allreduce(np.ones(100), "sum")
        hpcdist.broadcast(np.ones(10) if ctx.rank == 0 else None, root=0)
        hpcdist.allgather(np.ones(ctx.rank + 1))
    hpcdist.alltoall(np.ones(ctx.size))  # after: not recorded
    MPI.COMM_WORLD.Barrier()
    with all_ranks("timeline file"):
        assert Path(path).exists(), f"{path} was not written"
        events = _load(path)
        complete = _check_events(events, ctx.size, ["allreduce", "broadcast", "allgather"])
        for r in range(ctx.size):
            n = sum(1 for e in complete if e["pid"] == r and e["name"] == "allreduce")
            assert n >= 2, f"rank {r}: {n} allreduce events"
        assert not [e for e in complete if e["name"] == "alltoall"], "recorded outside"
    MPI.COMM_WORLD.Barrier()


def test_timeline_serial(ctx, tmp_path):
    path = tmp_path / "trace.json"
    with hpcdist.timeline(str(path)):
        hpcdist.allreduce(np.ones(10), "sum")
        hpcdist.broadcast(np.ones(3), root=0)
    events = _load(path)
    _check_events(events, 1, ["allreduce", "broadcast"])


def _check_bad_paths_refused_before_the_block(folder):
    """Each unusable path raises on every rank on entry: the block never runs."""
    ran = []
    for path, error, match in [
            (folder / "missing" / "t.json", hpcdist.DataFileNotFoundError,
             r"timeline: no directory '.*missing' to write '.*missing/t\.json' in; create it "
             r"first"),
            (folder, hpcdist.DataFileError, r"timeline: '.*' cannot be written \(a directory, "
                                            r"or permission denied\); choose a writable path"),
            (123, hpcdist.InvalidArgumentTypeError, r"path=123 should be a str or path-like")]:
        with all_ranks(str(path)), pytest.raises(error, match=match):
            with hpcdist.timeline(path):
                ran.append(path)
    assert ran == []


def test_timeline_refuses_a_bad_path_on_entry(ctx, tmp_path):
    _check_bad_paths_refused_before_the_block(tmp_path)


@pytest.mark.mpi(min_size=2)
def test_timeline_refuses_a_bad_path_on_entry_on_every_rank(ctx, mpi_tmp_path):
    _check_bad_paths_refused_before_the_block(mpi_tmp_path)
