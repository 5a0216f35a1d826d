"""Mixed precision: casting, master weights, dynamic loss scaling (skip on overflow,
back-off, growth), unscaling accuracy, checkpoints, agreement across ranks, and a
small regression trained in float16 to the float32 loss."""
import functools

import numpy as np
import pytest

from hpcdist import nn
from hpcdist.nn.amp import DynamicLossScaler, MixedPrecision, cast_module
from hpcdist.nn.module import Module, Parameter, Sequential
from hpcdist.nn.optim import SGD, Adam, AdamW, StepLR

mpi = pytest.mark.mpi(min_size=2)
# float16 overflow in the test models' own matmuls is the point of several tests
pytestmark = pytest.mark.filterwarnings(
    "ignore:overflow encountered in matmul:RuntimeWarning",
    "ignore:invalid value encountered in matmul:RuntimeWarning",
    "ignore:overflow encountered in cast:RuntimeWarning")


class TinyLinear(Module):
    """``y = x @ weight.T + bias``, computing in the input's dtype (like hpcdist.nn.Linear)."""

    def __init__(self, n_in, n_out, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.weight = Parameter(rng.uniform(-1, 1, (n_out, n_in)) / np.sqrt(n_in))
        self.bias = Parameter(np.zeros(n_out))

    def forward(self, x):
        self._x = x
        return x @ self.weight.data.T.astype(x.dtype) + self.bias.data.astype(x.dtype)

    def backward(self, grad_output):
        grad_output = grad_output.astype(self._x.dtype)
        self.weight.accumulate_grad(grad_output.T @ self._x)
        self.bias.accumulate_grad(grad_output.sum(axis=0))
        return grad_output @ self.weight.data.astype(self._x.dtype)


def mse(out, y):
    """Mean squared error and its gradient, in float32."""
    diff = out.astype(np.float32) - y
    return float(np.mean(diff * diff)), (2.0 / diff.size) * diff


def regression_data(n=256, n_in=8, n_out=2, seed=1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, n_in)).astype(np.float32)
    w = rng.standard_normal((n_out, n_in)).astype(np.float32)
    y = x @ w.T + 0.5 + 0.1 * rng.standard_normal((n, n_out)).astype(np.float32)
    return x, y.astype(np.float32)


def make_amp(module=None, optimizer=functools.partial(SGD, lr=0.1), **kwargs):
    module = module if module is not None else TinyLinear(4, 3)
    return module, MixedPrecision(module, optimizer, **kwargs)


def set_grads(amp, value):
    for p in amp.params:
        p.grad = np.full(p.shape, value, dtype=p.dtype)


# -- casting and master weights ----------------------------------------------------------
def test_cast_module():
    model = Sequential(TinyLinear(3, 2), TinyLinear(2, 1))
    model[0].register_buffer("stats", np.ones(2))
    model[0].weight.grad = np.ones((2, 3))
    assert cast_module(model, np.float16) is model
    assert all(p.dtype == np.float16 for p in model.parameters())
    assert model[0].weight.grad is None
    assert model[0].stats.dtype == np.float64
    cast_module(model, np.float32, buffers=True)
    assert model[0].stats.dtype == np.float32
    with pytest.raises(TypeError, match="floating-point"):
        cast_module(model, np.int32)


def test_masters_keep_the_float32_values():
    module = TinyLinear(5, 3)
    original = [p.data.copy() for p in module.parameters()]
    _, amp = make_amp(module)
    assert [p for p in module.parameters()] == amp.params
    for p, master, value in zip(amp.params, amp.master_params, original):
        assert p.dtype == np.float16 and master.dtype == np.float32
        np.testing.assert_array_equal(master.data, value.astype(np.float32))
        np.testing.assert_array_equal(p.data, value.astype(np.float16))
    assert amp.optimizer.param_groups[0]["params"] == amp.master_params


def test_existing_optimizer_moves_to_the_masters():
    module = TinyLinear(4, 2)
    opt = Adam([{"params": [module.weight], "lr": 0.01}, {"params": [module.bias]}], lr=0.1)
    amp = MixedPrecision(module, opt)
    assert amp.optimizer is opt
    assert opt.param_groups[0]["params"] == [amp.master_params[0]]
    assert opt.param_groups[1]["params"] == [amp.master_params[1]]
    with pytest.raises(ValueError, match="not a parameter of the module"):
        MixedPrecision(TinyLinear(4, 2), Adam([Parameter(np.zeros(2))]))


# -- a clean step ------------------------------------------------------------------------
def test_step_updates_masters_and_compute_weights_in_place():
    module, amp = make_amp(optimizer=functools.partial(SGD, lr=0.5))
    arrays = [p.data for p in amp.params] + [m.data for m in amp.master_params]
    before = [m.data.copy() for m in amp.master_params]
    set_grads(amp, 0.25 * amp.scale)  # scaled gradient of 0.25 everywhere
    assert amp.step() is True
    for p, master, old in zip(amp.params, amp.master_params, before):
        np.testing.assert_allclose(master.data, old - 0.5 * 0.25, rtol=1e-6)
        np.testing.assert_array_equal(p.data, master.data.astype(np.float16))
    assert all(a is b for a, b in zip(arrays, [p.data for p in amp.params]
                                      + [m.data for m in amp.master_params]))
    assert amp.skipped_steps == 0 and amp.scale == 2.0 ** 16


def test_scale_loss_grad_multiplies_and_casts():
    _, amp = make_amp(init_scale=1024.0)
    grad = np.array([[0.5, -1e-3]], dtype=np.float32)
    copy = grad.copy()
    scaled = amp.scale_loss_grad(grad)
    assert scaled.dtype == np.float16
    np.testing.assert_allclose(scaled, grad * 1024, rtol=1e-3)
    np.testing.assert_array_equal(grad, copy)  # input untouched


# -- overflow: skip, back off, weights unchanged -----------------------------------------------
@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
@pytest.mark.parametrize("make_optimizer", [functools.partial(SGD, lr=0.1, momentum=0.9),
                                            functools.partial(AdamW, lr=0.1)])
def test_overflow_skips_the_step_and_halves_the_scale(bad, make_optimizer):
    _, amp = make_amp(optimizer=make_optimizer)
    compute = [p.data.copy() for p in amp.params]
    masters = [m.data.copy() for m in amp.master_params]
    set_grads(amp, 1.0)
    amp.params[1].grad[0] = bad
    assert amp.step() is False
    assert amp.scale == 2.0 ** 15 and amp.skipped_steps == 1
    for p, m, c, w in zip(amp.params, amp.master_params, compute, masters):
        np.testing.assert_array_equal(p.data, c)
        np.testing.assert_array_equal(m.data, w)
    assert amp.optimizer.state == {}  # no moment was touched
    amp.zero_grad()
    set_grads(amp, 1.0)
    assert amp.step() is True and amp.skipped_steps == 1


def test_scaled_gradient_overflowing_float16_is_caught():
    module, amp = make_amp()
    out = module(np.ones((2, 4), dtype=np.float16))
    _, dloss = mse(out, np.zeros((2, 3), dtype=np.float32))
    module.backward(amp.scale_loss_grad(dloss * 1e3))  # 65536 * large > float16 max
    assert not np.all(np.isfinite(module.weight.grad))
    assert amp.step() is False and amp.scale == 2.0 ** 15


# -- growth --------------------------------------------------------------------------------
def test_scale_grows_after_growth_interval_clean_steps():
    _, amp = make_amp(init_scale=8.0, growth_interval=3)
    scales = []
    for _ in range(7):
        set_grads(amp, 1.0)
        assert amp.step()
        amp.zero_grad()
        scales.append(amp.scale)
    assert scales == [8, 8, 16, 16, 16, 32, 32]


def test_overflow_resets_the_growth_count():
    scaler = DynamicLossScaler(init_scale=4.0, growth_factor=3.0, backoff_factor=0.25,
                               growth_interval=2)
    history = []
    for found_inf in [False, True, False, False, False, True, True]:
        scaler.update(found_inf)
        history.append(scaler.scale)
    assert history == [4.0, 1.0, 1.0, 3.0, 3.0, 0.75, 0.1875]
    assert scaler.skipped_steps == 3 and scaler.growth_tracker == 0


# -- unscaling accuracy -------------------------------------------------------------------
@pytest.mark.parametrize("magnitude,scale", [(1.0, 2.0 ** 12), (1e-3, 2.0 ** 16),
                                             (1e-6, 2.0 ** 16)])
def test_unscaled_master_grads_equal_float32_grads(magnitude, scale):
    _, amp = make_amp(init_scale=scale)
    rng = np.random.default_rng(0)
    grads32 = [(magnitude * rng.standard_normal(p.shape)).astype(np.float32)
               for p in amp.params]
    for p, g in zip(amp.params, grads32):
        p.grad = (g * amp.scale).astype(np.float16)  # what a float16 backward produces
    assert amp.unscale() is False
    for master, g in zip(amp.master_params, grads32):
        assert master.grad.dtype == np.float32
        # float16 keeps 11 significant bits: relative rounding <= 2**-11 (absolute
        # 2**-25 / scale in the subnormal range)
        np.testing.assert_allclose(master.grad, g, rtol=2.0 ** -11, atol=2.0 ** -25 / scale)
    # without scaling, gradients of 1e-6 would have lost most of their bits
    if magnitude == 1e-6:
        unscaled16 = grads32[0].astype(np.float16).astype(np.float32)
        assert np.max(np.abs(unscaled16 - grads32[0]) / np.abs(grads32[0])) > 1e-2


def test_float16_backward_matches_float32_backward():
    x, y = regression_data(n=32)
    module32 = TinyLinear(8, 2, seed=3)
    for p in module32.parameters():  # weights representable in float16 for both models
        p.data = p.data.astype(np.float16).astype(np.float32)
    module16 = TinyLinear(8, 2, seed=3)
    _, amp = make_amp(module16, init_scale=2.0 ** 8)
    x16 = x.astype(np.float16)
    _, dloss32 = mse(module32(x16.astype(np.float32)), y)
    module32.backward(dloss32)
    _, dloss16 = mse(module16(x16), y)
    module16.backward(amp.scale_loss_grad(dloss16))
    assert amp.unscale() is False
    for p32, master in zip(module32.parameters(), amp.master_params):
        scale = np.max(np.abs(p32.grad))
        np.testing.assert_allclose(master.grad, p32.grad, rtol=0, atol=2e-2 * scale)


def test_unscale_then_clip_then_step():
    _, amp = make_amp(optimizer=functools.partial(SGD, lr=1.0), init_scale=1024.0)
    before = [m.data.copy() for m in amp.master_params]
    set_grads(amp, 3.0 * amp.scale)
    assert amp.unscale() is False
    for master in amp.master_params:
        np.clip(master.grad, -1.0, 1.0, out=master.grad)
    assert amp.step() is True
    for master, old in zip(amp.master_params, before):
        np.testing.assert_allclose(master.data, old - 1.0, rtol=1e-6)


def test_frozen_and_gradless_parameters_stay():
    module = TinyLinear(3, 2)
    module.bias.requires_grad = False
    _, amp = make_amp(module)
    weight, bias = (m.data.copy() for m in amp.master_params)
    module.weight.grad = None
    amp.step()
    np.testing.assert_array_equal(amp.master_params[0].data, weight)
    np.testing.assert_array_equal(amp.master_params[1].data, bias)
    assert all(m.grad is None for m in amp.master_params)


# -- training --------------------------------------------------------------------------------
def _train(module, x, y, steps, amp=None, optimizer=None, batch=32):
    for step in range(steps):
        rows = slice((step * batch) % len(x), (step * batch) % len(x) + batch)
        xb = x[rows].astype(np.float16) if amp else x[rows]
        _, dloss = mse(module(xb), y[rows])
        if amp:
            module.backward(amp.scale_loss_grad(dloss))
            amp.step()
            amp.zero_grad()
        else:
            module.backward(dloss)
            optimizer.step()
            optimizer.zero_grad()
    return mse(module(x.astype(np.float16) if amp else x), y)[0]


@pytest.mark.parametrize("make_optimizer", [functools.partial(SGD, lr=0.05, momentum=0.9),
                                            functools.partial(Adam, lr=0.02)])
def test_float16_training_reaches_the_float32_loss(make_optimizer):
    x, y = regression_data()
    module32 = TinyLinear(8, 2, seed=5)
    for p in module32.parameters():
        p.data = p.data.astype(np.float32)
    initial = mse(module32(x), y)[0]
    loss32 = _train(module32, x, y, 300, optimizer=make_optimizer(module32.parameters()))
    module16, amp = make_amp(TinyLinear(8, 2, seed=5), make_optimizer)
    loss16 = _train(module16, x, y, 300, amp=amp)
    assert loss32 < 0.02 < initial  # the float32 run converged (noise variance 0.01)
    assert abs(loss16 - loss32) < 0.02 * loss32
    # the scale came down from 2**16 to a value at which float16 gradients fit
    assert amp.skipped_steps >= 1 and amp.scale < 2.0 ** 16
    assert all(p.dtype == np.float16 for p in module16.parameters())


def test_schedules_drive_the_master_optimizer():
    _, amp = make_amp(optimizer=functools.partial(SGD, lr=1.0), init_scale=1024.0)
    schedule = StepLR(amp.optimizer, step_size=1, gamma=0.5)
    set_grads(amp, amp.scale)
    assert amp.step()
    schedule.step()
    assert amp.optimizer.param_groups[0]["lr"] == 0.5


# -- the scaler alone: float32 parameters, float16 compute ---------------------------------
def test_scaler_step_unscales_float32_grads_in_place_and_steps():
    module = TinyLinear(4, 3)
    opt = SGD(module.parameters(), lr=0.5)
    scaler = DynamicLossScaler(init_scale=2.0 ** 10)
    before = [p.data.copy() for p in module.parameters()]
    for p in module.parameters():
        p.grad = np.full(p.shape, 0.25 * scaler.scale)
    grads = [p.grad for p in module.parameters()]
    assert scaler.unscale(opt) is False
    assert scaler.unscale(opt) is False  # once per step: no second division
    for p, g, old in zip(module.parameters(), grads, before):
        assert p.grad is g
        np.testing.assert_array_equal(p.grad, 0.25)
    assert scaler.step(opt) is True
    for p, old in zip(module.parameters(), before):
        np.testing.assert_allclose(p.data, old - 0.125)


def test_scaler_step_skips_on_overflow():
    module = TinyLinear(4, 3)
    opt = Adam(module.parameters(), lr=0.1)
    scaler = DynamicLossScaler(init_scale=8.0, growth_interval=2)
    before = [p.data.copy() for p in module.parameters()]
    for p in module.parameters():
        p.grad = np.ones(p.shape)
    module.bias.grad[1] = np.nan
    assert scaler.step(opt) is False
    assert scaler.scale == 4.0 and scaler.skipped_steps == 1 and opt.state == {}
    for p, old in zip(module.parameters(), before):
        np.testing.assert_array_equal(p.data, old)
    for _ in range(2):
        for p in module.parameters():
            p.grad = np.ones(p.shape)
        assert scaler.step(opt) is True
    assert scaler.scale == 8.0


def test_scaler_refuses_16_bit_gradients():
    p = Parameter(np.ones(3, dtype=np.float16))
    p.grad = np.ones(3, dtype=np.float16)
    with pytest.raises(TypeError, match="float16.*MixedPrecision"):
        DynamicLossScaler().step(SGD([p], lr=0.1))


# -- with hpcdist.nn's layers and losses ------------------------------------------------------
def _mlp(seed):
    return nn.Sequential(nn.Linear(8, 16, random_state=seed), nn.ReLU(),
                         nn.Linear(16, 2, random_state=seed + 1))


def _train_layers(model, x, y, steps, step, scale, batch=32):
    loss_fn = nn.MSELoss()
    for t in range(steps):
        rows = slice((t * batch) % len(x), (t * batch) % len(x) + batch)
        loss_fn(model(x[rows]), y[rows])
        model.backward(loss_fn.backward(scale()))
        step()
    return float(loss_fn(model(x), y))


def test_hpcdist_layers_train_in_float16_both_ways():
    x, y = regression_data()
    model32 = _mlp(0)
    opt32 = Adam(model32.parameters(), lr=0.01)
    loss32 = _train_layers(model32, x, y, 600, lambda: (opt32.step(), opt32.zero_grad()),
                           lambda: 1.0)
    # 1. float16 parameters, float32 masters
    model16 = _mlp(0)
    amp = MixedPrecision(model16, functools.partial(Adam, lr=0.01))
    loss16 = _train_layers(model16, x.astype(np.float16), y, 600,
                           lambda: (amp.step(), amp.zero_grad()), lambda: amp.scale)
    assert all(p.dtype == np.float16 for p in model16.parameters())
    # 2. float32 parameters, float16 activations, the scaler alone
    model_act16 = _mlp(0)
    opt = Adam(model_act16.parameters(), lr=0.01)
    scaler = DynamicLossScaler()
    loss_act16 = _train_layers(model_act16, x.astype(np.float16), y, 600,
                               lambda: (scaler.step(opt), opt.zero_grad()),
                               lambda: scaler.scale)
    assert all(p.dtype == np.float32 for p in model_act16.parameters())
    assert loss32 < 0.015  # near the noise variance, 0.01
    assert abs(loss16 - loss32) < 0.1 * loss32
    assert abs(loss_act16 - loss32) < 0.1 * loss32
    assert amp.skipped_steps >= 1 and scaler.skipped_steps >= 1


# -- checkpoints ---------------------------------------------------------------------------
def test_state_dict_round_trip():
    x, y = regression_data(n=64)
    module, amp = make_amp(TinyLinear(8, 2, seed=2), functools.partial(Adam, lr=0.01),
                           growth_interval=3)
    _train(module, x, y, 5, amp=amp)
    state = amp.state_dict()
    assert set(state) == {"master_params", "optimizer", "scaler"}
    assert state["scaler"] == {"scale": amp.scale, "growth_tracker": amp.scaler.growth_tracker,
                               "skipped_steps": amp.skipped_steps}
    other_module, other = make_amp(TinyLinear(8, 2, seed=9), functools.partial(Adam, lr=0.01),
                                   growth_interval=3)
    other.load_state_dict(state)
    assert other.scale == amp.scale and other.skipped_steps == amp.skipped_steps
    _train(module, x, y, 4, amp=amp)
    _train(other_module, x, y, 4, amp=other)
    for a, b in zip(amp.params + amp.master_params, other.params + other.master_params):
        np.testing.assert_array_equal(a.data, b.data)
    with pytest.raises(ValueError, match="2 master parameters in the state|has shape"):
        make_amp(TinyLinear(3, 2))[1].load_state_dict(state)


# -- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs,match", [
    (dict(init_scale=0.0), "init_scale=0.0 should be a number > 0"),
    (dict(growth_factor=1.0), "growth_factor=1.0 should be a number > 1"),
    (dict(backoff_factor=1.0), r"backoff_factor=1.0 should be a number in \(0, 1\)"),
    (dict(backoff_factor=0), "backoff_factor=0"),
    (dict(growth_interval=0), "growth_interval=0 should be an integer >= 1"),
    (dict(growth_interval=1.5), "growth_interval=1.5"),
])
def test_invalid_scaler_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DynamicLossScaler(**kwargs)
    with pytest.raises(ValueError, match=match):
        make_amp(**kwargs)


def test_invalid_mixed_precision_arguments():
    with pytest.raises(TypeError, match="not an hpcdist.nn.Module"):
        MixedPrecision([Parameter(np.zeros(2))], SGD)
    with pytest.raises(TypeError, match="pass an Optimizer or a function"):
        make_amp(optimizer=0.1)
    with pytest.raises(TypeError, match="returned a list"):
        make_amp(optimizer=lambda params: params)
    with pytest.raises(TypeError, match="dtype=int8 should be a floating-point"):
        make_amp(dtype=np.int8)


def test_found_overflow_ignores_none_and_sees_every_array():
    scaler = DynamicLossScaler()
    assert scaler.found_overflow([]) is False
    assert scaler.found_overflow([None, np.ones(3, np.float32)]) is False
    assert scaler.found_overflow([np.ones(3, np.float32), np.array([1, np.nan],
                                                                   np.float32)]) is True
    # large finite float32 values do not add up to a false overflow
    assert scaler.found_overflow([np.full(1000, 3e38, np.float32)]) is False


# -- several ranks -------------------------------------------------------------------------
def _all_ranks(ctx, ok):
    import hpcdist
    return all(hpcdist.allgather_object(bool(ok), ctx=ctx))


@mpi
def test_every_rank_skips_when_one_rank_overflows(ctx):
    rank = ctx.rank
    # each rank starts from different weights: the masters come from rank 0
    module, amp = make_amp(TinyLinear(4, 3, seed=rank), ctx=ctx)
    expected = TinyLinear(4, 3, seed=0)
    ok = all(np.array_equal(m.data, e.data.astype(np.float32))
             for m, e in zip(amp.master_params, expected.parameters()))
    assert _all_ranks(ctx, ok)
    before = [p.data.copy() for p in amp.params]
    set_grads(amp, 1.0)
    if rank == ctx.size - 1:
        amp.params[0].grad[0, 0] = np.inf
    stepped = amp.step()
    ok = (stepped is False and amp.scale == 2.0 ** 15 and amp.skipped_steps == 1
          and all(np.array_equal(p.data, b) for p, b in zip(amp.params, before)))
    assert _all_ranks(ctx, ok)
    amp.zero_grad()
    set_grads(amp, 1.0)
    assert _all_ranks(ctx, amp.step() is True and amp.skipped_steps == 1)
