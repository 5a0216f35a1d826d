"""Parameter, Module and Sequential, and whole models built from the layers."""
import re

import numpy as np
import pytest

from hpcdist import nn
from hpcdist.nn import (
    GELU,
    BatchNorm1d,
    CrossEntropyLoss,
    Dropout,
    Linear,
    Module,
    Parameter,
    ReLU,
    Sequential,
    Tanh,
)
from tests.nn.gradcheck import gradcheck


def _randn(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def _mlp(dtype=np.float64, dropout=0.0):
    return Sequential(Linear(4, 6, dtype=dtype, random_state=0), BatchNorm1d(6, dtype=dtype),
                      GELU(), Dropout(dropout, random_state=0),
                      Linear(6, 5, dtype=dtype, random_state=1), Tanh(),
                      Linear(5, 3, dtype=dtype, random_state=2))


class WithLoss(Module):
    """A model and a loss as one module: forward(x, y) -> loss."""

    def __init__(self, model, criterion):
        super().__init__()
        self.model = model
        self.criterion = criterion

    def forward(self, x, y):
        return self.criterion(self.model(x), y)

    def backward(self, grad_output=1.0):
        return self.model.backward(self.criterion.backward(grad_output))


def test_public_names():
    assert nn.__all__ == ["Module", "Parameter", "Sequential", "Linear", "ReLU", "Tanh", "GELU",
                          "Dropout", "BatchNorm1d", "SyncBatchNorm", "CrossEntropyLoss",
                          "MSELoss", "optim", "ColumnParallelLinear", "RowParallelLinear",
                          "Checkpoint"]
    for name in nn.__all__:
        assert getattr(nn, name).__name__.rpartition(".")[2] == name


# -- Parameter --------------------------------------------------------------------------------
def test_parameter_accumulates_in_place_and_runs_hooks():
    p = Parameter(np.zeros(3, np.float32))
    seen = []
    remove = p.register_grad_hook(lambda param: seen.append(param.grad.copy()))
    p.accumulate_grad(np.ones(3, np.float64))
    assert p.grad.dtype == np.float32
    grad = p.grad
    p.accumulate_grad(np.full(3, 2.0))
    assert p.grad is grad  # in place
    np.testing.assert_array_equal(p.grad, [3, 3, 3])
    assert len(seen) == 2
    remove()
    p.accumulate_grad(np.ones(3))
    assert len(seen) == 2
    p.zero_grad()
    assert p.grad is grad and not p.grad.any()
    p.zero_grad(set_to_none=True)
    assert p.grad is None
    assert repr(p) == "Parameter(shape=(3,), dtype=float32)"


def test_frozen_parameter_ignores_gradients():
    p = Parameter(np.zeros(2), requires_grad=False)
    called = []
    p.register_grad_hook(called.append)
    p.accumulate_grad(np.ones(2))
    assert p.grad is None and not called


# -- Module -----------------------------------------------------------------------------------
class Affine(Module):
    def __init__(self):
        super().__init__()
        self.scale = Parameter(np.ones(2))
        self.inner = Linear(2, 2, dtype=np.float64, random_state=0)
        self.shift = Parameter(np.zeros(2))
        self.register_buffer("calls", np.zeros((), np.int64))


def test_registration_order_and_names():
    m = Affine()
    assert [n for n, _ in m.named_parameters()] == ["scale", "shift", "inner.weight",
                                                    "inner.bias"]
    assert [n for n, _ in m.named_buffers()] == ["calls"]
    assert [n for n, _ in m.named_modules()] == ["", "inner"]
    m.calls = np.ones((), np.int64)  # reassigning a buffer keeps it a buffer
    assert int(m.state_dict()["calls"]) == 1
    m.shift = None  # a parameter replaced by a plain value is no longer a parameter
    assert [n for n, _ in m.named_parameters()] == ["scale", "inner.weight", "inner.bias"]
    with pytest.raises(AttributeError, match="'Affine' object has no attribute 'missing'"):
        m.missing


def test_missing_super_init():
    class Broken(Module):
        def __init__(self):
            self.w = Parameter(np.zeros(1))

    with pytest.raises(AttributeError, match=re.escape("Broken.__init__ must call "
                                                       "super().__init__()")):
        Broken()


def test_train_eval_propagate():
    model = _mlp()
    assert all(m.training for m in model.modules())
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    model.train()
    assert all(m.training for m in model.modules())


def test_zero_grad_model():
    model = _mlp()
    model(_randn(5, 4))
    model.backward(np.ones((5, 3)))
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(not p.grad.any() for p in model.parameters())
    model.zero_grad(set_to_none=True)
    assert all(p.grad is None for p in model.parameters())


# -- state_dict -------------------------------------------------------------------------------
def test_state_dict_round_trip_model():
    model = _mlp(np.float32)
    for step in range(3):
        model(_randn(8, 4, seed=step, dtype=np.float32))
    state = model.state_dict()
    assert list(state) == ["0.weight", "0.bias", "1.weight", "1.bias", "4.weight", "4.bias",
                           "6.weight", "6.bias", "1.running_mean", "1.running_var",
                           "1.num_batches_tracked"]
    fresh = Sequential(Linear(4, 6, random_state=9), BatchNorm1d(6), GELU(), Dropout(0.0),
                       Linear(5 + 1, 5, random_state=9), Tanh(), Linear(5, 3, random_state=9))
    fresh.load_state_dict(state)
    x = _randn(6, 4, seed=10, dtype=np.float32)
    np.testing.assert_array_equal(fresh.eval()(x), model.eval()(x))
    assert int(fresh[1].num_batches_tracked) == 3


def test_load_state_dict_errors():
    model = Sequential(Linear(2, 2), BatchNorm1d(2))
    state = model.state_dict()
    del state["1.running_var"]
    state["extra"] = np.zeros(1)
    with pytest.raises(KeyError, match=r"missing keys \['1.running_var'\], unexpected keys "
                                       r"\['extra'\]"):
        model.load_state_dict(state)
    model.load_state_dict(state, strict=False)
    state = model.state_dict()
    state["0.weight"] = np.zeros((3, 2))
    with pytest.raises(ValueError, match=re.escape("'0.weight' has shape (3, 2) in the state "
                                                   "but (2, 2) in the model")):
        model.load_state_dict(state)


# -- Sequential and whole models --------------------------------------------------------------
def test_sequential_container():
    layers = [Linear(2, 3), ReLU(), Linear(3, 1)]
    model = Sequential(*layers)
    assert len(model) == 3 and list(model) == layers and model[-1] is layers[2]
    with pytest.raises(TypeError, match="Sequential: layer 1 is a ufunc, not an hpcdist.nn.Module"):
        Sequential(Linear(2, 2), np.tanh)
    assert repr(model) == ("Sequential(\n"
                           "  (0): Linear(in_features=2, out_features=3, bias=True)\n"
                           "  (1): ReLU()\n"
                           "  (2): Linear(in_features=3, out_features=1, bias=True)\n"
                           ")")


@pytest.mark.parametrize("train", [True, False])
def test_mlp_gradcheck(train):
    model = _mlp()
    model(_randn(10, 4, seed=3))  # running statistics
    model.train(train)
    grads = gradcheck(model, _randn(7, 4), rtol=1e-5, atol=1e-8)
    assert set(grads) == {"input", "0.weight", "0.bias", "1.weight", "1.bias", "4.weight",
                          "4.bias", "6.weight", "6.bias"}


def test_mlp_with_loss_gradcheck():
    y = np.array([0, 2, 1, 1, 0, 2])
    gradcheck(WithLoss(_mlp(), CrossEntropyLoss()), _randn(6, 4), y)


def test_mlp_trains():
    """Plain gradient descent on two separable blobs reaches high accuracy."""
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(-1.5, 1, (100, 4)), rng.normal(1.5, 1, (100, 4))])
    x = x.astype(np.float32)
    y = np.repeat([0, 1], 100)
    model = Sequential(Linear(4, 16, random_state=0), BatchNorm1d(16), ReLU(),
                       Dropout(0.1, random_state=0), Linear(16, 2, random_state=1))
    crit = CrossEntropyLoss()
    losses = []
    for _ in range(60):
        model.zero_grad()
        losses.append(crit(model(x), y))
        model.backward(crit.backward())
        for p in model.parameters():
            p.data -= 0.1 * p.grad
    assert losses[-1] < 0.5 * losses[0]
    accuracy = (model.eval()(x).argmax(1) == y).mean()
    assert accuracy > 0.95


@pytest.mark.gpu
def test_cupy_model_matches_numpy():
    """The same model and loss on CuPy arrays give NumPy's values (GPU only)."""
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() == 0:
            pytest.skip("no CUDA GPU visible")
    except Exception:  # noqa: BLE001 - no driver
        pytest.skip("no CUDA GPU visible")
    x, y = _randn(8, 4), np.array([0, 1, 2, 0, 1, 2, 0, 1])
    results = []
    for xp in (np, cp):
        model = Sequential(Linear(4, 6, dtype=np.float64, random_state=0, xp=xp),
                           BatchNorm1d(6, dtype=np.float64, xp=xp), GELU(), ReLU(), Tanh(),
                           Linear(6, 3, dtype=np.float64, random_state=1, xp=xp))
        crit = CrossEntropyLoss()
        loss = crit(model(xp.asarray(x)), xp.asarray(y))
        grad = model.backward(crit.backward())
        assert type(grad) is xp.ndarray
        dropped = Dropout(0.5, random_state=0)(xp.ones((100, 100)))
        assert abs(float((dropped == 0).mean()) - 0.5) < 0.05
        results.append((float(loss), cp.asnumpy(grad), cp.asnumpy(model[0].weight.grad),
                        cp.asnumpy(model[1].running_var)))
    for numpy_value, cupy_value in zip(*results):
        np.testing.assert_allclose(cupy_value, numpy_value, rtol=1e-10, atol=1e-12)


def test_zero_grad_writes_lazily_but_every_reader_sees_zeros():
    from hpcdist.nn import Parameter
    p = Parameter(np.zeros(4))
    p.accumulate_grad(np.arange(4.0))
    memory = p._grad
    p.zero_grad()
    assert memory.any()                              # not written: the next gradient may
    p.accumulate_grad(np.ones(4))                    # overwrite it instead of adding
    assert p.grad is memory
    np.testing.assert_array_equal(p.grad, np.ones(4))
    p.zero_grad()
    np.testing.assert_array_equal(p.grad, np.zeros(4))  # a reader gets zeros
    assert not memory.any()
    p.grad += 2                                      # and may write into them
    p.accumulate_grad(np.ones(4))
    np.testing.assert_array_equal(p.grad, np.full(4, 3.0))


def test_accumulate_grad_product_writes_in_place_after_zero_grad_and_accumulates_otherwise():
    from hpcdist.nn import Parameter
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4, 5))
    p = Parameter(np.zeros((3, 5)))
    calls = []
    p.register_grad_hook(lambda q: calls.append(q.grad.copy()))
    p.accumulate_grad_product(a, b)                  # no grad yet: allocates
    np.testing.assert_allclose(p.grad, a @ b)
    memory = p.grad
    p.accumulate_grad_product(a, b)                  # accumulates
    np.testing.assert_allclose(p.grad, 2 * (a @ b))
    p.zero_grad()
    p.accumulate_grad_product(a, b)                  # straight into the zeroed buffer
    assert p.grad is memory
    np.testing.assert_allclose(p.grad, a @ b)
    p.accumulate_grad_product(a, b)                  # and accumulates after that
    np.testing.assert_allclose(p.grad, 2 * (a @ b))
    assert len(calls) == 4
