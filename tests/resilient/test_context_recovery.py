"""Recovery keeps the same Context object: communicators, rank, size, split children,
the communication thread; what cannot follow a shrink says so."""
from tests.resilient.ulfm import lines_with, needs_ulfm, run_ulfm_job

_JOB = """
from hpcdist.comm.recovery import shrink_context

ctx = hpcdist.init(fault_tolerance="shrink")
world_rank = ctx.rank
halves = ctx.split(ctx.rank % 2, key=-ctx.rank)    # reversed order inside each half
evens_only = ctx.split(0 if ctx.rank % 2 == 0 else None)
pair = ctx.group([0, 1]) if ctx.rank in (0, 1) else None
thread = ctx.communication_thread()
lose_rank(ctx, 1)
same = hpcdist.get_context()
lost = shrink_context(ctx)
assert same is ctx and hpcdist.get_context() is ctx
total = hpcdist.allreduce(np.array([world_rank]))[0]
half_members = halves.allgather(np.array([world_rank])).tolist()
even_members = (evens_only.allgather(np.array([world_rank])).tolist()
                if evens_only is not None else None)
on_thread = thread.submit(hpcdist.allreduce, np.ones(1), ctx=thread.ctx).result()[0]
try:
    pair.barrier() if pair is not None else None
    group_says = "fine" if pair is not None else "none"
except hpcdist.InvalidStateError as error:
    group_says = "refused: " + str(error).split(":")[0]
print(f"OUT world {world_rank} rank {ctx.rank} size {ctx.size} lost {list(lost)} "
      f"total {total} halves {half_members} evens {even_members} thread {on_thread} "
      f"group {group_says}", flush=True)
"""


@needs_ulfm
def test_context_recovered_in_place(tmp_path):
    rc, seconds, output = run_ulfm_job(_JOB, tmp_path, n=4, timeout=120)
    lines = sorted(lines_with(output, "OUT "))
    assert len(lines) == 3, output
    by_world = {int(line.split()[2]): line for line in lines}
    assert sorted(by_world) == [0, 2, 3], output
    for world, line in by_world.items():
        new_rank = [0, 2, 3].index(world)
        assert f"rank {new_rank} size 3 lost [1] total 5 " in line, line
        # halves: the same colour and key as before, among the survivors
        expected_half = [2, 0] if world % 2 == 0 else [3]
        assert f"halves {expected_half}" in line, line
        assert f"evens {[0, 2] if world % 2 == 0 else None}" in line, line
        assert "thread 3.0" in line, line
    assert "group refused: barrier" in by_world[0], by_world[0]
    assert "group none" in by_world[2], by_world[2]
