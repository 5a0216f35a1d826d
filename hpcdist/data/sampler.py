"""DistributedSampler: each rank's share of a (shuffled) epoch, as in torch.

Every rank computes the same permutation of the whole data set from
``(seed, epoch)``, without communication, and takes every
``num_replicas``-th index starting at its rank.
"""
import contextlib

import numpy as np

from .._checks import check_bool, check_int
from ..comm import resolve_context
from ..comm.agreement import agree_config
from ..comm.checks import validated_on_every_rank
from ._checks import check_rank, check_seed

__all__ = ["DistributedSampler"]


class DistributedSampler:
    """This rank's indices of a data set that every rank can address in full.

    The semantics are those of ``torch.utils.data.DistributedSampler``:

    1. The epoch's order is ``np.random.default_rng((seed, epoch))``'s
       permutation of ``range(dataset_size)`` (``shuffle=True``), or
       ``range(dataset_size)`` (``shuffle=False``): identical on every rank,
       different for every epoch.
    2. It is padded by wrap-around (repeating its first indices) to a
       multiple of ``num_replicas``, or, with ``drop_last=True``, its tail is
       dropped to the largest multiple.
    3. Rank ``r`` takes ``order[r::num_replicas]``.

    So every rank gets the same count, ``len(sampler)``; the ranks' indices
    together cover the whole data set, and without padding they are
    disjoint.

    Parameters
    ----------
    dataset_size : int or sized
        Number of samples (>= 0), or an object with ``len()`` (an array, a
        data set) whose length is used.
    num_replicas : int, optional
        Number of ranks sharing the data set; default: the size of the
        default context. With neither ``num_replicas`` nor ``rank`` given,
        every rank of the default context must make its sampler (collective):
        a bad value on one rank raises on all, and ``dataset_size``,
        ``shuffle``, ``seed`` and ``drop_last`` must agree across ranks
        (``ConfigMismatchError`` names the one that does not).
    rank : int, optional
        This rank, in ``0..num_replicas - 1``; default: the rank in the
        default context.
    shuffle : bool, default=True
    seed : int, default=0
        Non-negative; must be the same on every rank.
    drop_last : bool, default=False
        Drop the tail instead of padding.

    Attributes
    ----------
    dataset_size, num_replicas, rank, seed, epoch : int
    num_samples : int
        Indices per rank per epoch (``len(sampler)``).
    total_size : int
        ``num_samples * num_replicas``.

    Examples
    --------
    >>> sampler = DistributedSampler(10, num_replicas=4, rank=1, shuffle=False)
    >>> list(sampler)
    [1, 5, 9]
    >>> for epoch in range(3):                       # doctest: +SKIP
    ...     sampler.set_epoch(epoch)                 # a new order every epoch
    ...     for batch in iterate_batches(sampler.indices(), 32):
    ...         train_step(X[batch], y[batch])
    """

    def __init__(self, dataset_size, num_replicas=None, rank=None, *, shuffle=True, seed=0,
                 drop_last=False):
        # with neither given, every rank of the default context makes its sampler
        # together: a bad value on one rank fails all, and the settings must agree
        ctx = resolve_context() if num_replicas is None and rank is None else None
        with validated_on_every_rank(ctx) if ctx is not None else contextlib.nullcontext():
            if (hasattr(dataset_size, "__len__") and getattr(dataset_size, "ndim", 1)
                    and not isinstance(dataset_size, (str, bytes))):
                dataset_size = len(dataset_size)
            self.dataset_size = check_int(dataset_size, "dataset_size", minimum=0)
            if num_replicas is None or rank is None:
                default = ctx if ctx is not None else resolve_context()
                num_replicas = default.size if num_replicas is None else num_replicas
                rank = default.rank if rank is None else rank
            self.num_replicas = check_int(num_replicas, "num_replicas", minimum=1)
            self.rank = check_rank(rank, self.num_replicas, world_name="num_replicas")
            self.shuffle = check_bool(shuffle, "shuffle")
            self.seed = check_seed(seed)
            self.drop_last = check_bool(drop_last, "drop_last")
        self._ctx = ctx  # made together on ctx's ranks: set_epoch is compared there too
        if ctx is not None:
            ctx.run_setup(self._agree)
        self.epoch = 0
        if self.drop_last:
            self.num_samples = self.dataset_size // self.num_replicas
        else:
            self.num_samples = -(-self.dataset_size // self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def _agree(self):
        """The ranks made their samplers with the same settings (collective)."""
        agree_config(self._ctx, "DistributedSampler", {
            "dataset_size": self.dataset_size, "shuffle": self.shuffle, "seed": self.seed,
            "drop_last": self.drop_last})

    def __repr__(self):
        return (f"DistributedSampler(dataset_size={self.dataset_size}, num_replicas="
                f"{self.num_replicas}, rank={self.rank}, shuffle={self.shuffle}, "
                f"seed={self.seed}, drop_last={self.drop_last})")

    def set_epoch(self, epoch):
        """Choose the epoch whose order the next iteration gives.

        Call it with the same value on every rank at the start of each
        epoch; without it every epoch has epoch 0's order. A sampler made
        with the default ``num_replicas`` and ``rank`` compares ``epoch``
        across ranks (collective: a different epoch on one rank would
        duplicate and lose rows) and raises ``ConfigMismatchError`` on every
        rank when it differs.
        """
        ctx = getattr(self, "_ctx", None)
        if ctx is None:
            self.epoch = check_int(epoch, "epoch", minimum=0)
            return
        with validated_on_every_rank(ctx):
            epoch = check_int(epoch, "epoch", minimum=0)
        agree_config(ctx, "DistributedSampler.set_epoch", {"epoch": epoch},
                     fix="call set_epoch with the same epoch on every rank")
        self.epoch = epoch

    def __getstate__(self):
        """The sampler without its context (a pickled copy compares nothing)."""
        return {key: value for key, value in self.__dict__.items() if key != "_ctx"}

    def indices(self):
        """This rank's indices for the current epoch.

        Returns
        -------
        ndarray of int64, shape (num_samples,)
        """
        n = self.dataset_size
        if self.shuffle:
            order = np.random.default_rng((self.seed, self.epoch)).permutation(n)
        else:
            order = np.arange(n, dtype=np.int64)
        if self.total_size > n:  # pad by wrap-around (n > 0 here)
            order = np.resize(order, self.total_size)
        return order[self.rank:self.total_size:self.num_replicas].astype(np.int64, copy=False)

    def __iter__(self):
        return iter(self.indices().tolist())

    def __len__(self):
        return self.num_samples
