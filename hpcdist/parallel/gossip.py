"""Decentralized gossip SGD: each rank averages with its neighbours only, every step.

D-PSGD (Lian et al., 2017). After every local step each rank exchanges its
parameters with its neighbours in a distributed-graph topology (one MPI
neighbour collective, :func:`hpcdist.comm.neighbors.neighbor_allgather`)
and takes their Metropolis-Hastings weighted average (see
:mod:`hpcdist.parallel.topologies`). The bytes a rank sends per step depend
on its degree, not on the number of ranks; on the complete graph every
weight is ``1/size`` and gossip trains exactly like data parallelism with
plain SGD.

NaN or infinity found after an average on one rank reaches every rank
within the graph's diameter (a flag travels with the parameters), so every
rank raises :class:`~hpcdist.parallel.DivergenceError` at the same step,
``diameter`` steps after the first rank saw it, naming that first step.
"""

from .._arrays import array_module
from ..comm.checks import mark_raised_on_every_rank
from .averaging import ModelAveraging, all_finite
from .errors import DivergenceError
from .topologies import diameter, mixing_weights, topology_peers

__all__ = ["GossipSGD"]

_NONE = -1.0  # the flag when no rank has seen NaN or infinity


class GossipSGD(ModelAveraging):
    """Decentralized SGD with neighbour averaging (D-PSGD).

    Parameters
    ----------
    module, optimizer
        As for :class:`~hpcdist.parallel.LocalSGD`.
    topology : {"ring", "exponential", "complete"} or dict, default="ring"
        Who averages with whom; a dict ``{rank: [peers]}`` must name every
        rank, be symmetric and connected.
    ctx : Context, optional

    Attributes
    ----------
    peers : list of int
        This rank's neighbours.
    graph : Context or None
        The distributed-graph context the exchanges run on (made at the
        first step); its ``stats()`` count them.
    """

    _extra_slots = 1  # how many steps ago a rank first saw NaN or infinity (-1: never)

    def __init__(self, module, optimizer, *, topology="ring", ctx=None):
        super().__init__(module, optimizer, ctx, {"topology": topology})
        all_peers = topology_peers(topology, self.ctx.size)
        self.topology = topology
        self.peers = all_peers[self.ctx.rank]
        self._self_weight, self._weights = mixing_weights(all_peers, self.ctx.rank)
        self._diameter = diameter(all_peers)
        self._age = _NONE
        self.graph = None

    def _on_start(self):
        if self.ctx.size > 1:
            self.graph = self.ctx.graph(self.peers)

    def step(self):
        """The optimizer's step, then the weighted average with the neighbours (collective)."""
        self._start("step")
        self.optimizer.step()
        self.steps += 1
        if self.graph is None:
            return
        buffers = self._buffers
        flats = buffers.pack(self.replica.arrays())
        buffers.extras()[...] = self._age
        neighbour_ages = None
        for flat in flats:
            gathered = self.graph.neighbor_allgather(flat)  # (n_peers, flat.size)
            if neighbour_ages is None:
                neighbour_ages = gathered[:, -1].tolist()
            mixed = array_module(flat).asarray(self._weights, dtype=flat.dtype) @ gathered
            flat *= self._self_weight
            flat += mixed
        self._counted(buffers.nbytes * len(self.peers))
        buffers.unpack(self.replica.arrays())
        self._track_divergence(flats, neighbour_ages)

    def _track_divergence(self, flats, neighbour_ages):
        """Update the NaN flag; raise on every rank once it has crossed the graph."""
        ages = [age + 1 for age in neighbour_ages if age >= 0]
        if self._age >= 0:
            ages.append(self._age + 1)
        if not all_finite(flats):
            ages.append(0)
        if not ages:
            return
        self._age = float(max(ages))
        if self._age >= self._diameter:
            raise mark_raised_on_every_rank(DivergenceError(
                f"GossipSGD: the parameters hold NaN or infinity after the average at step "
                f"{self.steps - int(self._age)} on some rank; every rank raises at step "
                f"{self.steps}, once the news has crossed the topology (diameter "
                f"{self._diameter}); lower the learning rate, look for NaN in the inputs, "
                "or clip the gradients"))

    def _on_finalize(self):
        self._age = _NONE
