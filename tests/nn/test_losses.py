"""CrossEntropyLoss and MSELoss against PyTorch and finite differences."""
import re

import numpy as np
import pytest

from hpcdist.nn import CrossEntropyLoss, MSELoss
from hpcdist.nn._softmax_kernels import softmax_cross_entropy, softmax_cross_entropy_grad
from hpcdist.nn.losses import softmax_cross_entropy_arrays, softmax_cross_entropy_grad_arrays
from tests.nn.gradcheck import gradcheck

torch = pytest.importorskip("torch")


def _randn(*shape, seed=0, dtype=np.float64, scale=1.0):
    return (scale * np.random.default_rng(seed).standard_normal(shape)).astype(dtype)


def _labels(n, n_classes, seed=1):
    return np.random.default_rng(seed).integers(0, n_classes, n)


def _torch_reference(fn, pred, target, grad_output):
    pt = torch.from_numpy(pred.copy()).requires_grad_()
    loss = fn(pt, torch.from_numpy(target))
    loss.backward(torch.as_tensor(grad_output, dtype=loss.dtype))
    return loss.detach().numpy(), pt.grad.numpy()


# -- CrossEntropyLoss --------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_matches_torch(reduction):
    logits, target = _randn(7, 5, scale=3), _labels(7, 5)
    crit = CrossEntropyLoss(reduction=reduction)
    grad_output = 2.5 if reduction != "none" else _randn(7, seed=3)
    expected_loss, expected_grad = _torch_reference(
        lambda p, t: torch.nn.functional.cross_entropy(p, t, reduction=reduction),
        logits, target, grad_output)
    loss = crit(logits, target)
    if reduction == "none":
        assert loss.shape == (7,)
    else:
        assert type(loss) is float
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-12)
    np.testing.assert_allclose(crit.backward(grad_output), expected_grad, rtol=1e-10,
                               atol=1e-14)


@pytest.mark.parametrize("dtype, rtol, atol", [(np.float64, 1e-12, 1e-14),
                                               (np.float32, 1e-5, 1e-6)])
@pytest.mark.parametrize("per_row", [False, True])
def test_cross_entropy_kernels_equal_the_array_expressions(dtype, rtol, atol, per_row):
    # NumPy inputs take the one-pass Numba kernels, CuPy's the array expressions
    logits, target = _randn(33, 7, dtype=dtype, scale=5), _labels(33, 7)
    probs, losses = np.empty_like(logits), np.empty(33, dtype)
    assert softmax_cross_entropy(logits, target, probs, losses) == -1
    expected_probs, expected_losses = softmax_cross_entropy_arrays(logits, target, np)
    np.testing.assert_allclose(probs, expected_probs, rtol=rtol, atol=atol)
    np.testing.assert_allclose(losses, expected_losses, rtol=rtol, atol=atol)
    scale = _randn(33, seed=4, dtype=dtype) if per_row else np.array([0.3], dtype)
    grad = np.empty_like(probs)
    softmax_cross_entropy_grad(probs, target, scale, grad)
    np.testing.assert_allclose(
        grad, softmax_cross_entropy_grad_arrays(probs, target, scale if per_row else 0.3, np),
        rtol=rtol, atol=atol)
    target[20] = 7  # the first bad row is reported
    assert softmax_cross_entropy(logits, target, probs, losses) == 20


def test_cross_entropy_default_grad_output_is_one():
    logits, target = _randn(4, 3), _labels(4, 3)
    crit = CrossEntropyLoss()
    crit(logits, target)
    softmax = np.exp(logits) / np.exp(logits).sum(1, keepdims=True)
    expected = softmax.copy()
    expected[np.arange(4), target] -= 1
    np.testing.assert_allclose(crit.backward(), expected / 4)
    np.testing.assert_allclose(crit.backward(3.0), 3 * expected / 4)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_gradcheck(reduction):
    target = _labels(6, 4)
    gradcheck(CrossEntropyLoss(reduction=reduction), _randn(6, 4, scale=2), target)


def test_cross_entropy_is_stable_for_large_logits():
    logits = np.array([[1e4, 0.0, -1e4], [-1e4, 1e4, 1e4]], dtype=np.float32)
    crit = CrossEntropyLoss(reduction="none")
    with np.errstate(over="raise", divide="raise", invalid="raise"):  # underflow is fine
        losses = crit(logits, np.array([0, 2]))
        grad = crit.backward()
    np.testing.assert_allclose(losses, [0.0, np.log(2)], atol=1e-6)
    np.testing.assert_allclose(grad, [[0, 0, 0], [0, 0.5, -0.5]], atol=1e-6)
    assert np.isfinite(CrossEntropyLoss()(logits, np.array([2, 0])))


def test_cross_entropy_float16_logits():
    logits = _randn(8, 6, dtype=np.float16, scale=4)
    target = _labels(8, 6)
    crit = CrossEntropyLoss()
    loss = crit(logits, target)
    reference = CrossEntropyLoss()(logits.astype(np.float64), target)
    assert abs(loss - reference) < 1e-5
    grad = crit.backward()
    assert grad.dtype == np.float16 and grad.shape == (8, 6)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8])
def test_cross_entropy_integer_target_dtypes(dtype):
    logits = _randn(5, 3)
    target = _labels(5, 3)
    assert CrossEntropyLoss()(logits, target.astype(dtype)) == CrossEntropyLoss()(logits, target)
    assert CrossEntropyLoss()(logits, target.tolist()) == CrossEntropyLoss()(logits, target)


def test_cross_entropy_empty_batch():
    crit = CrossEntropyLoss()
    assert np.isnan(crit(np.zeros((0, 3)), np.zeros(0, np.int64)))
    assert crit.backward().shape == (0, 3)
    assert CrossEntropyLoss(reduction="sum")(np.zeros((0, 3)), np.zeros(0, np.int64)) == 0.0


def test_cross_entropy_errors():
    crit = CrossEntropyLoss()
    logits = np.zeros((4, 3))
    with pytest.raises(TypeError, match=re.escape("target must hold integer class indices, got "
                                                  "dtype float64; convert it with "
                                                  "target.astype(numpy.int64)")):
        crit(logits, np.zeros(4))
    with pytest.raises(ValueError, match=re.escape("target value 3 is out of range: class "
                                                   "indices must be in [0, 3) for 3 classes")):
        crit(logits, np.array([0, 1, 2, 3]))
    with pytest.raises(ValueError, match=re.escape("target value -1 is out of range")):
        crit(logits, np.array([0, -1, 2, 1]))
    with pytest.raises(ValueError, match=re.escape("target has shape (4, 1) but logits have "
                                                   "shape (4, 3); expected target of shape (4,)")):
        crit(logits, np.zeros((4, 1), np.int64))
    with pytest.raises(ValueError, match=re.escape("logits of shape (n_samples, n_classes) "
                                                   "with n_classes >= 1, got shape (3,)")):
        crit(np.zeros(3), np.zeros(1, np.int64))
    with pytest.raises(TypeError, match="floating-point logits"):
        crit(np.zeros((2, 2), np.int64), np.zeros(2, np.int64))
    with pytest.raises(ValueError, match="reduction='avg' should be one of 'mean', 'sum', 'none'"):
        CrossEntropyLoss(reduction="avg")
    with pytest.raises(RuntimeError, match="CrossEntropyLoss.backward called before forward"):
        CrossEntropyLoss().backward()
    crit(logits, np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="grad_output should be a scalar"):
        crit.backward(np.ones(4))
    none = CrossEntropyLoss(reduction="none")
    none(logits, np.zeros(4, np.int64))
    with pytest.raises(ValueError, match=re.escape("must be a scalar or have the loss's shape "
                                                   "(4,)")):
        none.backward(np.ones(3))


def test_loss_repr():
    assert repr(CrossEntropyLoss()) == "CrossEntropyLoss(reduction='mean')"
    assert repr(MSELoss(reduction="sum")) == "MSELoss(reduction='sum')"


# -- MSELoss -------------------------------------------------------------------------------------
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_matches_torch(reduction):
    pred, target = _randn(5, 3), _randn(5, 3, seed=1)
    grad_output = 0.5 if reduction != "none" else _randn(5, 3, seed=2)
    expected_loss, expected_grad = _torch_reference(
        lambda p, t: torch.nn.functional.mse_loss(p, t, reduction=reduction),
        pred, target, grad_output)
    crit = MSELoss(reduction=reduction)
    loss = crit(pred, target)
    if reduction != "none":
        assert type(loss) is float
    np.testing.assert_allclose(loss, expected_loss, rtol=1e-12)
    np.testing.assert_allclose(crit.backward(grad_output), expected_grad, rtol=1e-12)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_gradcheck(reduction):
    gradcheck(MSELoss(reduction=reduction), _randn(4, 3), _randn(4, 3, seed=1))


@pytest.mark.parametrize("pred_shape,target_shape", [((6, 1), (6,)), ((6,), (6, 1))])
def test_mse_column_rule(pred_shape, target_shape):
    values = _randn(6)
    target = _randn(6, seed=1)
    crit = MSELoss()
    loss = crit(values.reshape(pred_shape), target.reshape(target_shape))
    np.testing.assert_allclose(loss, np.mean((values - target) ** 2))
    grad = crit.backward()
    assert grad.shape == pred_shape
    np.testing.assert_allclose(grad.ravel(), 2 * (values - target) / 6)


def test_mse_integer_target_and_float16_pred():
    pred = np.array([[1.0], [2.0]], np.float16)
    crit = MSELoss()
    assert crit(pred, np.array([0, 4])) == pytest.approx((1 + 4) / 2)
    grad = crit.backward()
    assert grad.dtype == np.float16
    np.testing.assert_allclose(grad, [[1.0], [-2.0]])


def test_mse_errors():
    with pytest.raises(ValueError, match=re.escape("target has shape (4, 2) but pred has shape "
                                                   "(4, 1); they must be equal")):
        MSELoss()(np.zeros((4, 1)), np.zeros((4, 2)))
    with pytest.raises(ValueError, match="no broadcasting"):
        MSELoss()(np.zeros((4, 3)), np.zeros(3))
    with pytest.raises(TypeError, match="target must be numeric, got dtype <U1"):
        MSELoss()(np.zeros(2), np.array(["a", "b"]))
    with pytest.raises(TypeError, match="floating-point pred"):
        MSELoss()(np.zeros(2, np.int64), np.zeros(2))
