"""What the model-averaging strategies share: the first step's agreement check,
coalesced averages of the parameters, the divergence check and the counters.

A strategy wraps a model (not DDP-wrapped) and its optimizer; the training
loop calls ``step()`` where it would call ``optimizer.step()``. Options are
checked on the calling rank in the constructor (no communication there) and
compared across ranks, together with the model's layout and initial values,
by the agreement check at the first ``step()``, ``round()`` or
``finalize()``.
"""

from .._arrays import array_module
from .._checks import check_int
from ..comm import allreduce, resolve_context
from ..comm.agreement import agree_config
from ..comm.checks import mark_raised_on_every_rank
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .errors import DivergenceError
from .replica import FlatBuffers, Replica

__all__ = ["ModelAveraging", "checked_int", "checked_fraction", "all_finite"]

_AGREEMENT_FIX = ("every rank must create {name} with the same options and the same model: "
                  "the same layers, shapes, dtypes and initial values (seed the model alike, "
                  "or broadcast rank 0's parameters first, e.g. "
                  "hpcdist.torch.broadcast_parameters for a torch model)")


def checked_int(owner, name, value, minimum, maximum=None, hint=""):
    """``value`` as an int in ``[minimum, maximum]``, or an error naming ``owner``, the value and
    the bounds."""
    try:
        return check_int(value, name, minimum, maximum, hint=hint)
    except TypeError as error:
        raise InvalidArgumentTypeError(f"{owner}: {error}") from None
    except ValueError as error:
        raise InvalidArgumentError(f"{owner}: {error}") from None


def checked_fraction(owner, name, value, hint=""):
    """``value`` as a float strictly between 0 and 1, or an error naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) and \
            not hasattr(value, "__float__"):
        raise InvalidArgumentTypeError(f"{owner}: {name}={value!r} should be a number in (0, 1)")
    value = float(value)
    if not 0.0 < value < 1.0:
        raise InvalidArgumentError(f"{owner}: {name}={value!r} should be in (0, 1){hint}")
    return value


def all_finite(flats):
    """Whether every value of the flat buffers is finite."""
    return all(bool(array_module(flat).isfinite(flat).all()) for flat in flats)


class ModelAveraging:
    """Base of :class:`LocalSGD`, :class:`ElasticAveraging`, :class:`GossipSGD` and
    :class:`FederatedAveraging`.

    Parameters
    ----------
    module : hpcdist.nn.Module or torch.nn.Module
    optimizer : hpcdist.nn.optim.Optimizer or torch.optim.Optimizer
    ctx : Context or None
    options : dict
        The strategy's options, compared across ranks at the first step.

    Attributes
    ----------
    steps : int
        Local optimizer steps taken.
    communication_rounds : int
        Collectives the strategy ran (averages, exchanges).
    bytes_sent : int
        This rank's payload bytes in them, as ``ctx.stats()`` counts them.
    """

    #: trailing scalar slots that travel with the parameters (see FlatBuffers)
    _extra_slots = 0

    def __init__(self, module, optimizer, ctx, options):
        self.replica = Replica(module, optimizer, type(self).__name__)
        self.module, self.optimizer = module, optimizer
        self.ctx = resolve_context(ctx)
        self._options = options
        self._buffers = None
        self.steps = 0
        self.communication_rounds = 0
        self.bytes_sent = 0
        self.ctx.on_recovery(self._after_respawn)

    def _after_respawn(self):
        """After a lost rank was replaced (fault tolerance ``"respawn"``), every rank
        runs the first step's set-up again (agreement, :meth:`_on_start`) with the
        replacement, which starts its strategy afresh."""
        if self.ctx.fault_tolerance == "respawn":
            self._buffers = None

    # -- the first step -------------------------------------------------------------------
    def _start(self, where):
        """Collective at the first call: the agreement check, then :meth:`_on_start`."""
        if self._buffers is not None:
            return
        name = type(self).__name__
        # the replicas start equal; resumed ones (steps > 0) may differ by design
        values = {"strategy": name, **self._options,
                  **self.replica.described(values=self.steps == 0)}
        agree_config(self.ctx, f"{name}.{where}", values, fix=_AGREEMENT_FIX.format(name=name))
        self._buffers = FlatBuffers(self.replica.arrays(), extra=self._extra_slots)
        self._on_start()

    def _on_start(self):
        """What a strategy sets up once the ranks agree (may communicate)."""

    # -- averages ----------------------------------------------------------------------------
    def _allreduce_parameters(self, op="mean"):
        """Pack the parameters (extra slots zeroed) and allreduce them in place; returns
        the flat buffers, not yet written back."""
        buffers = self._buffers
        flats = buffers.pack(self.replica.arrays())
        if buffers.extra:
            buffers.extras()[...] = 0
        for flat in flats:
            allreduce(flat, op=op, out=flat, ctx=self.ctx)
        self._counted(buffers.nbytes)
        return flats

    def _counted(self, nbytes):
        self.communication_rounds += 1
        self.bytes_sent += int(nbytes)

    def _check_finite(self, flats, when):
        """Raise :class:`DivergenceError` (on every rank: ``flats`` are the same there)
        unless every value is finite."""
        if not all_finite(flats):
            raise mark_raised_on_every_rank(DivergenceError(
                f"{type(self).__name__}: the parameters hold NaN or infinity after the "
                f"average at {when}; lower the learning rate, look for NaN in the inputs, "
                "or clip the gradients"))

    def finalize(self):
        """One exact average of the parameters over the ranks (collective), so that every
        rank ends with the same model.

        Returns
        -------
        self
        """
        self._start("finalize")
        if self.ctx.size > 1:
            flats = self._allreduce_parameters()
            self._check_finite(flats, f"finalize (after step {self.steps})")
            self._buffers.unpack(self.replica.arrays())
        self._on_finalize()
        return self

    def _on_finalize(self):
        """What a strategy updates once the replicas are equal (e.g. EASGD's center)."""

    # -- counters and state -------------------------------------------------------------------
    def stats(self):
        """``{"steps", "communication_rounds", "bytes_sent"}`` of this rank."""
        return {"steps": self.steps, "communication_rounds": self.communication_rounds,
                "bytes_sent": self.bytes_sent}

    def state_dict(self):
        """The strategy's own state (counters; subclasses add theirs), the same on every rank."""
        return {"steps": int(self.steps), "communication_rounds": int(self.communication_rounds),
                "bytes_sent": int(self.bytes_sent)}

    def load_state_dict(self, state):
        """Restore from :meth:`state_dict`; returns self."""
        self.steps = int(state["steps"])
        self.communication_rounds = int(state["communication_rounds"])
        self.bytes_sent = int(state["bytes_sent"])
        return self
