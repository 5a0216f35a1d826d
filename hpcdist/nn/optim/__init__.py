"""Optimizers and learning-rate schedules, array-module agnostic.

Optimizers update ``Parameter.data`` in place from ``Parameter.grad`` with
PyTorch's update rules; schedules set the learning rate of their optimizer's
parameter groups step by step; :func:`scale_lr` is the linear scaling rule
for data-parallel training.
"""

from .adam import Adam, AdamW
from .optimizer import Optimizer
from .schedules import (
                        CosineAnnealingLR,
                        LinearWarmup,
                        LRScheduler,
                        SequentialLR,
                        StepLR,
                        WarmupCosineLR,
                        scale_lr,
)
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "LRScheduler", "StepLR", "CosineAnnealingLR",
           "LinearWarmup", "SequentialLR", "WarmupCosineLR", "scale_lr"]
