"""What a pipeline stage keeps between a micro-batch's forward and its backward.

hpcdist.nn layers remember in ``forward`` what ``backward`` needs (the input,
masks, normalised values) in plain attributes, one micro-batch at a time. A
stage with several micro-batches in flight saves those attributes after each
forward (:func:`capture`, a shallow copy: the arrays are shared, not copied)
and puts them back before that micro-batch's backward (:func:`restore`).
:class:`BufferPool` recycles the receive buffers of the point-to-point
messages, which the saved attributes may reference until the backward ran.
"""

__all__ = ["capture", "restore", "stashed_bytes", "BufferPool"]

_REGISTRIES = ("_parameters", "_buffers", "_modules", "training")


def capture(module):
    """The per-forward state of ``module`` and its sub-modules (a shallow copy)."""
    return [(sub, {key: value for key, value in sub.__dict__.items() if key not in _REGISTRIES})
            for sub in module.modules()]


def restore(snapshot):
    """Put back the state :func:`capture` returned."""
    for sub, state in snapshot:
        sub.__dict__.update(state)


def stashed_bytes(snapshot):
    """Bytes of the distinct arrays a snapshot references (tuples and lists followed)."""
    seen, total, pending = set(), 0, [value for _, state in snapshot for value in state.values()]
    while pending:
        value = pending.pop()
        if isinstance(value, (tuple, list)):
            pending.extend(value)
        elif hasattr(value, "nbytes") and hasattr(value, "shape") and id(value) not in seen:
            seen.add(id(value))
            total += int(value.nbytes)
    return total


class BufferPool:
    """Receive buffers by (shape, dtype), reused across micro-batches and steps.

    Parameters
    ----------
    xp : module
        ``numpy`` or ``cupy``: where the buffers live.
    """

    def __init__(self, xp):
        self.xp = xp
        self._free = {}
        self.allocated = 0

    def take(self, shape, dtype):
        """A buffer of ``shape`` and ``dtype`` (its contents are undefined)."""
        free = self._free.get((shape, dtype))
        if free:
            return free.pop()
        self.allocated += 1
        return self.xp.empty(shape, dtype=dtype)

    def give(self, buffer):
        """Return ``buffer`` for reuse."""
        self._free.setdefault((tuple(buffer.shape), buffer.dtype), []).append(buffer)
