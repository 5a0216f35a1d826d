"""hpcdist for PyTorch users (optional extra ``torch``): collectives on tensors, a
Horovod-style ``DistributedOptimizer`` and parameter broadcasts, all over hpcdist's
MPI collectives.

Tensors travel zero-copy (:mod:`hpcdist.comm.tensors`): a CPU tensor as a NumPy
view of its memory, a CUDA tensor through DLPack into the CUDA-aware or staged
path.

Examples
--------
>>> import hpcdist.torch as hvd                                   # doctest: +SKIP
>>> hvd.broadcast_parameters(model, root=0)                       # doctest: +SKIP
>>> opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
...                                model.named_parameters())      # doctest: +SKIP
>>> loss_fn(model(x), y).backward(); opt.step()                   # doctest: +SKIP
"""

from .collectives import allgather, allreduce, alltoall, broadcast, reduce_scatter
from .optimizer import DistributedOptimizer
from .sharded_module import FullyShardedModule
from .sharded_optimizer import ShardedOptimizer
from .state import broadcast_optimizer_state, broadcast_parameters

__all__ = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall",
           "DistributedOptimizer", "ShardedOptimizer", "FullyShardedModule",
           "broadcast_parameters", "broadcast_optimizer_state"]
