"""Learning-rate schedules and the linear scaling rule: formulas, chaining, state,
validation, and the same values as torch.optim.lr_scheduler when torch is installed."""
import math
import warnings

import numpy as np
import pytest

from hpcdist.nn.module import Parameter
from hpcdist.nn.optim import (
    SGD,
    CosineAnnealingLR,
    LinearWarmup,
    LRScheduler,
    SequentialLR,
    StepLR,
    WarmupCosineLR,
    scale_lr,
)


def make_optimizer(lrs=(0.1,)):
    groups = [{"params": [Parameter(np.zeros(2))], "lr": lr} for lr in lrs]
    return SGD(groups, lr=lrs[0], momentum=0.9)


def trace(schedule, steps):
    """The learning rates of every group at steps 0..steps (read from the optimizer)."""
    lrs = [[g["lr"] for g in schedule.optimizer.param_groups]]
    for _ in range(steps):
        schedule.optimizer.step()
        schedule.step()
        lrs.append([g["lr"] for g in schedule.optimizer.param_groups])
        assert schedule.get_last_lr() == lrs[-1]
    return np.array(lrs)


# -- formulas ------------------------------------------------------------------------
def test_step_lr():
    got = trace(StepLR(make_optimizer((0.1, 1.0)), step_size=3, gamma=0.5), 10)
    expected = [[base * 0.5 ** (t // 3) for base in (0.1, 1.0)] for t in range(11)]
    np.testing.assert_allclose(got, expected, rtol=1e-15)


def test_cosine_annealing():
    T, eta_min = 8, 0.01
    got = trace(CosineAnnealingLR(make_optimizer((0.1, 0.5)), T_max=T, eta_min=eta_min), T)
    expected = [[eta_min + (base - eta_min) * (1 + math.cos(math.pi * t / T)) / 2
                 for base in (0.1, 0.5)] for t in range(T + 1)]
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    np.testing.assert_allclose(got[-1], eta_min)


def test_linear_warmup_reaches_base_and_stays():
    got = trace(LinearWarmup(make_optimizer((0.4,)), warmup_steps=4, start_factor=0.25), 7)
    np.testing.assert_allclose(got[:, 0], [0.1, 0.175, 0.25, 0.325, 0.4, 0.4, 0.4, 0.4])


def test_sequential_warmup_then_step():
    opt = make_optimizer((1.0,))
    schedule = SequentialLR(opt, [LinearWarmup(opt, 2, start_factor=0.5),
                                  StepLR(opt, step_size=2, gamma=0.1)], milestones=[2])
    np.testing.assert_allclose(trace(schedule, 6)[:, 0],
                               [0.5, 0.75, 1.0, 1.0, 0.1, 0.1, 0.01])


def test_warmup_cosine_is_continuous_and_ends_at_eta_min():
    warmup, total, eta_min = 5, 25, 1e-3
    schedule = WarmupCosineLR(make_optimizer((0.2,)), warmup, total, start_factor=0.1,
                              eta_min=eta_min)
    got = trace(schedule, total)[:, 0]
    expected = [0.2 * (0.1 + 0.9 * t / warmup) if t < warmup else
                eta_min + (0.2 - eta_min) * (1 + math.cos(math.pi * (t - warmup)
                                                          / (total - warmup))) / 2
                for t in range(total + 1)]
    np.testing.assert_allclose(got, expected, rtol=1e-14)
    assert got.argmax() == warmup and got[-1] == pytest.approx(eta_min)


def test_warmup_cosine_without_warmup_is_cosine():
    a = trace(WarmupCosineLR(make_optimizer(), 0, 10), 10)
    b = trace(CosineAnnealingLR(make_optimizer(), 10), 10)
    np.testing.assert_allclose(a, b, rtol=1e-15)


def test_base_rate_is_recorded_once():
    opt = make_optimizer((0.3,))
    StepLR(opt, step_size=1, gamma=0.5).step()
    assert opt.param_groups[0]["lr"] == 0.15
    later = CosineAnnealingLR(opt, T_max=4)  # a second schedule starts from initial_lr
    assert later.base_lrs == [0.3] and opt.param_groups[0]["lr"] == 0.3


def test_state_dict_round_trip():
    opt = make_optimizer((0.1, 0.2))
    schedule = WarmupCosineLR(opt, 3, 12)
    for _ in range(5):
        schedule.step()
    state = schedule.state_dict()
    assert state == {"last_step": 5, "base_lrs": [0.1, 0.2]}
    other_opt = make_optimizer((0.1, 0.2))
    other = WarmupCosineLR(other_opt, 3, 12)
    other.load_state_dict(state)
    assert other.get_last_lr() == schedule.get_last_lr()
    assert [g["lr"] for g in other_opt.param_groups] == schedule.get_last_lr()
    schedule.step()
    other.step()
    assert other.get_last_lr() == schedule.get_last_lr()
    with pytest.raises(ValueError, match="1 base rates, the optimizer 2"):
        other.load_state_dict({"last_step": 1, "base_lrs": [0.1]})


# -- the linear scaling rule -------------------------------------------------------------
def test_scale_lr():
    assert scale_lr(0.1, 8) == pytest.approx(0.8)
    assert scale_lr(0.1, 32, base_world_size=8) == pytest.approx(0.4)
    assert scale_lr(0.1, 1) == 0.1
    assert scale_lr(0.1, 4, base_world_size=4) == 0.1
    with pytest.raises(ValueError, match="world_size=0 should be >= 1"):
        scale_lr(0.1, 0)
    with pytest.raises(ValueError, match="base_world_size=0"):
        scale_lr(0.1, 2, base_world_size=0)
    with pytest.raises(ValueError, match="base_lr=-0.1"):
        scale_lr(-0.1, 2)
    with pytest.raises(TypeError, match="world_size=2.5 should be an integer"):
        scale_lr(0.1, 2.5)


def test_scaled_lr_with_goyal_warmup_starts_at_base_rate():
    world_size = 8
    opt = make_optimizer((scale_lr(0.1, world_size),))
    schedule = LinearWarmup(opt, warmup_steps=5, start_factor=1 / world_size)
    lrs = trace(schedule, 5)[:, 0]
    assert lrs[0] == pytest.approx(0.1) and lrs[-1] == pytest.approx(0.8)


# -- validation --------------------------------------------------------------------------
@pytest.mark.parametrize("make,error,match", [
    (lambda o: StepLR(o, 0), ValueError, "step_size=0 should be >= 1"),
    (lambda o: StepLR(o, 2.0), TypeError, "step_size=2.0 should be an integer"),
    (lambda o: StepLR(o, 2, gamma=-0.1), ValueError, "gamma=-0.1"),
    (lambda o: CosineAnnealingLR(o, 0), ValueError, "T_max=0"),
    (lambda o: CosineAnnealingLR(o, 5, eta_min=-1.0), ValueError, "eta_min=-1.0"),
    (lambda o: LinearWarmup(o, 0), ValueError, "warmup_steps=0 should be >= 1"),
    (lambda o: LinearWarmup(o, 3, start_factor=1.5), ValueError, r"start_factor=1.5 .*\[0, 1\]"),
    (lambda o: WarmupCosineLR(o, 10, 10), ValueError, "total_steps=10 should be >= 11"),
    (lambda o: SequentialLR(o, [StepLR(o, 1)], milestones=[3]), ValueError,
     "1 milestones for 1 schedules"),
    (lambda o: SequentialLR(o, [StepLR(o, 1), StepLR(o, 1)], milestones=[0]), ValueError,
     r"milestones\[0\]=0 should be >= 1"),
    (lambda o: SequentialLR(o, [StepLR(o, 1), StepLR(make_optimizer(), 1)], [2]), ValueError,
     "another optimizer"),
    (lambda o: SequentialLR(o, [], []), ValueError, "empty"),
    (lambda o: StepLR(object(), 1), TypeError, "param_groups"),
])
def test_invalid_arguments(make, error, match):
    with pytest.raises(error, match=match):
        make(make_optimizer())


def test_base_class_needs_a_formula():
    with pytest.raises(NotImplementedError):
        LRScheduler(make_optimizer())


# -- the same values as torch ------------------------------------------------------------
def _torch_trace(torch, make, steps, lrs=(0.1, 0.5)):
    params = [torch.zeros(2, requires_grad=True) for _ in lrs]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)],
                          lr=lrs[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        schedule = make(torch.optim.lr_scheduler, opt)
        out = [[g["lr"] for g in opt.param_groups]]
        for _ in range(steps):
            opt.step()
            schedule.step()
            out.append([g["lr"] for g in opt.param_groups])
    return np.array(out)


@pytest.mark.parametrize("name", ["step", "cosine", "cosine_beyond_T_max", "warmup",
                                  "warmup_cosine"])
def test_matches_torch(name):
    torch = pytest.importorskip("torch")
    steps = 30
    if name == "step":
        ours = lambda o: StepLR(o, 7, gamma=0.3)  # noqa: E731
        theirs = lambda s, o: s.StepLR(o, 7, gamma=0.3)  # noqa: E731
    elif name == "cosine":
        ours = lambda o: CosineAnnealingLR(o, steps, eta_min=0.01)  # noqa: E731
        theirs = lambda s, o: s.CosineAnnealingLR(o, steps, eta_min=0.01)  # noqa: E731
    elif name == "cosine_beyond_T_max":
        ours = lambda o: CosineAnnealingLR(o, 10, eta_min=0.01)  # noqa: E731
        theirs = lambda s, o: s.CosineAnnealingLR(o, 10, eta_min=0.01)  # noqa: E731
    elif name == "warmup":
        ours = lambda o: LinearWarmup(o, 8, start_factor=0.2)  # noqa: E731
        theirs = lambda s, o: s.LinearLR(o, start_factor=0.2, end_factor=1.0,  # noqa: E731
                                         total_iters=8)
    else:
        ours = lambda o: WarmupCosineLR(o, 6, steps, start_factor=0.2)  # noqa: E731
        theirs = lambda s, o: s.SequentialLR(  # noqa: E731
            o, [s.LinearLR(o, start_factor=0.2, end_factor=1.0, total_iters=6),
                s.CosineAnnealingLR(o, steps - 6)], milestones=[6])
    got = trace(ours(make_optimizer((0.1, 0.5))), steps)
    np.testing.assert_allclose(got, _torch_trace(torch, theirs, steps), rtol=1e-10,
                               atol=1e-15)
