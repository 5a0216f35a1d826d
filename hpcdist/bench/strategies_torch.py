"""``hpcdist bench strategies``' torch row: local SGD's steps per second beside torch's own.

torch's local SGD is ``PostLocalSGDOptimizer`` with a ``PeriodicModelAverager``
(period 8, gloo); hpcdist's is :class:`hpcdist.parallel.LocalSGD` (period 8)
on hpcdist.nn's MLP 784-1024-1024-10 (the model ``hpcdist bench mlp``
trains) and on the same torch model. Every case starts from the same
weights, trains plain SGD on a fixed synthetic batch per rank, and is timed
in interleaved blocks of ``steps`` steps (the slowest rank's time).
"""

import time

import numpy as np

from .. import nn
from ..nn.optim import SGD
from ..parallel import LocalSGD
from .mlp import DTYPE, LAYER_SIZES, LEARNING_RATE, _torch_mlp

__all__ = ["measure_torch_row", "PERIOD"]

PERIOD = 8


def _hpcdist_mlp():
    layers = []
    for seed, (n_in, n_out) in enumerate(zip(LAYER_SIZES[:-1], LAYER_SIZES[1:])):
        layers += [nn.Linear(n_in, n_out, dtype=DTYPE, random_state=seed), nn.ReLU()]
    layers[0].needs_input_grad = False
    return nn.Sequential(*layers[:-1])


def _cases(torch, ctx, x, y):
    """name -> one step of each trainer."""
    from torch.distributed.algorithms.model_averaging.averagers import PeriodicModelAverager
    from torch.distributed.optim import PostLocalSGDOptimizer

    model = _hpcdist_mlp()
    weights = [(layer.weight.data, layer.bias.data) for layer in model
               if hasattr(layer, "weight")]
    criterion = nn.CrossEntropyLoss()
    local = LocalSGD(model, SGD(list(model.parameters()), lr=LEARNING_RATE), period=PERIOD,
                     ctx=ctx)

    def hpcdist_step():
        local.optimizer.zero_grad()
        criterion(model(x), y)
        model.backward(criterion.backward())
        local.step()

    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    loss_fn = torch.nn.CrossEntropyLoss()
    baseline = _torch_mlp(torch, weights)
    post_local = PostLocalSGDOptimizer(
        optim=torch.optim.SGD(baseline.parameters(), lr=LEARNING_RATE),
        averager=PeriodicModelAverager(period=PERIOD, warmup_steps=0))

    def torch_step():
        post_local.zero_grad()
        loss_fn(baseline(tx), ty).backward()
        post_local.step()

    adapted = _torch_mlp(torch, weights)
    adapted_local = LocalSGD(adapted, torch.optim.SGD(adapted.parameters(), lr=LEARNING_RATE),
                             period=PERIOD, ctx=ctx)

    def adapted_step():
        adapted_local.optimizer.zero_grad()
        loss_fn(adapted(tx), ty).backward()
        adapted_local.step()

    return {"hpcdist LocalSGD": hpcdist_step, "torch PostLocalSGD": torch_step,
            "hpcdist LocalSGD, torch model": adapted_step}


def measure_torch_row(torch, ctx, ctrl, *, batch, steps, repetitions):
    """Steps per second of each case at this rank count (medians), and the ratios.

    Parameters
    ----------
    torch : module
        With a gloo process group started.
    ctx : Context
    ctrl : mpi4py.MPI.Comm
        For barriers and the slowest rank's time.
    batch : int
        Rows per rank and step.
    steps : int
        Steps per timed block (a multiple of the period keeps averages per block equal).
    repetitions : int

    Returns
    -------
    dict
    """
    rng = np.random.default_rng(ctx.rank)
    x = rng.standard_normal((batch, LAYER_SIZES[0])).astype(DTYPE)
    y = rng.integers(0, LAYER_SIZES[-1], size=batch).astype(np.int64)
    cases = _cases(torch, ctx, x, y)
    for step in cases.values():  # warm-up: a full period each
        for _ in range(PERIOD):
            step()
    seconds = {name: [] for name in cases}
    names = list(cases)
    for rep in range(repetitions):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            ctrl.Barrier()
            start = time.perf_counter()
            for _ in range(steps):
                cases[name]()
            seconds[name].append(max(ctrl.allgather(time.perf_counter() - start)))
    rates = {name: steps / float(np.median(times)) for name, times in seconds.items()}
    torch_rate = rates["torch PostLocalSGD"]
    return {"model": "x".join(map(str, LAYER_SIZES)), "period": PERIOD, "local_batch": batch,
            "steps_per_block": steps, "repetitions": repetitions,
            "steps_per_second": rates, "block_seconds": seconds,
            "ratio": {"hpcdist/torch": rates["hpcdist LocalSGD"] / torch_rate,
                      "hpcdist torch model/torch":
                      rates["hpcdist LocalSGD, torch model"] / torch_rate}}
