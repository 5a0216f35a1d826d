"""hpcdist bench sharded: its parts run and report what they say (small settings)."""
import pytest

import hpcdist
from hpcdist.bench import sharded


def test_state_bytes_shrink_stage_by_stage():
    ctx = hpcdist.init()
    result = sharded.state_bytes(ctx, ctx.comm)
    assert set(result) == {"ddp", "1", "2", "3"}
    for stage in ("1", "2", "3"):
        assert result[stage]["ratio_to_ddp"] == pytest.approx(
            result[stage]["total"] / result["ddp"]["total"])
    if ctx.size == 1:  # nothing to share: the same bytes as DDP
        assert result["3"]["total"] == result["ddp"]["total"]


def test_state_bytes_in_mixed_precision_count_the_masters():
    ctx = hpcdist.init()
    result = sharded.state_bytes(ctx, ctx.comm, sharded._mixed_precision_case)
    float32 = sharded.state_bytes(ctx, ctx.comm)
    # float16 weights and gradients, float32 masters and unscaled gradients, Adam's moments
    assert result["ddp"]["total"] == float32["ddp"]["total"] * 20 // 16
    if ctx.size == 1:  # nothing to share: the same bytes as DDP
        assert result["3"]["total"] == result["ddp"]["total"]


def test_recomputation_reports_memory_and_time():
    result = sharded.recomputation(repetitions=1, rows=64)
    assert result["forward_memory_ratio"] < 0.5
    assert result["step_time_ratio"] > 0
    assert len(result["plain"]["step_seconds"]) == 1


def test_ratios_name_the_pairs():
    speed = {"hpcdist.nn DDP": {"samples_per_second": 100.0},
             "hpcdist.nn stage 2": {"samples_per_second": 95.0},
             "torch ZeroRedundancyOptimizer (DDP, gloo)": {"samples_per_second": 50.0},
             "hpcdist.torch ShardedOptimizer stage 1": {"samples_per_second": 60.0},
             "errors": {"torch FSDP (gloo)": "RuntimeError: ..."}}
    assert sharded._ratios(speed) == {
        "hpcdist.nn stage 2 / DDP": 0.95,
        "ShardedOptimizer stage 1 / ZeroRedundancyOptimizer": 1.2}


def test_needs_two_ranks(capsys):
    if hpcdist.init().size > 1:
        pytest.skip("the refusal is for one rank")
    assert sharded.main([]) == 2
    assert "needs 2 ranks" in capsys.readouterr().err
