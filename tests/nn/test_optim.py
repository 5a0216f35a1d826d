"""Optimizers: update rules against NumPy reference formulas (and torch.optim when
installed), in-place updates, skipping, parameter groups, state and validation."""
import math

import numpy as np
import pytest

from hpcdist.nn.module import Parameter
from hpcdist.nn.optim import SGD, Adam, AdamW, Optimizer

SHAPES = [(3, 4), (5,)]
N_STEPS = 6


# -- slow, obviously correct references (PyTorch's documented algorithms) -------------
def reference_sgd(theta, grads, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False):
    """torch.optim.SGD's pseudocode; ``grads(t, theta)`` gives step t's gradient."""
    theta = theta.copy()
    buf = None
    for t in range(1, N_STEPS + 1):
        g = grads(t, theta)
        if weight_decay:
            g = g + weight_decay * theta
        if momentum:
            buf = g.copy() if t == 1 else momentum * buf + (1 - dampening) * g
            g = g + momentum * buf if nesterov else buf
        theta = theta - lr * g
    return theta


def reference_adam(theta, grads, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                   amsgrad=False, decoupled=False):
    """Adam / AdamW as written in Kingma & Ba with PyTorch's eps placement."""
    beta1, beta2 = betas
    theta = theta.copy()
    m = np.zeros_like(theta)
    v = np.zeros_like(theta)
    v_max = np.zeros_like(theta)
    for t in range(1, N_STEPS + 1):
        g = grads(t, theta)
        if weight_decay and decoupled:
            theta = theta * (1 - lr * weight_decay)
        elif weight_decay:
            g = g + weight_decay * theta
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat = m / (1 - beta1 ** t)
        if amsgrad:
            # PyTorch keeps the maximum of the raw second moment, then corrects it
            v_max = np.maximum(v_max, v)
            v_hat = v_max / (1 - beta2 ** t)
        else:
            v_hat = v / (1 - beta2 ** t)
        theta = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
    return theta


def make_grads(shape, seed):
    """A gradient that depends on the step and on the current parameter (a noisy
    quadratic), so a wrong order of operations shows."""
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal((N_STEPS + 1,) + shape)
    curvature = rng.uniform(0.5, 2.0, size=shape)

    def grads(t, theta):
        return curvature * theta + noise[t]
    return grads


def run(optimizer_class, theta0, grads, **kwargs):
    p = Parameter(theta0.copy())
    data = p.data
    opt = optimizer_class([p], **kwargs)
    for t in range(1, N_STEPS + 1):
        p.grad = grads(t, p.data)
        opt.step()
    assert p.data is data, "the update must happen in place"
    return p.data, opt


SGD_CONFIGS = [
    dict(lr=0.1),
    dict(lr=0.05, weight_decay=0.1),
    dict(lr=0.1, momentum=0.9),
    dict(lr=0.1, momentum=0.9, dampening=0.3),
    dict(lr=0.1, momentum=0.8, nesterov=True),
    dict(lr=0.02, momentum=0.5, dampening=0.1, weight_decay=0.01),
    dict(lr=0.02, momentum=0.9, weight_decay=0.05, nesterov=True),
]
ADAM_CONFIGS = [
    dict(),
    dict(lr=0.01, betas=(0.8, 0.99)),
    dict(lr=0.01, weight_decay=0.1),
    dict(lr=0.01, amsgrad=True),
    dict(lr=0.05, betas=(0.5, 0.9), eps=1e-3, weight_decay=0.02, amsgrad=True),
    dict(lr=0.01, betas=(0.0, 0.0)),
]
ADAMW_CONFIGS = [dict(), dict(lr=0.01, weight_decay=0.1), dict(lr=0.01, amsgrad=True,
                                                               weight_decay=0.3)]


@pytest.mark.parametrize("config", SGD_CONFIGS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sgd_matches_reference(config, shape):
    theta0 = np.random.default_rng(1).standard_normal(shape)
    grads = make_grads(shape, 2)
    got, _ = run(SGD, theta0, grads, **config)
    np.testing.assert_allclose(got, reference_sgd(theta0, grads, **config), rtol=1e-12,
                               atol=1e-14)


@pytest.mark.parametrize("config", ADAM_CONFIGS, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_adam_matches_reference(config, shape):
    theta0 = np.random.default_rng(3).standard_normal(shape)
    grads = make_grads(shape, 4)
    got, _ = run(Adam, theta0, grads, **config)
    np.testing.assert_allclose(got, reference_adam(theta0, grads, **config), rtol=1e-10,
                               atol=1e-13)


@pytest.mark.parametrize("config", ADAMW_CONFIGS, ids=str)
def test_adamw_matches_reference(config):
    theta0 = np.random.default_rng(5).standard_normal((4, 3))
    grads = make_grads((4, 3), 6)
    got, _ = run(AdamW, theta0, grads, **config)
    expected = reference_adam(theta0, grads, decoupled=True,
                              **{"weight_decay": 1e-2, **config})
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-13)


def test_adamw_default_decay_differs_from_adam():
    theta0 = np.random.default_rng(7).standard_normal(5)
    grads = make_grads((5,), 8)
    adam, _ = run(Adam, theta0, grads, lr=0.01)
    adamw, _ = run(AdamW, theta0, grads, lr=0.01)
    assert AdamW([Parameter(np.zeros(1))]).defaults["weight_decay"] == 1e-2
    assert not np.allclose(adam, adamw, rtol=0, atol=1e-9)


def test_adam_state_counts_steps():
    _, opt = run(Adam, np.ones(3), make_grads((3,), 0), amsgrad=True)
    (state,) = opt.state.values()
    assert state["step"] == N_STEPS and isinstance(state["step"], int)
    assert set(state) == {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}


# -- the same steps in torch.optim ---------------------------------------------------
TORCH_CASES = ([("SGD", c) for c in SGD_CONFIGS] + [("Adam", c) for c in ADAM_CONFIGS]
               + [("AdamW", c) for c in ADAMW_CONFIGS])


@pytest.mark.parametrize("name,config", TORCH_CASES, ids=str)
def test_matches_torch(name, config):
    torch = pytest.importorskip("torch")
    ours = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW}[name]
    theirs = getattr(torch.optim, name)
    rng = np.random.default_rng(11)
    shapes = [(4, 3), (3,)]
    initial = [rng.standard_normal(s) for s in shapes]
    grads = [make_grads(s, 20 + i) for i, s in enumerate(shapes)]
    params = [Parameter(x.copy()) for x in initial]
    tensors = [torch.tensor(x.copy(), dtype=torch.float64, requires_grad=True)
               for x in initial]
    opt, topt = ours(params, **config), theirs(tensors, **config)
    for t in range(1, N_STEPS + 1):
        for p, tp, g in zip(params, tensors, grads):
            p.grad = g(t, p.data)
            tp.grad = torch.from_numpy(g(t, tp.detach().numpy().copy()))
        opt.step()
        topt.step()
        for p, tp in zip(params, tensors):
            np.testing.assert_allclose(p.data, tp.detach().numpy(), rtol=1e-10, atol=1e-13)
    state = opt.state_dict()["state"]
    tstate = topt.state_dict()["state"]
    for index in tstate:
        for key, value in tstate[index].items():
            if key == "step":
                assert state[index]["step"] == int(value)
            elif value is not None:
                np.testing.assert_allclose(state[index][key], value.numpy(), rtol=1e-10,
                                           atol=1e-13)


# -- mechanics -------------------------------------------------------------------------
@pytest.mark.parametrize("optimizer", [lambda ps: SGD(ps, lr=0.1, momentum=0.9,
                                                      weight_decay=0.1),
                                       lambda ps: Adam(ps, weight_decay=0.1),
                                       lambda ps: AdamW(ps)])
def test_skips_frozen_and_gradless_and_leaves_grads_alone(optimizer):
    trained, frozen, gradless = (Parameter(np.ones(3)) for _ in range(3))
    frozen.requires_grad = False
    frozen.grad = np.ones(3)
    grad = np.full(3, 0.5)
    trained.grad = grad
    opt = optimizer([trained, frozen, gradless])
    opt.step()
    assert not np.array_equal(trained.data, np.ones(3))
    np.testing.assert_array_equal(frozen.data, np.ones(3))
    np.testing.assert_array_equal(gradless.data, np.ones(3))
    assert trained.grad is grad
    np.testing.assert_array_equal(grad, 0.5)  # weight decay did not touch the gradient
    assert frozen not in opt.state and gradless not in opt.state


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("cls", [SGD, Adam, AdamW])
def test_keeps_dtype(cls, dtype):
    p = Parameter(np.ones(4, dtype=dtype))
    p.grad = np.full(4, 0.25, dtype=dtype)
    opt = cls([p], lr=0.01, **({"momentum": 0.9} if cls is SGD else {}))
    for _ in range(3):
        opt.step()
    assert p.data.dtype == dtype
    assert all(v.dtype == dtype for v in opt.state[p].values() if hasattr(v, "dtype"))
    assert np.all(p.data < 1)


def test_zero_grad_in_place_or_to_none():
    p = Parameter(np.ones(3))
    p.grad = grad = np.ones(3)
    opt = SGD([p], lr=0.1)
    opt.zero_grad()
    assert p.grad is grad and not grad.any()
    opt.zero_grad(set_to_none=True)
    assert p.grad is None
    opt.step()  # nothing to do
    np.testing.assert_array_equal(p.data, 1)


def test_param_groups_use_their_own_hyperparameters():
    a, b = Parameter(np.zeros(2)), Parameter(np.zeros(2))
    a.grad = b.grad = np.ones(2)
    opt = SGD([{"params": [a]}, {"params": [b], "lr": 0.5, "momentum": 0.9}], lr=0.1)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.param_groups[0]["momentum"] == 0.0
    opt.step()
    np.testing.assert_allclose(a.data, -0.1)
    np.testing.assert_allclose(b.data, -0.5)
    opt.param_groups[0]["lr"] = 1.0  # what schedules do
    opt.step()
    np.testing.assert_allclose(a.data, -1.1)
    np.testing.assert_allclose(b.data, -0.5 - 0.5 * 1.9)


def test_add_param_group_and_generator_input():
    a, b = Parameter(np.zeros(2)), Parameter(np.zeros(2))
    opt = Adam((p for p in [a]), lr=0.1)
    opt.add_param_group({"params": b, "lr": 0.2})
    assert opt.param_groups[1]["params"] == [b]
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)
    with pytest.raises(ValueError, match="appears twice"):
        opt.add_param_group({"params": [a]})


def test_closure_result_is_returned():
    p = Parameter(np.ones(2))
    p.grad = np.ones(2)
    assert SGD([p], lr=0.1).step(lambda: 3.5) == 3.5


# -- checkpoints -------------------------------------------------------------------------
def _train(opt, params, grads, steps, start=1):
    for t in range(start, start + steps):
        for p, g in zip(params, grads):
            p.grad = g(t, p.data)
        opt.step()


@pytest.mark.parametrize("make", [lambda ps: SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: Adam(ps, lr=0.01, amsgrad=True),
                                  lambda ps: AdamW([{"params": ps[:1]},
                                                    {"params": ps[1:], "lr": 0.1}])])
def test_state_dict_round_trip_continues_identically(make):
    rng = np.random.default_rng(0)
    initial = [rng.standard_normal((3, 2)), rng.standard_normal(4)]
    grads = [make_grads((3, 2), 1), make_grads((4,), 2)]
    params = [Parameter(x.copy()) for x in initial]
    opt = make(params)
    _train(opt, params, grads, 3)
    saved = opt.state_dict()
    for entry in saved["state"].values():  # copies, not the live buffers
        for key, value in entry.items():
            if hasattr(value, "shape"):
                value += 100.0
    saved = opt.state_dict()
    # a fresh optimizer on copies of the weights, state loaded (keys as strings, as
    # after a file format with string keys)
    clones = [Parameter(p.data.copy()) for p in params]
    restored = make(clones)
    restored.load_state_dict({"state": {str(k): v for k, v in saved["state"].items()},
                              "param_groups": saved["param_groups"]})
    _train(opt, params, grads, 3, start=4)
    _train(restored, clones, grads, 3, start=4)
    for p, c in zip(params, clones):
        np.testing.assert_array_equal(p.data, c.data)
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in restored.param_groups]


@pytest.mark.parametrize("cls", [SGD, Adam])
def test_state_of_a_scalar_parameter_round_trips_as_arrays(cls):
    p = Parameter(np.array(1.0))
    p.grad = np.array(0.5)
    opt = cls([p], lr=0.1, weight_decay=0.1, **({"momentum": 0.9} if cls is SGD else {}))
    opt.step()
    saved = opt.state_dict()
    saved["state"][0] = {k: np.asarray(v) for k, v in saved["state"][0].items()}  # as read back
    q = Parameter(p.data.copy())
    q.grad = np.array(0.5)
    restored = cls([q], lr=0.1, weight_decay=0.1, **({"momentum": 0.9} if cls is SGD else {}))
    restored.load_state_dict(saved)
    assert all(isinstance(v, np.ndarray) for k, v in restored.state[q].items() if k != "step")
    assert restored.state[q].get("step", 1) == 1 and type(restored.state[q].get("step", 1)) is int
    opt.step()
    restored.step()
    np.testing.assert_array_equal(p.data, q.data)
    assert p.data.shape == () and isinstance(p.data, np.ndarray)


def test_state_dict_is_plain_data():
    p = Parameter(np.ones(3))
    p.grad = np.ones(3)
    opt = Adam([p], lr=0.5)
    opt.step()
    state = opt.state_dict()
    assert state["param_groups"] == [{"lr": 0.5, "betas": (0.9, 0.999), "eps": 1e-8,
                                      "weight_decay": 0.0, "amsgrad": False, "params": [0]}]
    assert set(state["state"]) == {0} and state["state"][0]["step"] == 1
    assert isinstance(state["state"][0]["exp_avg"], np.ndarray)


def test_load_state_dict_restores_hyperparameters_and_checks_layout():
    p = Parameter(np.ones(3))
    p.grad = np.ones(3)
    source = SGD([p], lr=0.3, momentum=0.5)
    source.step()
    target = SGD([Parameter(np.ones(3))], lr=0.1)
    target.load_state_dict(source.state_dict())
    assert target.param_groups[0]["lr"] == 0.3 and target.param_groups[0]["momentum"] == 0.5
    two = SGD([Parameter(np.ones(3)), Parameter(np.ones(3))], lr=0.1)
    with pytest.raises(ValueError, match="1 parameters in the state, 2"):
        two.load_state_dict(source.state_dict())
    wrong_shape = SGD([Parameter(np.ones(4))], lr=0.1)
    with pytest.raises(ValueError, match=r"shape \(3,\), the parameter \(4,\)"):
        wrong_shape.load_state_dict(source.state_dict())
    bad = source.state_dict()
    bad["param_groups"][0]["lr"] = -1.0
    with pytest.raises(ValueError, match="lr=-1.0"):
        target.load_state_dict(bad)


# -- validation --------------------------------------------------------------------------
def _p():
    return [Parameter(np.zeros(2))]


@pytest.mark.parametrize("make,match", [
    (lambda: SGD(_p(), lr=-0.1), r"SGD: lr=-0.1 should be a finite number >= 0"),
    (lambda: SGD(_p(), lr=math.nan), r"lr=nan"),
    (lambda: SGD(_p(), lr=math.inf), r"SGD: lr=inf should be a finite number >= 0"),
    (lambda: Adam(_p(), weight_decay=math.inf), r"Adam: weight_decay=inf should be a finite"),
    (lambda: SGD(_p(), lr=0.1, momentum=-0.9), r"momentum=-0.9 should be a finite number >= 0"),
    (lambda: SGD(_p(), lr=0.1, weight_decay=-1), r"weight_decay=-1 should be a finite number >= 0"),
    (lambda: SGD(_p(), lr=0.1, dampening=-1), r"dampening=-1"),
    (lambda: SGD(_p(), lr=0.1, nesterov=True), r"nesterov=True requires momentum > 0"),
    (lambda: SGD(_p(), lr=0.1, momentum=0.9, dampening=0.1, nesterov=True),
     r"dampening=0.1"),
    (lambda: Adam(_p(), lr=-1e-3), r"Adam: lr=-0.001 should be a finite number >= 0"),
    (lambda: Adam(_p(), betas=(1.0, 0.999)), r"betas\[0\]=1.0 should be in \[0, 1\)"),
    (lambda: Adam(_p(), betas=(0.9, -0.1)), r"betas\[1\]=-0.1"),
    (lambda: Adam(_p(), betas=(0.9,)), r"betas=\(0.9,\) should be a pair"),
    (lambda: Adam(_p(), eps=-1e-8), r"eps=-1e-08 should be a finite number >= 0"),
    (lambda: AdamW(_p(), weight_decay=-0.01), r"AdamW: weight_decay=-0.01"),
    (lambda: SGD([], lr=0.1), r"empty parameter list"),
    (lambda: Adam([{"params": []}]), r"group 0 is empty"),
    (lambda: SGD([{"params": _p()}, {"params": _p(), "lr": -2}], lr=0.1),
     r"lr=-2 in param group 1"),
    (lambda: SGD([{"lr": 0.1}], lr=0.1), r"no 'params' key"),
])
def test_invalid_arguments_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_invalid_types_raise_type_error():
    with pytest.raises(TypeError, match="not an hpcdist.nn.Parameter"):
        SGD([np.zeros(3)], lr=0.1)
    with pytest.raises(TypeError, match="single Parameter"):
        SGD(Parameter(np.zeros(3)), lr=0.1)
    with pytest.raises(TypeError, match="lr='0.1' should be a real number"):
        SGD(_p(), lr="0.1")
    p = Parameter(np.zeros(3))
    with pytest.raises(ValueError, match="appears twice"):
        SGD([p, p], lr=0.1)


def test_base_class_needs_an_update_rule():
    p = Parameter(np.zeros(2))
    p.grad = np.ones(2)
    with pytest.raises(NotImplementedError):
        Optimizer([p], {"lr": 0.1}).step()
