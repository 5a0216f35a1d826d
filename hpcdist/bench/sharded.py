"""``hpcdist bench sharded``: what sharding and activation recomputation save, and cost.

Run under mpiexec at 4 ranks (the speed part uses ranks 0 and 1, the
recomputation part rank 0; the other ranks wait, sleeping)::

    OMP_NUM_THREADS=1 mpiexec -n 4 python -m hpcdist.bench.sharded [--quick]

Parts of the report:

``state_bytes``
    Bytes of parameters + gradients + optimizer state a rank holds after
    ``step()`` (Adam, float32, the 784-1024-1024-10 benchmark MLP):
    :meth:`ShardedDataParallel.memory_stats` per stage beside DDP's (its
    parameters, gradient buckets and Adam moments), the largest rank's, and
    the ratios to DDP.
``state_bytes_mixed_precision``
    The same in float16 with :class:`hpcdist.nn.amp.MixedPrecision` (float32
    masters, counted as optimizer state, and float32 unscaled gradients,
    counted as gradients): under DDP every rank holds all of them, under
    sharding each its rows.
``peak_rss``
    Peak resident memory per rank (the kernel's high-water mark, reset before
    each case) of building and training an MLP of about 64 M float32
    parameters with Adam for two steps, under DDP and each stage, above the
    resident size before the model was built: overall, and in the training
    steps alone (every rank builds the whole model before wrapping it, so
    building sets the overall peak of the higher stages).
``recomputation``
    An 8-block MLP (each block Linear 256->1024, Tanh, Linear 1024->256, Tanh),
    with every block in :class:`hpcdist.nn.Checkpoint` or not: the peak of
    the memory NumPy allocates during a forward pass (tracemalloc), and the
    median time of a training step (forward, backward, SGD), interleaved.
``speed``
    Samples per second at 2 ranks on the benchmark MLP (global batch 256,
    Adam), every case's steps interleaved per repetition: DDP and stages 1-3
    for hpcdist.nn; for the same torch model hpcdist.torch.ShardedOptimizer
    (stages 1, 2) beside torch's ZeroRedundancyOptimizer under torch DDP over
    gloo, and FullyShardedModule beside torch's FSDP over gloo (where torch's
    FSDP does not run on gloo and CPU, the report gives its error).
"""

import functools
import gc
import statistics
import sys
import time
import tracemalloc

import numpy as np

from .. import nn
from ..comm import init
from ..comm.mpi import MPI
from ..exceptions import InvalidStateError
from ..nn.amp import MixedPrecision
from ..parallel import DistributedDataParallel, ShardedDataParallel
from .common import (
    MIB,
    benchmark_parser,
    idle_until_all_arrive,
    init_gloo,
    load_average,
    machine_info,
    resident_peak,
    write_report,
)

__all__ = ["main"]

LAYER_SIZES = (784, 1024, 1024, 10)
BIG_LAYER_SIZES = (2048, 4096, 4096, 4096, 4096, 1024)   # 62.9 M parameters
BLOCKS, BLOCK_WIDTH, BLOCK_HIDDEN = 8, 256, 1024
STAGES = (1, 2, 3)


def _parse_args(argv):
    parser = benchmark_parser("sharded", __doc__.split("\n\n")[0],
                              quick="fewer repetitions and steps (about a minute)", plot=False)
    parser.add_argument("--repetitions", type=int, default=None,
                        help="timed repetitions per case (default 7, 3 with --quick)")
    parser.add_argument("--no-torch", action="store_true", help="skip the torch baselines")
    args = parser.parse_args(argv)
    if args.repetitions is None:
        args.repetitions = 3 if args.quick else 7
    return args


def _mlp(sizes, seed=0):
    layers = []
    for index, (n_in, n_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(n_in, n_out, dtype=np.float32, random_state=seed + index))
        if index < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _wrap(case, model, optimizer, ctx):
    """DDP, or ShardedDataParallel at stage ``case`` with ``optimizer`` (or MixedPrecision)."""
    if case == "ddp":
        return DistributedDataParallel(model, ctx=ctx)
    return ShardedDataParallel(model, optimizer, stage=case, ctx=ctx)


def _train_step(wrapped, optimizer, criterion, x, y):
    wrapped.zero_grad() if hasattr(wrapped, "step") else optimizer.zero_grad()
    criterion(wrapped(x), y)
    wrapped.backward(criterion.backward())
    wrapped.step() if hasattr(wrapped, "step") else optimizer.step()


def _ddp_state_bytes(ddp, optimizer):
    parameters = sum(p.data.nbytes for p in ddp.module.parameters())
    gradients = sum(bucket.flat.nbytes for bucket in ddp.buckets)
    state = sum(v.nbytes for entry in optimizer.state.values() for v in entry.values()
                if hasattr(v, "nbytes"))
    return {"parameters": parameters, "gradients": gradients, "optimizer_state": state}


def _batch(rows, sizes, seed):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((rows, sizes[0])).astype(np.float32),
            rng.integers(0, sizes[-1], rows))


# -- the parts --------------------------------------------------------------------------------
def _float32_case(case, ctx, criterion, x, y):
    model = _mlp(LAYER_SIZES)
    optimizer = nn.optim.Adam(model.parameters(), lr=1e-3)
    wrapped = _wrap(case, model, optimizer, ctx)
    _train_step(wrapped, optimizer, criterion, x, y)
    return _ddp_state_bytes(wrapped, optimizer) if case == "ddp" else wrapped.memory_stats()


def _mixed_precision_case(case, ctx, criterion, x, y):
    model = _mlp(LAYER_SIZES)
    amp = MixedPrecision(model, functools.partial(nn.optim.Adam, lr=1e-3), init_scale=2.0 ** 8,
                         ctx=ctx if case == "ddp" else None)
    wrapped = _wrap(case, model, amp, ctx)
    amp.zero_grad()
    criterion(wrapped(x.astype(np.float16)), y)
    wrapped.backward(amp.scale_loss_grad(criterion.backward()))
    if not amp.step():
        raise InvalidStateError("bench sharded: the mixed-precision step overflowed, so Adam holds "
                           "no state to count; lower init_scale")
    if case != "ddp":
        return wrapped.memory_stats()
    stats = _ddp_state_bytes(wrapped, amp.optimizer)  # its state: the moments
    stats["gradients"] += sum(buffer.nbytes for buffer in amp._grad_buffers
                              if buffer is not None)
    stats["optimizer_state"] += sum(master.data.nbytes for master in amp.master_params)
    return stats


def state_bytes(ctx, ctrl, case_stats=_float32_case):
    """Per case, the largest rank's bytes of model state after a step, and the ratio to DDP's."""
    criterion = nn.CrossEntropyLoss()
    x, y = _batch(32, LAYER_SIZES, ctx.rank)
    result = {}
    for case in ("ddp",) + STAGES:
        stats = case_stats(case, ctx, criterion, x, y)
        stats["total"] = sum(stats.values())
        per_rank = ctrl.allgather(stats)
        result[str(case)] = max(per_rank, key=lambda s: s["total"])
    for case in STAGES:
        result[str(case)]["ratio_to_ddp"] = (result[str(case)]["total"]
                                             / result["ddp"]["total"])
    return result


def peak_rss(ctx, ctrl, steps):
    """Peak resident MiB per rank of building and training the ~64 M-parameter MLP."""
    criterion = nn.CrossEntropyLoss()
    x, y = _batch(8, BIG_LAYER_SIZES, ctx.rank)
    result = {}
    for case in ("ddp",) + STAGES:
        gc.collect()
        idle_until_all_arrive(ctrl)
        with resident_peak() as building:
            model = _mlp(BIG_LAYER_SIZES)
            optimizer = nn.optim.Adam(model.parameters(), lr=1e-4)
            wrapped = _wrap(case, model, optimizer, ctx)
        with resident_peak() as training:
            for _ in range(steps):
                _train_step(wrapped, optimizer, criterion, x, y)
        del wrapped, model, optimizer
        gc.collect()
        start = building["peak_mib"] - building["added_mib"] if building["peak_mib"] else None
        # above the resident size before the model was built: building it (on every rank,
        # whole, before wrapping), and training it
        mine = {"building_mib": building["added_mib"],
                "training_mib": None if start is None else training["peak_mib"] - start}
        per_rank = ctrl.allgather(mine)
        result[str(case)] = {
            "per_rank": per_rank,
            "max_added_mib": max(max(r["building_mib"] or 0, r["training_mib"] or 0)
                                 for r in per_rank),
            "max_training_mib": max(r["training_mib"] or 0 for r in per_rank)}
    for case in STAGES:
        for key in ("max_added_mib", "max_training_mib"):
            result[str(case)][f"{key.removeprefix('max_')}_ratio_to_ddp"] = (
                result[str(case)][key] / result["ddp"][key])
    result["parameters"] = sum(n_in * n_out + n_out for n_in, n_out
                               in zip(BIG_LAYER_SIZES[:-1], BIG_LAYER_SIZES[1:]))
    return result


def _blocks(recompute):
    layers = []
    for index in range(BLOCKS):
        block = nn.Sequential(
            nn.Linear(BLOCK_WIDTH, BLOCK_HIDDEN, dtype=np.float32, random_state=2 * index),
            nn.Tanh(),
            nn.Linear(BLOCK_HIDDEN, BLOCK_WIDTH, dtype=np.float32, random_state=2 * index + 1),
            nn.Tanh())
        layers.append(nn.Checkpoint(block) if recompute else block)
    return nn.Sequential(*layers)


def recomputation(repetitions, rows=512):
    """Forward peak memory and step time with and without nn.Checkpoint (this rank alone)."""
    x = np.random.default_rng(0).standard_normal((rows, BLOCK_WIDTH)).astype(np.float32)
    models = {name: _blocks(name == "recomputed") for name in ("plain", "recomputed")}
    optimizers = {name: nn.optim.SGD(m.parameters(), lr=1e-3) for name, m in models.items()}
    result = {}
    for name, model in models.items():
        model(x)  # warm-up
        tracemalloc.start()
        model(x)
        result[name] = {"forward_peak_mib": tracemalloc.get_traced_memory()[1] / MIB}
        tracemalloc.stop()
        result[name]["step_seconds"] = []
    for _ in range(repetitions):
        for name, model in models.items():
            start = time.perf_counter()
            optimizers[name].zero_grad()
            out = model(x)
            model.backward(np.ones_like(out) / out.size)
            optimizers[name].step()
            result[name]["step_seconds"].append(time.perf_counter() - start)
    for name in models:
        result[name]["median_step_seconds"] = statistics.median(result[name]["step_seconds"])
    result["forward_memory_ratio"] = (result["recomputed"]["forward_peak_mib"]
                                      / result["plain"]["forward_peak_mib"])
    result["step_time_ratio"] = (result["recomputed"]["median_step_seconds"]
                                 / result["plain"]["median_step_seconds"])
    return result


def _interleaved(cases, repetitions, steps, ctrl):
    """Median seconds per step of each case, every repetition running each case's steps."""
    for run in cases.values():
        run()  # warm-up (and the first allocations)
    times = {name: [] for name in cases}
    for _ in range(repetitions):
        for name, run in cases.items():
            ctrl.Barrier()
            start = time.perf_counter()
            for _ in range(steps):
                run()
            elapsed = ctrl.allreduce(time.perf_counter() - start, op=MPI.MAX)
            times[name].append(elapsed / steps)
    return {name: statistics.median(values) for name, values in times.items()}, times


def speed_numpy(ctx, ctrl, repetitions, steps, batch=256):
    criterion = nn.CrossEntropyLoss()
    x, y = _batch(batch // ctx.size, LAYER_SIZES, ctx.rank)
    cases = {}
    for case in ("ddp",) + STAGES:
        model = _mlp(LAYER_SIZES)
        optimizer = nn.optim.Adam(model.parameters(), lr=1e-4)
        wrapped = _wrap(case, model, optimizer, ctx)
        cases[f"hpcdist.nn {'DDP' if case == 'ddp' else f'stage {case}'}"] = (
            lambda w=wrapped, o=optimizer: _train_step(w, o, criterion, x, y))
    medians, times = _interleaved(cases, repetitions, steps, ctrl)
    return {name: {"samples_per_second": batch / medians[name], "step_seconds": times[name]}
            for name in cases}


def speed_torch(ctx, ctrl, repetitions, steps, batch=256):
    """hpcdist.torch's sharding beside torch's own, over gloo, on the same torch model."""
    torch, dist = init_gloo(ctrl)
    if torch is None:
        return {"skipped": "torch.distributed with gloo is not importable"}
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as TorchDDP

    import hpcdist.torch as hvd

    torch.set_num_threads(1)
    rng = np.random.default_rng(ctx.rank)
    x = torch.from_numpy(rng.standard_normal((batch // ctx.size, LAYER_SIZES[0]),
                                             dtype=np.float32))
    y = torch.from_numpy(rng.integers(0, LAYER_SIZES[-1], batch // ctx.size))

    def model():
        torch.manual_seed(0)
        layers = []
        for index, (n_in, n_out) in enumerate(zip(LAYER_SIZES[:-1], LAYER_SIZES[1:])):
            layers.append(torch.nn.Linear(n_in, n_out))
            if index < len(LAYER_SIZES) - 2:
                layers.append(torch.nn.ReLU())
        return torch.nn.Sequential(*layers)

    def stepper(module, optimizer):
        def run():
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(module(x), y).backward()
            optimizer.step()
        return run

    cases, errors = {}, {}
    for stage in (1, 2):
        m = model()
        cases[f"hpcdist.torch ShardedOptimizer stage {stage}"] = stepper(m, hvd.ShardedOptimizer(
            torch.optim.Adam(m.parameters(), lr=1e-4), m.named_parameters(), stage=stage,
            ctx=ctx))
    m = TorchDDP(model())
    cases["torch ZeroRedundancyOptimizer (DDP, gloo)"] = stepper(m, ZeroRedundancyOptimizer(
        m.parameters(), optimizer_class=torch.optim.Adam, lr=1e-4))
    fsm = hvd.FullyShardedModule(model(), ctx=ctx)
    cases["hpcdist.torch FullyShardedModule"] = stepper(fsm, torch.optim.Adam(fsm.parameters(),
                                                                              lr=1e-4))
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel

        fsdp = FullyShardedDataParallel(model(), device_id=torch.device("cpu"))
        run = stepper(fsdp, torch.optim.Adam(fsdp.parameters(), lr=1e-4))
        run()
        cases["torch FSDP (gloo)"] = run
    except Exception as exc:  # noqa: BLE001 - reported: what torch says on this machine
        errors["torch FSDP (gloo)"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    agreed = ctrl.allgather(sorted(cases))
    for name in list(cases):
        if not all(name in names for names in agreed):
            del cases[name]
    medians, times = _interleaved(cases, repetitions, steps, ctrl)
    result = {name: {"samples_per_second": batch / medians[name], "step_seconds": times[name]}
              for name in cases}
    result["errors"] = errors
    dist.destroy_process_group()
    return result


def _ratios(speed):
    def sps(name):
        entry = speed.get(name)
        return entry["samples_per_second"] if isinstance(entry, dict) and \
            "samples_per_second" in entry else None
    ratios = {}
    ddp = sps("hpcdist.nn DDP")
    for stage in STAGES:
        value = sps(f"hpcdist.nn stage {stage}")
        if ddp and value:
            ratios[f"hpcdist.nn stage {stage} / DDP"] = value / ddp
    zero = sps("torch ZeroRedundancyOptimizer (DDP, gloo)")
    for stage in (1, 2):
        value = sps(f"hpcdist.torch ShardedOptimizer stage {stage}")
        if zero and value:
            ratios[f"ShardedOptimizer stage {stage} / ZeroRedundancyOptimizer"] = value / zero
    fsdp, ours = sps("torch FSDP (gloo)"), sps("hpcdist.torch FullyShardedModule")
    if fsdp and ours:
        ratios["FullyShardedModule / FSDP"] = ours / fsdp
    return ratios


def main(argv=None):
    """Run the benchmark under ``mpiexec -n 4`` (2 ranks at least); rank 0 writes the report."""
    args = _parse_args(sys.argv[1:] if argv is None else argv)
    ctx = init()
    if ctx.size < 2:
        print("hpcdist bench sharded needs 2 ranks or more (4 for the memory figures): "
              "mpiexec -n 4 python -m hpcdist.bench.sharded", file=sys.stderr, flush=True)
        return 2
    ctrl = ctx.comm.Dup()
    load_before = load_average()
    steps = 1 if args.quick else 2
    report = {"benchmark": "sharded", "ranks": ctx.size}
    report["state_bytes"] = state_bytes(ctx, ctrl)
    _say(ctx, "state bytes", report["state_bytes"])
    report["state_bytes_mixed_precision"] = state_bytes(ctx, ctrl, _mixed_precision_case)
    _say(ctx, "state bytes, mixed precision", report["state_bytes_mixed_precision"])
    report["peak_rss"] = peak_rss(ctx, ctrl, steps=2)
    _say(ctx, "peak RSS", report["peak_rss"])
    if ctx.rank == 0:
        report["recomputation"] = recomputation(args.repetitions)
        _say(ctx, "recomputation", report["recomputation"])
    idle_until_all_arrive(ctrl)
    pair = ctx.split(0 if ctx.rank < 2 else None)
    speed = {}
    if pair is not None:
        pair_ctrl = pair.comm.Dup()
        speed.update(speed_numpy(pair, pair_ctrl, args.repetitions, 2 * steps))
        if not args.no_torch:
            speed.update(speed_torch(pair, pair_ctrl, args.repetitions, 2 * steps))
        pair_ctrl.Free()
    idle_until_all_arrive(ctrl)
    machine = machine_info(ctrl, load_average_before=load_before,
                           load_average_after=load_average())
    ctrl.Free()
    if ctx.rank == 0:
        report["speed_2_ranks"] = speed
        report["summary"] = {
            "state_bytes_ratio_to_ddp": {f"stage {s}": report["state_bytes"][str(s)][
                "ratio_to_ddp"] for s in STAGES},
            "state_bytes_mixed_precision_ratio_to_ddp": {
                f"stage {s}": report["state_bytes_mixed_precision"][str(s)]["ratio_to_ddp"]
                for s in STAGES},
            "peak_rss_ratio_to_ddp": {f"stage {s}": report["peak_rss"][str(s)][
                "added_mib_ratio_to_ddp"] for s in STAGES},
            "peak_rss_in_training_ratio_to_ddp": {f"stage {s}": report["peak_rss"][str(s)][
                "training_mib_ratio_to_ddp"] for s in STAGES},
            "recomputation_forward_memory_ratio": report["recomputation"][
                "forward_memory_ratio"],
            "recomputation_step_time_ratio": report["recomputation"]["step_time_ratio"],
            "speed_ratios_2_ranks": _ratios(speed),
            "torch_errors": speed.get("errors", {}),
        }
        for key, value in report["summary"].items():
            print(f"{key}: {value}", flush=True)
        report["machine"] = machine
        report["settings"] = {"quick": args.quick, "repetitions": args.repetitions,
                              "steps_per_repetition": 2 * steps, "dtype": "float32",
                              "optimizer": "Adam", "speed_global_batch": 256,
                              "layer_sizes": LAYER_SIZES, "big_layer_sizes": BIG_LAYER_SIZES}
        write_report(report, args.output_dir, args.name)
    return 0


def _say(ctx, what, value):
    if ctx.rank == 0:
        print(f"{what}: {value}", flush=True)


if __name__ == "__main__":
    sys.exit(main())
