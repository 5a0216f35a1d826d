"""Layers, losses and containers with explicit forward and backward passes.

Array-module agnostic: every layer computes with NumPy or CuPy, whichever
its input belongs to.
"""

from . import optim
from .activations import GELU, ReLU, Tanh
from .layers import Dropout, Linear
from .losses import CrossEntropyLoss, MSELoss
from .module import Module, Parameter, Sequential
from .normalization import BatchNorm1d, SyncBatchNorm
from .recompute import Checkpoint
from .tensor_parallel import ColumnParallelLinear, RowParallelLinear

__all__ = [
    "Module", "Parameter", "Sequential",
    "Linear", "ReLU", "Tanh", "GELU", "Dropout",
    "BatchNorm1d", "SyncBatchNorm",
    "CrossEntropyLoss", "MSELoss", "optim",
    "ColumnParallelLinear", "RowParallelLinear", "Checkpoint",
]
