"""The layout of a model's tensors, as the agreement check compares it."""

import torch

from ..comm.agreement import Described

__all__ = ["layout_of"]


def layout_of(named_tensors):
    """``{name: "float32[10, 5]"}`` for ``(name, tensor)`` pairs (other values: their type)."""
    return {name: Described(f"{str(value.dtype).removeprefix('torch.')}{list(value.shape)}"
                            if isinstance(value, torch.Tensor) else f"a {type(value).__name__}")
            for name, value in named_tensors}
