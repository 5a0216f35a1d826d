"""Federated averaging: sampled clients train locally, the server averages by data size.

FedAvg (McMahan et al., 2017), with every rank a client. Each
:meth:`FederatedAveraging.round` samples ``clients_per_round`` ranks with a
generator seeded by ``(seed, round)``, the same on every rank (so resuming
at round ``r`` samples as before); the sampled ranks train ``local_epochs``
over their own rows in batches of ``batch_size``; then one allreduce of the
count-weighted parameters (with the counts and losses in trailing slots)
gives every rank, sampled or not, the average weighted by the sampled
ranks' row counts. ``proximal_mu > 0`` adds FedProx's proximal term
``mu/2 * |w - w_round_start|^2`` to the local loss (Li et al., 2020).
"""

import numpy as np

from ..comm import allreduce
from ..comm.checks import validated_on_every_rank
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError
from .averaging import ModelAveraging, checked_int

__all__ = ["FederatedAveraging"]

_COUNT, _LOSS_SUM, _LOSS_ROWS = range(3)  # the trailing slots of the allreduce


class FederatedAveraging(ModelAveraging):
    """Federated averaging (FedAvg, FedProx) over the ranks.

    Parameters
    ----------
    module, optimizer
        As for :class:`~hpcdist.parallel.LocalSGD`; the optimizer's state stays
        on its rank between rounds.
    clients_per_round : int, optional
        Ranks sampled each round, 1..size (default: every rank).
    local_epochs : int, default=1
        Passes over its own rows a sampled rank makes per round.
    batch_size : int, default=32
        Rows per local step (the last batch of an epoch may be smaller).
    proximal_mu : float, default=0.0
        FedProx's proximal coefficient (>= 0; 0 is FedAvg).
    seed : int, default=0
        Seeds the sampling of clients and the local shuffling.
    ctx : Context, optional

    Attributes
    ----------
    rounds : int
        Rounds completed (part of :meth:`state_dict`).
    """

    _extra_slots = 3

    def __init__(self, module, optimizer, *, clients_per_round=None, local_epochs=1,
                 batch_size=32, proximal_mu=0.0, seed=0, ctx=None):
        super().__init__(module, optimizer, ctx, {})
        name = "FederatedAveraging"
        size = self.ctx.size
        self.clients_per_round = size if clients_per_round is None else checked_int(
            name, "clients_per_round", clients_per_round, 1, size,
            hint=f" (ranks sampled per round, at most the {size} ranks)")
        self.local_epochs = checked_int(name, "local_epochs", local_epochs, 1)
        self.batch_size = checked_int(name, "batch_size", batch_size, 1)
        self.seed = checked_int(name, "seed", seed, 0)
        if isinstance(proximal_mu, bool) or not isinstance(proximal_mu, (int, float, np.number)):
            raise InvalidArgumentTypeError(f"{name}: proximal_mu={proximal_mu!r} should be a "
                                           "number >= 0")
        if not 0.0 <= float(proximal_mu) < np.inf:
            raise InvalidArgumentError(f"{name}: proximal_mu={proximal_mu!r} should be a finite "
                                       "number >= 0 (0: plain FedAvg)")
        self.proximal_mu = float(proximal_mu)
        self._options.update(clients_per_round=self.clients_per_round,
                             local_epochs=self.local_epochs, batch_size=self.batch_size,
                             proximal_mu=self.proximal_mu, seed=self.seed)
        self.rounds = 0

    def sampled_ranks(self, round_index=None):
        """The ranks that train in round ``round_index`` (default: the next one), sorted."""
        index = self.rounds if round_index is None else int(round_index)
        generator = np.random.default_rng((self.seed, index))
        chosen = generator.choice(self.ctx.size, self.clients_per_round, replace=False)
        return sorted(int(rank) for rank in chosen)

    def round(self, X_local, y_local, loss_fn):
        """One round (collective): local training on the sampled ranks, then the weighted average.

        Parameters
        ----------
        X_local : array or tensor of shape (n_local, ...)
            This rank's rows (arrays are converted for a torch model).
        y_local : array or tensor of shape (n_local, ...)
        loss_fn : callable
            ``loss_fn(output, y)``: an hpcdist.nn loss (with ``backward()``) or a
            torch loss.

        Returns
        -------
        float
            The mean training loss over the sampled ranks' local steps (NaN when
            they have no rows).
        """
        self._start("round")
        with validated_on_every_rank(self.ctx):
            if len(X_local) != len(y_local):
                raise InvalidArgumentError(f"FederatedAveraging.round: X_local has "
                                           f"{len(X_local)} rows but y_local has {len(y_local)}")
            if not callable(loss_fn):
                raise InvalidArgumentTypeError(
                    f"FederatedAveraging.round: loss_fn={loss_fn!r} should be a callable "
                    "loss(output, y), e.g. hpcdist.nn.CrossEntropyLoss()")
        sampled = self.ctx.rank in self.sampled_ranks()
        count = len(X_local) if sampled else 0
        loss_sum = loss_rows = 0.0
        if count:
            loss_sum, loss_rows = self._train_locally(X_local, y_local, loss_fn)
        buffers = self._buffers
        flats = buffers.pack(self.replica.arrays())
        for flat in flats:
            flat *= count
        extras = buffers.extras()
        extras[_COUNT], extras[_LOSS_SUM], extras[_LOSS_ROWS] = count, loss_sum, loss_rows
        if self.ctx.size > 1:
            for flat in flats:
                allreduce(flat, op="sum", out=flat, ctx=self.ctx)
            self._counted(buffers.nbytes)
        total = float(buffers.extras()[_COUNT])
        self.rounds += 1
        if total > 0:
            for flat in flats:
                flat /= total
            self._check_finite(flats, f"round {self.rounds}")
            buffers.unpack(self.replica.arrays())
        totals = buffers.extras()
        rows = float(totals[_LOSS_ROWS])
        return float(totals[_LOSS_SUM]) / rows if rows else float("nan")

    def _train_locally(self, X, y, loss_fn):
        """``local_epochs`` shuffled passes over this rank's rows; (loss sum, rows)."""
        replica = self.replica
        X, y = replica.inputs(X, y)
        proximal = None
        if self.proximal_mu > 0:
            anchors = [array.copy() for array in replica.arrays()]
            proximal = (self.proximal_mu, anchors)
        generator = np.random.default_rng((self.seed, self.rounds, self.ctx.rank))
        loss_sum, rows_seen = 0.0, 0
        for _ in range(self.local_epochs):
            order = generator.permutation(len(X))
            for start in range(0, len(order), self.batch_size):
                rows = order[start:start + self.batch_size]
                loss = replica.local_step(replica.rows(X, rows), replica.rows(y, rows), loss_fn,
                                          proximal)
                loss_sum += loss * len(rows)
                rows_seen += len(rows)
                self.steps += 1
        return loss_sum, rows_seen

    def finalize(self):
        """Nothing to do (every rank holds the averaged model after each round); returns self."""
        return self

    def state_dict(self):
        state = super().state_dict()
        state["rounds"] = int(self.rounds)
        state["seed"] = int(self.seed)  # drawn by the caller, maybe not given again on resume
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.rounds = int(state["rounds"])
        self.seed = self._options["seed"] = int(state.get("seed", self.seed))
        return self
