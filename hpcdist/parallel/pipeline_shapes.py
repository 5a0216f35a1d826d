"""The checks and the shape exchange a pipeline runs before its schedule.

:func:`agree_batch` is one small allreduce per step: every first stage
contributes the shape of ``x``, every last stage the rows of ``y``; they must
agree, and the result tells every rank the global batch size (and whether
the batch's shape changed since the last step). :func:`probe_shapes` runs
only when it did: each stage runs its forward once per distinct micro-batch
size on zeros, in evaluation mode, and tells the next stage the shape and
dtype of its output, so that every message of the schedule travels as one raw
``Send``/``Recv`` into a buffer of a known shape. A stage that cannot take its
predecessor's output fails on every rank, naming both stages.
"""

import numpy as np

from ..comm import allgather_object, allreduce, recv, send
from ..comm.checks import raise_on_every_rank
from ..exceptions import InvalidArgumentError, InvalidArgumentTypeError

__all__ = ["agree_batch", "probe_shapes"]

_DIMS = 8  # trailing dimensions of x a signature holds
_WIDTH = 4 + _DIMS
_MISSING = -(2 ** 62)
_PROBE_TAG = 3


def _local_signature(x, y, first, last):
    """This rank's signature vector, its description and its local error (or None)."""
    signature = np.full(_WIDTH, _MISSING, dtype=np.int64)
    signature[0] = 0
    words, error = [], None
    if first:
        if not (hasattr(x, "shape") and hasattr(x, "dtype")):
            error = InvalidArgumentTypeError(
                f"Pipeline.train_step: the first stage got x={type(x).__name__}; pass the "
                "global batch as an array on every first stage (other stages pass None)")
        elif not 1 <= x.ndim <= _DIMS + 1:
            error = InvalidArgumentError(
                f"Pipeline.train_step: x has shape {tuple(x.shape)}; it needs 1 to "
                f"{_DIMS + 1} dimensions, the first one the samples")
        else:
            signature[1:4] = (x.shape[0], ord(np.dtype(x.dtype).char), x.ndim)
            signature[4:4 + x.ndim - 1] = x.shape[1:]
            words.append(f"x {np.dtype(x.dtype)}{list(x.shape)}")
    if last and error is None:
        if not hasattr(y, "shape") or y.ndim < 1:
            error = InvalidArgumentTypeError(
                f"Pipeline.train_step: the last stage got y={type(y).__name__}; pass the "
                "global targets as an array on every last stage (other stages pass None)")
        elif first and y.shape[0] != x.shape[0]:
            error = InvalidArgumentError(
                f"Pipeline.train_step: x has {x.shape[0]} rows but y has {y.shape[0]}; "
                "pass the same samples")
        else:
            signature[1] = y.shape[0]
            words.append(f"y of {y.shape[0]} rows")
    if error is not None:
        signature[0] = 1
    return signature, " and ".join(words) or "nothing", error


def agree_batch(ctx, x, y, first, last):
    """Collective: the global batch's signature, the same on every rank.

    Returns
    -------
    tuple of int
        ``signature[1]`` is the number of rows of the global batch.

    Raises
    ------
    InvalidArgumentError, InvalidArgumentTypeError
        On every rank, when a first or last stage got no array, or the first
        and last stages got batches of different shapes.
    """
    signature, described, error = _local_signature(x, y, first, last)
    if ctx.size == 1:
        if error is not None:
            raise_on_every_rank(ctx, error)
        return tuple(int(v) for v in signature)
    both = np.concatenate([signature, np.where(signature == _MISSING, _MISSING, -signature)])
    both = allreduce(both, op="max", ctx=ctx)
    if both[0] > 0:
        raise_on_every_rank(ctx, error)
    high, low = both[:_WIDTH], -both[_WIDTH:]
    if ((high != low) & (high != _MISSING)).any():
        listed = allgather_object(described, ctx=ctx)
        raise_on_every_rank(ctx, InvalidArgumentError(
            "Pipeline.train_step: the stages got different batches: "
            + ", ".join(f"rank {r} has {text}" for r, text in enumerate(listed))
            + "; every first stage must get the same global x and every last stage y "
              "with as many rows"))
    return tuple(int(v) for v in high)


def _encode(shape, dtype, failed=False):
    vector = np.zeros(_WIDTH, dtype=np.int64)
    vector[0] = 1 if failed else 0
    if not failed:
        vector[1:3] = (ord(np.dtype(dtype).char), len(shape))
        vector[3:3 + len(shape)] = shape
    return vector


def _decode(vector):
    ndim = int(vector[2])
    return tuple(int(v) for v in vector[3:3 + ndim]), np.dtype(chr(int(vector[1])))


def _probe_forward(module, shape, dtype, xp):
    """The output's (shape, dtype) for zeros in evaluation mode (no running statistics
    updated, nothing dropped); every sub-module's mode is put back afterwards."""
    modes = [(sub, sub.training) for sub in module.modules()]
    module.eval()
    try:
        out = module.forward(xp.zeros(shape, dtype=dtype))
    finally:
        for sub, training in modes:
            object.__setattr__(sub, "training", training)  # as Module.train sets it
    return tuple(out.shape), np.dtype(out.dtype)


def probe_shapes(world, line, module, stage, stages, rows, x, xp, loss=None):
    """Collective: the input and output (shape, dtype) of this stage per micro-batch size.

    Parameters
    ----------
    world : Context
        Every rank of the pipeline; a failure is raised on all of them.
    line : Context
        This replica's stages, ranked by stage.
    rows : sequence of int
        The distinct micro-batch sizes of this replica, in the same order on
        all its stages.
    x : ndarray or None
        The global batch (first stage).
    loss : callable, optional
        ``loss(output, n)`` on the last stage: computes the loss of a zero output
        of ``n`` rows, to check that the loss takes the last stage's output.

    Returns
    -------
    inputs, outputs : dict
        ``{rows: (shape, dtype)}``.
    """
    inputs, outputs, error = {}, {}, None
    for n in rows:
        if stage == 0:
            shape, dtype, failed = (n,) + tuple(x.shape[1:]), np.dtype(x.dtype), False
        else:
            shape, dtype = _decode(vector := recv(stage - 1, _PROBE_TAG, ctx=line))
            failed = bool(vector[0])
        if not failed and error is None:
            inputs[n] = (shape, dtype)
            try:
                outputs[n] = _probe_forward(module, shape, dtype, xp)
            except Exception as exc:  # noqa: BLE001 - reported on every rank below
                source = "the input x" if stage == 0 else f"the output of stage {stage - 1}"
                error = InvalidArgumentError(
                    f"Pipeline: stage {stage} cannot take {source} of shape {shape} "
                    f"({dtype}): {type(exc).__name__}: {exc}; make stage {stage}'s input "
                    "match what feeds it")
            if error is None and loss is not None:
                try:
                    loss(xp.zeros(*outputs[n]), n)
                except Exception as exc:  # noqa: BLE001 - reported on every rank below
                    error = InvalidArgumentError(
                        f"Pipeline: the loss cannot take the output of stage {stage} (the "
                        f"last) of shape {outputs[n][0]} with {n} rows of y: "
                        f"{type(exc).__name__}: {exc}")
        if stage < stages - 1:
            out = outputs.get(n, ((), np.float64))
            send(_encode(*out, failed=failed or error is not None), stage + 1, _PROBE_TAG,
                 ctx=line)
    raise_on_every_rank(world, error)
    return inputs, outputs
