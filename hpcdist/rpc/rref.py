"""Remote references: a value that stays on the rank that computed it."""

from ..exceptions import InvalidStateError
from .agent import current_agent

__all__ = ["RRef", "create_rref"]


class RRef:
    """A reference to a value held by rank :attr:`owner`, as :func:`remote` returns.

    The value lives on its owner as long as the ``RRef`` that :func:`remote`
    returned lives (its copies, pickled to other ranks or into other calls,
    borrow it: use them while the original exists). ``to_here()`` copies the
    value to the calling rank.

    Attributes
    ----------
    owner : int
        The rank that holds the value.
    """

    def __init__(self, owner, rref_id, created=None, agent=None, epoch=0):
        self._owner = owner
        self._id = rref_id
        self._created = created   # the creating call's future; None on borrowed copies
        self._agent = agent       # the agent to tell when the original is collected
        self._epoch = epoch       # the agent's recoveries from lost ranks when it was made

    @property
    def owner(self):
        """The rank that holds the value."""
        return self._owner

    def is_owner(self):
        """Whether this rank holds the value."""
        return current_agent().rank == self._owner

    def _wait_created(self, timeout=None):
        if self._created is not None:
            self._created.result(timeout)  # the creating call's RpcError, if it failed

    def to_here(self, timeout=None):
        """The value, copied from its owner (from this rank's table on the owner).

        Parameters
        ----------
        timeout : float, optional
            Seconds to wait (RpcTimeoutError after); None waits as long as it takes.
        """
        agent = self._current("to_here")
        self._wait_created(timeout)
        return agent.call(self._owner, fetch_value, (self._id,), {}, timeout).result()

    def local_value(self):
        """The value itself, on its owner (InvalidStateError on another rank)."""
        agent = self._current("local_value")
        if agent.rank != self._owner:
            raise InvalidStateError(f"local_value() on rank {agent.rank}: the value is held by "
                                    f"rank {self._owner}; use to_here()")
        self._wait_created()
        return fetch_value(self._id)

    def _current(self, where):
        """The agent, once sure that the value still exists where this refers to."""
        agent = current_agent()
        if self._epoch != agent.epoch:
            raise InvalidStateError(
                f"{where}() of {self!r}: it was made before ranks were lost, and the value "
                "went with the old context (its owner's number may have changed too); make "
                "it again with remote() on the recovered context")
        return agent

    def __reduce__(self):
        return RRef, (self._owner, self._id, None, None, self._epoch)

    def __repr__(self):
        return f"RRef(owner={self._owner}, id={self._id})"

    def __del__(self):
        agent, created = self._agent, self._created
        if agent is None or agent._stopping or created is None or agent.epoch != self._epoch:
            return
        try:
            agent.pool.submit(_forget, agent, self._owner, self._id, created)
        except Exception:  # noqa: BLE001 - interpreter shutting down
            pass


def create_rref(agent, to, func, args, kwargs):
    """Start ``func(*args, **kwargs)`` on rank ``to``, kept there; its RRef."""
    rref_id = (agent.rank, next(agent._ids))
    created = agent.call(to, _store_value, (rref_id, func, args, kwargs), {}, None)
    return RRef(to, rref_id, created, agent, agent.epoch)


def _store_value(rref_id, func, args, kwargs):
    agent = current_agent()
    if isinstance(func, str):
        func = agent._registered(func)
    agent.rrefs[rref_id] = func(*args, **kwargs)


def fetch_value(rref_id):
    """The value of ``rref_id`` held on this rank."""
    try:
        return current_agent().rrefs[rref_id]
    except KeyError:
        raise InvalidStateError(f"RRef {rref_id} has no value on this rank: the RRef that "
                                f"remote() returned was deleted, or rpc was shut down") from None


def _delete_value(rref_id):
    current_agent().rrefs.pop(rref_id, None)


def _forget(agent, owner, rref_id, created):
    """Pool task: once the value exists, tell its owner to drop it."""
    try:
        created.exception()  # wait for creation (as a waiting pool thread)
        if not agent._stopping:
            agent.call(owner, _delete_value, (rref_id,), {}, None)
    except Exception:  # noqa: BLE001 - shut down meanwhile: nothing left to free
        pass
