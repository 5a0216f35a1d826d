"""Data parallelism and distributed training strategies.

:class:`DistributedDataParallel` (alias :data:`DDP`) averages gradients over
ranks with bucketed, overlapped nonblocking allreduces. The model-averaging
strategies wrap a model and its optimizer and average parameters instead:
:class:`LocalSGD` every few steps, :class:`ElasticAveraging` toward a center
variable, :class:`GossipSGD` with graph neighbours only,
:class:`FederatedAveraging` over sampled clients by data size.
:class:`AdaptiveBatchSize` grows the global batch by the norm test;
:func:`balance_workload` spreads tasks of known cost over ranks.
:class:`ParameterServer` serves parameters sharded over the ranks to workers
that push gradients synchronously, asynchronously or with bounded staleness.
:class:`Pipeline` splits a model into stages over ranks (GPipe or 1F1B
schedules), optionally with data-parallel replicas of the pipeline.
"""

from .adaptive_batch import AdaptiveBatchSize
from .balance import balance_workload
from .ddp import DDP, DistributedDataParallel
from .elastic import ElasticAveraging
from .enums import AggregationMethod, TrainingStrategy
from .errors import DivergenceError
from .federated import FederatedAveraging
from .gossip import GossipSGD
from .local_sgd import LocalSGD
from .parameter_server import ParameterServer
from .pipeline import Pipeline
from .ps_training import ParameterServerTraining
from .sharded import ShardedDataParallel

__all__ = ["DistributedDataParallel", "DDP", "LocalSGD", "ElasticAveraging", "GossipSGD",
           "FederatedAveraging", "AdaptiveBatchSize", "TrainingStrategy", "AggregationMethod",
           "DivergenceError", "balance_workload", "Pipeline", "ParameterServer",
           "ParameterServerTraining", "ShardedDataParallel"]
