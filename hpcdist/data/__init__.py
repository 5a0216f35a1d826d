"""Data for distributed training: partitions, samplers, mini-batches, built-in data sets.

Partitioning
    DataPartitioner(total_size, world_size=None)
        Contiguous balanced blocks: ``.get_partition(rank) -> (start, stop)``,
        ``.get_indices(rank)``, ``.partition_size(rank)``.
    shard(X, ctx=None)
        This rank's rows of an array every rank holds.
    dirichlet_partition(y, n_parts, alpha, seed=0)
        A label-skewed (non-IID) split for federated training.
Sampling and batches
    DistributedSampler(dataset_size, num_replicas=None, rank=None, *, shuffle=True,
                       seed=0, drop_last=False)
        torch-style per-rank indices; ``set_epoch(e)`` reshuffles.
    iterate_batches(n_or_indices, batch_size, *, shuffle=False, seed=None, drop_last=False)
        Index arrays of this rank's mini-batches.
    BatchIterator(*arrays, batch_size, shuffle=False, seed=None, drop_last=False, sampler=None)
        Re-iterable ``(X[batch], y[batch])`` tuples, one epoch per loop.
Dask arrays (optional extra ``dask``)
    from_dask(array, ctx=None): this rank's rows of a lazy Dask array, computed here.
    to_dask(local, ctx=None, root=0): the ranks' rows as one Dask array on ``root``.
Data sets (each returns this rank's rows ``(X_local, y_local)``)
    load_digits, make_blobs, make_classification; get_dataset(name, ctx=None, **kwargs)
    with ``name`` in DATASETS.

Nothing here communicates; the default context (and MPI) is touched only when
a ``ctx``/``world_size``/``num_replicas``/``rank`` argument is left to default.
"""
from .batches import BatchIterator, iterate_batches
from .dask_arrays import from_dask, to_dask
from .datasets import DATASETS, get_dataset, load_digits, make_blobs, make_classification
from .hdf5 import load_hdf5, save_hdf5
from .non_iid import dirichlet_partition
from .partition import DataPartitioner, shard
from .sampler import DistributedSampler

__all__ = [
    "DataPartitioner", "shard", "DistributedSampler", "iterate_batches", "BatchIterator",
    "DATASETS", "get_dataset", "load_digits", "make_blobs", "make_classification",
    "load_hdf5", "save_hdf5", "from_dask", "to_dask", "dirichlet_partition",
]
