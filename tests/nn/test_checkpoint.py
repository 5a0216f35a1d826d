"""Activation recomputation (nn.Checkpoint) and the per-module hooks it and sharding use."""
import copy
import tracemalloc

import numpy as np
import pytest

from hpcdist import nn
from hpcdist.exceptions import InvalidArgumentTypeError, InvalidStateError


def _block(seed, dtype=np.float64, width=8, hidden=24, dropout=0.0):
    layers = [nn.Linear(width, hidden, dtype=dtype, random_state=seed), nn.Tanh()]
    if dropout:
        layers.append(nn.Dropout(dropout, random_state=seed))
    layers += [nn.Linear(hidden, width, dtype=dtype, random_state=seed + 100), nn.GELU()]
    return nn.Sequential(*layers)


def _model(recompute, dtype=np.float64, blocks=3, dropout=0.0, batchnorm=False):
    layers = []
    for index in range(blocks):
        block = _block(index, dtype, dropout=dropout)
        if batchnorm:
            block = nn.Sequential(block, nn.BatchNorm1d(8, dtype=dtype))
        layers.append(nn.Checkpoint(block) if recompute else block)
    return nn.Sequential(*layers, nn.Linear(8, 3, dtype=dtype, random_state=7))


def _train(model, steps=3, seed=0):
    rng = np.random.default_rng(seed)
    criterion = nn.MSELoss()
    optimizer = nn.optim.Adam(model.parameters(), lr=1e-2)
    outputs, grads_in = [], []
    for _ in range(steps):
        x = rng.standard_normal((16, 8))
        y = rng.standard_normal((16, 3))
        optimizer.zero_grad()
        out = model(x)
        criterion(out, y)
        grads_in.append(model.backward(criterion.backward()))
        outputs.append(out)
        optimizer.step()
    return outputs, grads_in, [p.grad.copy() for p in model.parameters()], \
        [p.data.copy() for p in model.parameters()]


@pytest.mark.parametrize("dropout, batchnorm", [(0.0, False), (0.3, False), (0.0, True),
                                                (0.2, True)])
def test_checkpoint_trains_exactly_like_the_module(dropout, batchnorm):
    plain = _train(_model(False, dropout=dropout, batchnorm=batchnorm))
    recomputed = _train(_model(True, dropout=dropout, batchnorm=batchnorm))
    for a_list, b_list in zip(plain, recomputed):
        for a, b in zip(a_list, b_list):
            np.testing.assert_array_equal(a, b)


def test_checkpoint_keeps_batchnorm_statistics_of_one_forward():
    plain, recomputed = _model(False, batchnorm=True), _model(True, batchnorm=True)
    _train(plain, steps=2)
    _train(recomputed, steps=2)
    for (name, a), (_, b) in zip(plain.named_buffers(), recomputed.named_buffers()):
        np.testing.assert_array_equal(a, b, err_msg=name)


def test_checkpoint_keeps_only_its_input():
    block = _block(0)
    wrapped = nn.Checkpoint(block)
    x = np.ones((4, 8))
    wrapped(x)
    assert wrapped._saved[0] is x
    assert all("_input" not in m.__dict__ and "_output" not in m.__dict__
               and "_cache" not in m.__dict__ for m in block.modules())
    wrapped.backward(np.ones((4, 8)))
    assert all("_input" not in m.__dict__ for m in block.modules())
    with pytest.raises(InvalidStateError, match="before forward"):
        wrapped.backward(np.ones((4, 8)))


def test_checkpoint_lowers_the_forward_peak_memory():
    def peak(recompute):
        model = nn.Sequential(*[nn.Checkpoint(_block(i, width=64, hidden=256)) if recompute
                                else _block(i, width=64, hidden=256) for i in range(8)])
        x = np.ones((256, 64))
        tracemalloc.start()
        model(x)
        result = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        return result
    assert peak(True) < 0.5 * peak(False)


def test_checkpoint_refuses_a_non_module():
    with pytest.raises(InvalidArgumentTypeError, match="Checkpoint: module is a list"):
        nn.Checkpoint([nn.Tanh()])


def test_checkpoint_deep_copies_and_nests():
    model = nn.Checkpoint(nn.Sequential(nn.Checkpoint(_block(0)), _block(1)))
    twin = copy.deepcopy(model)
    x = np.random.default_rng(0).standard_normal((5, 8))
    out_a, out_b = model(x), twin(x)
    np.testing.assert_array_equal(out_a, out_b)
    np.testing.assert_array_equal(model.backward(np.ones_like(out_a)),
                                  twin.backward(np.ones_like(out_b)))


# -- hooks -------------------------------------------------------------------------------------
def test_hooks_run_in_order_however_the_module_is_called():
    model = nn.Sequential(nn.Linear(3, 4, dtype=np.float64, random_state=0), nn.Tanh())
    events = []
    layer = model[0]
    removers = [
        layer.register_forward_pre_hook(lambda m, args: events.append(("pre", args[0].shape))),
        layer.register_forward_hook(lambda m, args, out: events.append(("post", out.shape))),
        layer.register_backward_pre_hook(lambda m, g: events.append(("bpre", g.shape))),
        layer.register_backward_hook(
            lambda m, g, gi: events.append(("bpost", gi.shape, m.weight.grad is not None))),
    ]
    layer.forward(np.ones((1, 3)))
    out = model(np.ones((2, 3)))
    model.backward(np.ones_like(out))
    assert events == [("pre", (1, 3)), ("post", (1, 4)), ("pre", (2, 3)), ("post", (2, 4)),
                      ("bpre", (2, 4)), ("bpost", (2, 3), True)]
    for remove in removers:
        remove()
        remove()  # removing twice is harmless
    model(np.ones((2, 3)))
    assert len(events) == 6


def test_hooks_leave_results_unchanged_and_survive_deepcopy():
    model = _model(False)
    plain = _train(copy.deepcopy(model))
    calls = []
    for module in model.modules():
        module.register_forward_pre_hook(lambda m, args: calls.append(m))
    twin = copy.deepcopy(model)
    hooked = _train(model)
    for a_list, b_list in zip(plain, hooked):
        for a, b in zip(a_list, b_list):
            np.testing.assert_array_equal(a, b)
    count = len(calls)
    twin(np.ones((2, 8)))
    assert len(calls) > count and all(m in set(twin.modules()) for m in calls[count:])


def test_hook_must_be_callable():
    with pytest.raises(InvalidArgumentTypeError, match="forward-pre hook must be callable"):
        nn.Tanh().register_forward_pre_hook("not a function")
