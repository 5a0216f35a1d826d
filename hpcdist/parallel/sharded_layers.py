"""Stage 3 of sharded data parallelism: each layer's parameters gathered only while it runs.

Every sub-module that owns trainable parameters is a *unit*. Hooks on it
allgather its parameters (every rank's rows) just before its forward and its
backward pass and release them right after, so a rank holds whole parameters
of one or two layers at a time. While a unit computes, the next one's
parameters are already being gathered on the communication thread (the next
in the forward order seen last, or the previous one in the backward pass).
When a unit's backward pass is done its gradients are reduce-scattered to
their owners.
"""

from functools import partial

from ..comm import allgather
from ..nn.module import array_module
from .sharded_rows import released

__all__ = ["LayerGathering"]


class LayerGathering:
    """The stage-3 hooks of one wrapped module.

    Parameters
    ----------
    module : hpcdist.nn.Module
    shard_of : dict
        ``id(parameter) -> RowShard`` of the trainable parameters.
    owner : ShardedDataParallel
        Gives the context, the communication thread, the no-sync flag and the
        reduction of gradients.
    """

    def __init__(self, module, shard_of, owner):
        self.owner = owner
        self.units = []
        for _, sub in module.named_modules():
            shards = [shard_of[id(p)] for p in sub._parameters.values()
                      if p is not None and id(p) in shard_of]
            if not shards:
                continue
            index = len(self.units)
            self.units.append(shards)
            sub.register_forward_pre_hook(partial(self._before_forward, index))
            sub.register_forward_hook(partial(self._after_forward, index))
            sub.register_backward_pre_hook(partial(self._before_backward, index))
            sub.register_backward_hook(partial(self._after_backward, index))
        self._gathered = set()
        self._prefetched = {}
        self._order = list(range(len(self.units)))  # the forward order seen last
        self._recording = None
        self._reduced = set()

    # -- the forward order ------------------------------------------------------------------
    def start_forward(self):
        """Record the order in which units run during the coming forward pass."""
        self._recording = []

    def end_forward(self):
        if self._recording:
            seen = set(self._recording)
            self._order = self._recording + [i for i in range(len(self.units)) if i not in seen]
        self._recording = None

    def _neighbour(self, index, step):
        order = self._order
        position = order.index(index) + step
        return order[position] if 0 <= position < len(order) else None

    # -- hooks ----------------------------------------------------------------------------
    def _before_forward(self, index, module, args):
        if self._recording is not None and index not in self._recording:
            self._recording.append(index)
        self.gather(index)
        self._prefetch(self._neighbour(index, 1))

    def _after_forward(self, index, module, args, output):
        self.release(index)

    def _before_backward(self, index, module, grad_output):
        self.gather(index)
        self._prefetch(self._neighbour(index, -1))

    def _after_backward(self, index, module, grad_output, grad_input):
        if self.owner._sync_enabled and index not in self._reduced:
            self._reduced.add(index)
            self.owner.reduce_gradients(self.units[index])
        self.release(index)

    def reduce_remaining(self):
        """Reduce the units whose backward did not run (their gradients count as zeros)."""
        for index, shards in enumerate(self.units):
            if index not in self._reduced:
                self.owner.reduce_gradients(shards)
        self._reduced.clear()

    # -- gathering ----------------------------------------------------------------------
    def gather(self, index):
        """Whole parameters of unit ``index`` (prefetched, or gathered now)."""
        if index in self._gathered:
            return
        future = self._prefetched.pop(index, None)
        shards = self.units[index]
        wholes = _gather_all(shards, self.owner.ctx) if future is None else future.result()
        for shard, whole in zip(shards, wholes):
            shard.parameter.data = shard.whole(whole)
        self._gathered.add(index)

    def _prefetch(self, index):
        thread = self.owner._thread
        if (thread is None or index is None or index in self._gathered
                or index in self._prefetched):
            return
        self._prefetched[index] = thread.submit(_gather_all, self.units[index], thread.ctx)

    def release(self, index):
        """Drop unit ``index``'s whole parameters (their rows stay with their owners)."""
        if index not in self._gathered:
            return
        for shard in self.units[index]:
            xp = array_module(shard.piece.data)
            shard.parameter.data = released(shard.shape, shard.dtype, xp)
        self._gathered.discard(index)

    def discard_prefetched(self):
        """Wait for and drop gathers still in flight (before the rows change in a step)."""
        for future in self._prefetched.values():
            future.result()
        self._prefetched.clear()

    def release_all(self):
        self.discard_prefetched()
        for index in list(self._gathered):
            self.release(index)

    def gathered_ids(self):
        return {id(shard.parameter) for index in self._gathered for shard in self.units[index]}


def _gather_all(shards, ctx):
    """Every rank's rows of each shard's parameter, in rank order."""
    return [allgather(shard.piece.data, counts=shard.counts, ctx=ctx) for shard in shards]
