"""Data parallelism and distributed training strategies.

:class:`DistributedDataParallel` (alias :data:`DDP`) averages gradients over
ranks with bucketed, overlapped nonblocking allreduces;
:func:`balance_workload` spreads tasks of known cost over ranks.
"""

from .balance import balance_workload
from .ddp import DDP, DistributedDataParallel

__all__ = ["DistributedDataParallel", "DDP", "balance_workload"]
