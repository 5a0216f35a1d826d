"""Models, data and training loops shared by the strategy tests (hpcdist.nn and torch)."""
import numpy as np
import pytest
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from hpcdist import nn
from hpcdist.nn.optim import SGD
from tests.parallel.test_ddp import GLOBAL_BATCH, N_CLASSES, N_FEATURES, N_HIDDEN, local_rows
from tests.parallel.test_ddp import make_data as step_data

__all__ = ["GLOBAL_BATCH", "KINDS", "need", "make_model", "make_optimizer", "make_loss",
           "backward", "parameters", "step_data", "local_rows", "whole_batch_training", "digits"]

KINDS = ["hpcdist.nn", "torch"]


def need(kind):
    """Skip a torch case (with the reason) when the torch extra is missing."""
    if kind == "torch":
        return pytest.importorskip("torch", reason="the torch extra is not installed")
    return None


def make_model(kind, n_in=N_FEATURES, hidden=N_HIDDEN, n_out=N_CLASSES, seed=0):
    """A float64 MLP, the same on every rank for the same seed."""
    if kind == "torch":
        import torch
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(n_in, hidden), torch.nn.Tanh(),
                                   torch.nn.Linear(hidden, n_out)).double()
    return nn.Sequential(nn.Linear(n_in, hidden, dtype=np.float64, random_state=seed), nn.Tanh(),
                         nn.Linear(hidden, n_out, dtype=np.float64, random_state=seed + 1))


def make_optimizer(kind, model, lr=0.1, momentum=0.0):
    if kind == "torch":
        import torch
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    return SGD(list(model.parameters()), lr=lr, momentum=momentum)


def make_loss(kind):
    if kind == "torch":
        import torch
        return torch.nn.CrossEntropyLoss()
    return nn.CrossEntropyLoss()


def backward(kind, model, loss_fn, X, y):
    """Zero the gradients, then forward and backward on one batch (no step)."""
    if kind == "torch":
        import torch
        model.zero_grad()
        loss_fn(model(torch.as_tensor(X)), torch.as_tensor(y)).backward()
        return
    model.zero_grad()
    loss_fn(model(X), y)
    model.backward(loss_fn.backward())


def parameters(kind, model):
    """The parameters as float64 NumPy arrays (copies), in order."""
    if kind == "torch":
        return [p.detach().numpy().copy() for p in model.parameters()]
    return [p.data.copy() for p in model.parameters()]


def whole_batch_training(kind, steps, X, y, lr=0.1):
    """One process, the whole global batch per step, plain SGD: the reference."""
    model = make_model(kind)
    optimizer = make_optimizer(kind, model, lr)
    loss_fn = make_loss(kind)
    for step in range(steps):
        rows = slice(step * GLOBAL_BATCH, (step + 1) * GLOBAL_BATCH)
        backward(kind, model, loss_fn, X[rows], y[rows])
        optimizer.step()
    return parameters(kind, model)


def digits(rank, size):
    """Digits scaled to [0, 1]: this rank's balanced share of the 80 % training rows, and
    the held-out 20 % (the same on every rank)."""
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(X / 16.0, y, test_size=0.2,
                                                        random_state=0, stratify=y)
    rows = np.array_split(np.arange(len(X_train)), size)[rank]
    return X_train, y_train, rows, X_test, y_test
