"""State, commit and run without a loss (any MPI; one process)."""
import numpy as np
import pytest

import hpcdist
from hpcdist import nn
from hpcdist.nn.optim import SGD
from hpcdist.resilient import State, TorchState, run


def test_commit_and_restore_keep_the_last_commit():
    model = nn.Linear(3, 2, dtype=np.float64, random_state=0)
    optimizer = SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = State(model=model, optimizer=optimizer, step=0, history=np.zeros(3))
    state.commit()
    model.weight.data += 1
    state.step, state.history[:] = 5, 7
    weight = model.weight.data.copy()
    state.commit()                        # the second commit reuses the first one's arrays
    model.weight.data += 1
    state.step, state.history[:] = 9, 8
    state.restore()
    assert np.array_equal(model.weight.data, weight)
    assert state.step == 5 and (state.history == 7).all()
    assert model.weight is optimizer.param_groups[0]["params"][0]   # restored in place


def test_commits_hold_copies_of_the_model_and_optimizer_arrays():
    # a commit reads the arrays themselves (no state_dict copies) and copies them into
    # its own: training in place afterwards leaves every commit as it was
    model = nn.Linear(3, 2, dtype=np.float64, random_state=0)
    optimizer = SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step():
        model.weight.grad = np.ones_like(model.weight.data)
        model.bias.grad = np.ones_like(model.bias.data)
        optimizer.step()

    step()
    state = State(model=model, optimizer=optimizer)
    for _ in range(2):                    # the first commit, then one into its arrays
        state.commit()
        weight = model.weight.data.copy()
        momentum = optimizer.state_dict()["state"][0]["momentum_buffer"].copy()
        step()
        step()
        assert not np.array_equal(model.weight.data, weight)
        state.restore()
        assert np.array_equal(model.weight.data, weight)
        assert np.array_equal(optimizer.state_dict()["state"][0]["momentum_buffer"], momentum)


def test_torch_state_restores_model_and_optimizer():
    torch = pytest.importorskip("torch")
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = TorchState(model=model, optimizer=optimizer, epoch=1)
    model(torch.ones(4, 3)).sum().backward()
    optimizer.step()
    state.commit()
    saved = model.weight.detach().clone()
    for _ in range(2):
        model(torch.ones(4, 3)).sum().backward()
        optimizer.step()
    state.epoch = 3
    state.restore()
    assert torch.equal(model.weight, saved) and state.epoch == 1


def test_bad_use_is_named(ctx):
    state = State(step=0)
    with pytest.raises(AttributeError, match="State has no value 'stpe'; it holds step"):
        state.stpe
    with pytest.raises(hpcdist.InvalidArgumentTypeError, match="is not callable"):
        state.register_reset_callbacks([1])
    with pytest.raises(hpcdist.InvalidArgumentError, match="nothing committed yet"):
        State(x=1).restore()
    with pytest.raises(hpcdist.InvalidArgumentTypeError, match="hpcdist.resilient.State"):
        run(lambda state: None)({"step": 0})


def test_run_commits_at_entry_and_returns_trains_result(ctx):
    state = State(step=0)
    calls = []
    state.register_reset_callbacks([lambda: calls.append("reset")])

    @run
    def train(state, extra):
        assert state.committed
        state.step += extra
        return state.step

    assert train(state, 3) == 3 and calls == []
