"""Zero-copy views of torch tensors as arrays the collectives take, and back.

A CPU tensor is viewed as a NumPy array sharing its memory (bfloat16 through
ml_dtypes' ``bfloat16``); a CUDA tensor as a CuPy array through DLPack. The
collectives then run on the view, so results land in the tensor's own memory.
torch is imported only when a tensor is handed over (it is an optional extra).
"""

import numpy as np
from ml_dtypes import bfloat16

from ..exceptions import InvalidArgumentError

__all__ = ["tensor_view", "tensor_from_array"]


def tensor_view(tensor):
    """A NumPy (CPU) or CuPy (CUDA) array sharing ``tensor``'s memory.

    Parameters
    ----------
    tensor : torch.Tensor
        Contiguous (a non-contiguous tensor raises ``ValueError``: call
        ``.contiguous()``, which copies). Autograd is bypassed: the view
        reads and writes the values.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
    """
    import torch  # an optional extra: only loaded once a tensor is passed

    if not tensor.is_contiguous():
        raise InvalidArgumentError(f"a non-contiguous tensor of shape {tuple(tensor.shape)} has no "
                                   "zero-copy view; pass tensor.contiguous() (a copy)")
    tensor = tensor.detach()
    if tensor.is_cuda:
        import cupy

        return cupy.from_dlpack(tensor)
    if tensor.device.type != "cpu":
        raise InvalidArgumentError(
            f"tensors on {tensor.device} are not supported; use CPU or CUDA tensors")
    if tensor.dtype == torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(bfloat16)
    return tensor.numpy()


def tensor_from_array(array):
    """A tensor sharing ``array``'s memory: a CPU tensor for a NumPy array
    (bfloat16 included), a CUDA tensor (through DLPack) for a CuPy array."""
    import torch

    if not isinstance(array, np.ndarray):
        return torch.from_dlpack(array)
    if array.dtype == bfloat16:
        return torch.from_numpy(array.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(array)
