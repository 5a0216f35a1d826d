"""The names of the training strategies and of the ways replicas are combined.

Both enums are ``str`` subclasses: ``TrainingStrategy.LOCAL_SGD == "local_sgd"``,
so wherever hpcdist takes one it takes the string too.
"""

import enum

__all__ = ["TrainingStrategy", "AggregationMethod"]


class TrainingStrategy(str, enum.Enum):
    """How replicas of a model train together (``MLPClassifier(strategy=...)``)."""

    DATA_PARALLEL = "data_parallel"
    LOCAL_SGD = "local_sgd"
    ELASTIC_AVERAGING = "easgd"
    DECENTRALIZED = "gossip"
    FEDERATED = "federated"
    PARAMETER_SERVER = "parameter_server"
    PIPELINE = "pipeline"

    def __str__(self):
        return self.value


class AggregationMethod(str, enum.Enum):
    """How a strategy combines replicas: in step, asynchronously, or elastically."""

    SYNCHRONOUS = "sync"
    ASYNCHRONOUS = "async"
    ELASTIC_AVERAGING = "elastic"

    def __str__(self):
        return self.value
