"""Linear, activations and Dropout: values against PyTorch, gradients against
finite differences, modes, dtypes and error messages."""
import re

import numpy as np
import pytest

from hpcdist.nn import GELU, Dropout, Linear, Parameter, ReLU, Tanh
from tests.nn.gradcheck import gradcheck

torch = pytest.importorskip("torch")


def _randn(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# -- Linear ------------------------------------------------------------------------------
def test_linear_shapes_and_init():
    layer = Linear(784, 10, random_state=0)
    assert layer.weight.shape == (10, 784) and layer.bias.shape == (10,)
    assert layer.weight.dtype == np.float32 and layer.bias.dtype == np.float32
    bound = 1 / np.sqrt(784)
    for p in (layer.weight.data, layer.bias.data):
        assert np.abs(p).max() <= bound
    # uniform on [-bound, bound]: the spread covers most of the interval
    assert layer.weight.data.max() > 0.9 * bound and layer.weight.data.min() < -0.9 * bound
    assert abs(layer.weight.data.std() - bound / np.sqrt(3)) < 0.05 * bound
    out = layer(np.zeros((32, 784), np.float32))
    assert out.shape == (32, 10) and out.dtype == np.float32
    np.testing.assert_array_equal(out, np.broadcast_to(layer.bias.data, (32, 10)))


def test_linear_seed_reproducible():
    a, b, c = (Linear(5, 3, random_state=s) for s in (7, 7, 8))
    np.testing.assert_array_equal(a.weight.data, b.weight.data)
    np.testing.assert_array_equal(a.bias.data, b.bias.data)
    assert not np.array_equal(a.weight.data, c.weight.data)
    g = Linear(5, 3, random_state=np.random.default_rng(7))
    np.testing.assert_array_equal(a.weight.data, g.weight.data)
    legacy = Linear(5, 3, random_state=np.random.RandomState(0))
    assert legacy.weight.shape == (3, 5)


def test_linear_no_bias_and_parameters():
    layer = Linear(4, 2, bias=False, dtype=np.float64)
    assert layer.bias is None
    assert [name for name, _ in layer.named_parameters()] == ["weight"]
    assert layer.weight.dtype == np.float64
    x = _randn(3, 4)
    np.testing.assert_allclose(layer(x), x @ layer.weight.data.T)


def test_linear_matches_torch():
    layer = Linear(6, 4, random_state=1, dtype=np.float64)
    ref = torch.nn.Linear(6, 4, dtype=torch.float64)
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(layer.weight.data))
        ref.bias.copy_(torch.from_numpy(layer.bias.data))
    x = _randn(5, 6)
    g = _randn(5, 4, seed=1)
    xt = torch.from_numpy(x.copy()).requires_grad_()
    yt = ref(xt)
    yt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(layer(x), yt.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(layer.backward(g), xt.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(layer.weight.grad, ref.weight.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(layer.bias.grad, ref.bias.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_gradcheck(bias):
    layer = Linear(5, 3, bias=bias, dtype=np.float64, random_state=0)
    grads = gradcheck(layer, _randn(4, 5))
    assert set(grads) == ({"input", "weight", "bias"} if bias else {"input", "weight"})


def test_linear_gradcheck_batched_leading_dims():
    layer = Linear(3, 2, dtype=np.float64, random_state=0)
    x = _randn(2, 4, 3)
    assert layer(x).shape == (2, 4, 2)
    gradcheck(layer, x)


def test_linear_grads_accumulate_and_hooks_order():
    layer = Linear(3, 2, dtype=np.float64, random_state=0)
    order = []
    layer.weight.register_grad_hook(lambda p: order.append("weight"))
    layer.bias.register_grad_hook(lambda p: order.append("bias"))
    x, g = _randn(4, 3), _randn(4, 2, seed=1)
    layer(x)
    layer.backward(g)
    first = layer.weight.grad.copy()
    layer(x)
    layer.backward(g)
    np.testing.assert_allclose(layer.weight.grad, 2 * first)
    np.testing.assert_allclose(layer.bias.grad, 2 * g.sum(0))
    assert order == ["weight", "bias", "weight", "bias"]


def test_linear_frozen_parameters_get_no_grad():
    layer = Linear(3, 2, dtype=np.float64, random_state=0)
    layer.weight.requires_grad = False
    called = []
    layer.weight.register_grad_hook(lambda p: called.append(p))
    x, g = _randn(4, 3), _randn(4, 2, seed=1)
    layer(x)
    grad_x = layer.backward(g)
    assert layer.weight.grad is None and not called
    np.testing.assert_allclose(layer.bias.grad, g.sum(0))
    np.testing.assert_allclose(grad_x, g @ layer.weight.data)


def test_linear_float16_input_computes_in_float16():
    layer = Linear(8, 4, random_state=0)
    x = _randn(5, 8, dtype=np.float16)
    out = layer(x)
    assert out.dtype == np.float16
    np.testing.assert_allclose(out.astype(np.float32),
                               x.astype(np.float32) @ layer.weight.data.T + layer.bias.data,
                               rtol=1e-2, atol=1e-2)
    grad_x = layer.backward(np.ones((5, 4), np.float16))
    assert grad_x.dtype == np.float16
    assert layer.weight.grad.dtype == np.float32 and layer.bias.grad.dtype == np.float32
    np.testing.assert_allclose(layer.bias.grad, np.full(4, 5.0))


def test_linear_errors():
    layer = Linear(784, 10)
    with pytest.raises(ValueError, match=re.escape("Linear(in_features=784) got input of "
                                                   "shape (32, 100)")):
        layer(np.zeros((32, 100), np.float32))
    with pytest.raises(TypeError, match="floating-point input, got dtype int64"):
        layer(np.zeros((2, 784), np.int64))
    with pytest.raises(RuntimeError, match="backward called before forward"):
        Linear(2, 2).backward(np.zeros((1, 2)))
    layer(np.zeros((2, 784), np.float32))
    with pytest.raises(ValueError, match=re.escape("grad_output has shape (3, 10) but the "
                                                   "forward output had shape (2, 10)")):
        layer.backward(np.zeros((3, 10), np.float32))
    with pytest.raises(ValueError, match="in_features=0 should be a positive integer"):
        Linear(0, 3)
    with pytest.raises(ValueError, match="out_features=2.5 should be a positive integer"):
        Linear(3, 2.5)
    with pytest.raises(TypeError, match="dtype=int32 should be a floating-point dtype"):
        Linear(3, 2, dtype=np.int32)
    with pytest.raises(TypeError, match="random_state='a'"):
        Linear(3, 2, random_state="a")


def test_linear_repr():
    assert repr(Linear(784, 10)) == "Linear(in_features=784, out_features=10, bias=True)"
    assert repr(Linear(3, 2, bias=False)) == "Linear(in_features=3, out_features=2, bias=False)"


# -- activations -----------------------------------------------------------------------------
ACTIVATIONS = [
    (ReLU, {}, lambda t: torch.relu(t)),
    (Tanh, {}, lambda t: torch.tanh(t)),
    (GELU, {}, lambda t: torch.nn.functional.gelu(t)),
    (GELU, {"approximate": "tanh"}, lambda t: torch.nn.functional.gelu(t, approximate="tanh")),
]


@pytest.mark.parametrize("cls,kwargs,ref", ACTIVATIONS)
def test_activation_matches_torch(cls, kwargs, ref):
    x = _randn(6, 7) * 3
    g = _randn(6, 7, seed=1)
    layer = cls(**kwargs)
    xt = torch.from_numpy(x.copy()).requires_grad_()
    yt = ref(xt)
    yt.backward(torch.from_numpy(g))
    np.testing.assert_allclose(layer(x), yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(layer.backward(g), xt.grad.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("cls,kwargs,ref", ACTIVATIONS)
def test_activation_gradcheck(cls, kwargs, ref):
    x = _randn(5, 4) * 2
    x[np.abs(x) < 1e-3] = 0.5  # keep ReLU away from its kink
    gradcheck(cls(**kwargs), x)


@pytest.mark.parametrize("cls,kwargs,ref", ACTIVATIONS)
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_activation_keeps_dtype(cls, kwargs, ref, dtype):
    x = _randn(3, 4, dtype=dtype)
    layer = cls(**kwargs)
    out = layer(x)
    assert out.dtype == dtype and out.shape == x.shape
    expected = ref(torch.from_numpy(x.astype(np.float64))).numpy()
    np.testing.assert_allclose(out.astype(np.float64), expected, rtol=2e-3, atol=2e-3)
    assert layer.backward(np.ones_like(x)).dtype == dtype


def test_relu_zero_has_zero_gradient_and_keeps_nan():
    layer = ReLU()
    out = layer(np.array([-1.0, 0.0, 2.0, np.nan]))
    np.testing.assert_array_equal(out[:3], [0.0, 0.0, 2.0])
    assert np.isnan(out[3])
    np.testing.assert_array_equal(layer.backward(np.ones(4)), [0, 0, 1, 0])


def test_gelu_tanh_is_close_to_exact():
    x = np.linspace(-5, 5, 101)
    assert np.abs(GELU("tanh")(x) - GELU()(x)).max() < 1e-3


def test_activation_errors_and_repr():
    with pytest.raises(ValueError, match="approximate='fast' should be 'none'"):
        GELU(approximate="fast")
    with pytest.raises(TypeError, match="ReLU expects a floating-point input"):
        ReLU()(np.arange(3))
    with pytest.raises(RuntimeError, match="Tanh.backward called before forward"):
        Tanh().backward(np.ones(3))
    assert repr(GELU()) == "GELU(approximate='none')"
    assert repr(ReLU()) == "ReLU()"


# -- Dropout ---------------------------------------------------------------------------------
def test_dropout_eval_and_p0_are_identity():
    x = _randn(10, 10)
    layer = Dropout(0.5, random_state=0).eval()
    assert layer(x) is x
    g = _randn(10, 10, seed=1)
    assert layer.backward(g) is g
    assert Dropout(0.0)(x) is x


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_training_mask(p):
    x = np.ones((200, 500), np.float32)
    layer = Dropout(p, random_state=0)
    out = layer(x)
    assert out.dtype == np.float32
    kept = out != 0
    assert abs(1 - kept.mean() - p) < 0.01
    np.testing.assert_allclose(out[kept], 1 / (1 - p), rtol=1e-6)
    # the mean is preserved in expectation
    assert abs(out.mean() - 1) < 0.05
    g = np.full_like(x, 2.0)
    np.testing.assert_array_equal(layer.backward(g), 2 * out)


def test_dropout_seeded_and_fresh_masks():
    x = np.ones((20, 30))
    a, b = Dropout(0.5, random_state=3), Dropout(0.5, random_state=3)
    first = a(x)
    np.testing.assert_array_equal(first, b(x))
    assert not np.array_equal(first, a(x))  # a new mask on every call


def test_dropout_gradcheck_with_fixed_mask():
    layer = Dropout(0.3, random_state=0)

    def forward(x):
        layer._rng = np.random.default_rng(11)
        return layer.forward(x)

    gradcheck(layer, _randn(6, 5), forward=forward)


def test_dropout_float16():
    x = np.ones((50, 50), np.float16)
    out = Dropout(0.25, random_state=0)(x)
    assert out.dtype == np.float16
    assert set(np.unique(out).tolist()) <= {0.0, float(np.float16(1 / 0.75))}


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, "0.5", True])
def test_dropout_bad_p(p):
    with pytest.raises(ValueError, match=re.escape(f"Dropout: p={p!r} should be a probability "
                                                   "in [0, 1)")):
        Dropout(p)


def test_dropout_repr_and_train_switch():
    layer = Dropout(0.2)
    assert repr(layer) == "Dropout(p=0.2)"
    x = np.ones((4, 4))
    assert layer.eval()(x) is x
    assert layer.train()(np.ones((100, 100))).min() == 0


def test_parameter_is_shared_type():
    assert isinstance(Linear(2, 2).weight, Parameter)


def test_first_layer_without_input_gradient_still_gets_parameter_gradients():
    from hpcdist.nn import Linear, ReLU, Sequential
    x = np.random.default_rng(0).normal(size=(5, 4))
    full = Sequential(Linear(4, 3, dtype=np.float64, random_state=0), ReLU(),
                      Linear(3, 2, dtype=np.float64, random_state=1))
    lean = Sequential(Linear(4, 3, dtype=np.float64, random_state=0), ReLU(),
                      Linear(3, 2, dtype=np.float64, random_state=1))
    lean[0].needs_input_grad = False
    grad = np.ones((5, 2))
    full(x)
    lean(x)
    assert full.backward(grad).shape == x.shape
    assert lean.backward(grad) is None
    for (name, a), (_, b) in zip(full.named_parameters(), lean.named_parameters()):
        np.testing.assert_array_equal(a.grad, b.grad, err_msg=name)
