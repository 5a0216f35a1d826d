"""Data parallelism and distributed training strategies.

:class:`DistributedDataParallel` (alias :data:`DDP`) averages gradients over
ranks with bucketed, overlapped nonblocking allreduces.
"""

from .ddp import DDP, DistributedDataParallel

__all__ = ["DistributedDataParallel", "DDP"]
