"""Training a model through a :class:`ParameterServer` (Downpour SGD and its sync and
bounded-staleness forms).

Each rank's optimizer takes its local step; the step's change of the
parameters (``before - after``) is pushed as the gradient and applied with
learning rate 1, and the rank continues from the parameters it pulls. With
plain SGD this is pushing ``lr * gradient``; with momentum or Adam each
rank's optimizer state stays local, as in Downpour.

With fault tolerance on, a lost rank raises
:class:`~hpcdist.exceptions.RankFailedError` from :meth:`ParameterServerTraining.step`
on every survivor; after the context's recovery (:func:`hpcdist.resilient.run`,
which restores the model from the last commit) the next step serves the
restored parameters on a new server over the survivors.
"""

from ..comm import broadcast
from .averaging import ModelAveraging
from .parameter_server import ParameterServer

__all__ = ["ParameterServerTraining"]


class ParameterServerTraining(ModelAveraging):
    """A model whose parameters live on a parameter server sharded over the ranks.

    Parameters
    ----------
    module, optimizer
        An hpcdist.nn model (not DDP-wrapped) and its optimizer.
    mode : {"sync", "async", "bounded"}, default="sync"
        As :class:`ParameterServer`.
    staleness : int, default=4
    ctx : Context, optional

    Attributes
    ----------
    server : ParameterServer
        One name per flat parameter buffer (``"flat0"``, ...); replaced by a
        new one at each :meth:`finalize`.
    """

    def __init__(self, module, optimizer, *, mode="sync", staleness=4, ctx=None):
        super().__init__(module, optimizer, ctx, {"mode": mode, "staleness": staleness})
        self.server = ParameterServer(mode=mode, staleness=staleness, ctx=self.ctx)
        self.mode, self.staleness = self.server.mode, self.server.staleness
        self._names = []
        self._earlier = {}  # the closed servers' counters
        if self.ctx.fault_tolerance is not None:
            self.ctx.on_recovery(self._after_recovery)

    def _on_start(self):
        flats = self._buffers.pack(self.replica.arrays())
        if self.steps > 0 and self.ctx.size > 1:  # resumed replicas differ: rank 0's
            for flat in flats:
                broadcast(flat, root=0, ctx=self.ctx, shape_known=True)
        self._names = [f"flat{index}" for index in range(len(flats))]
        for name, flat in zip(self._names, flats):
            self.server.set_parameters(name, flat)
        self._before = [flat.copy() for flat in flats]

    def step(self):
        """The optimizer's step, pushed to the server as a change, and the server's
        parameters pulled (waiting as the mode says): one message per slice."""
        self._start("step")
        self.optimizer.step()
        self.steps += 1
        server = self.server
        flats = self._buffers.pack(self.replica.arrays())
        for name, flat, before in zip(self._names, flats, self._before):
            before -= flat
            flat[...] = before[...] = server.push_pull(name, before, 1.0)
            self._counted(2 * flat.nbytes)
        self._buffers.unpack(self.replica.arrays())

    def finalize(self):
        """Collective: every rank's pending update applied, then the server's parameters on
        every rank, and the server closed. A later :meth:`step` serves the parameters on a
        new server. Returns self."""
        self._start("finalize")
        self.server.synchronize()
        flats = self._buffers.flats
        for name, flat in zip(self._names, flats):
            flat[...] = self.server.get_parameters(name)
        self._check_finite(flats, f"finalize (after step {self.steps})")
        self._buffers.unpack(self.replica.arrays())
        self.server.close()
        self._earlier = _combined(self._earlier, self.server.stats())
        self.server = ParameterServer(mode=self.mode, staleness=self.staleness, ctx=self.ctx)
        self._buffers = None  # the next step starts on the new server
        return self

    def _after_recovery(self):
        """The context was recovered from a lost rank: the server, whose slices went partly
        with the lost ranks, is left; the next step starts a new one (collective) from the
        parameters the model holds then (rank 0's)."""
        lost = self.server
        lost._after_recovery()
        self._earlier = _combined(self._earlier, lost.stats())
        self.server = ParameterServer(mode=self.mode, staleness=self.staleness, ctx=self.ctx)
        self._buffers = None

    def stats(self):
        """The base counters and the servers' (``pushes``, ``pulls``, ``max_staleness``...)."""
        return {**super().stats(), **_combined(self._earlier, self.server.stats())}


def _combined(earlier, later):
    """Two servers' stats as one: counts and seconds added, the largest staleness."""
    return {key: max(earlier.get(key, 0), value) if key == "max_staleness" else
            earlier.get(key, 0) + value for key, value in later.items()}

