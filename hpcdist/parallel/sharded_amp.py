"""Mixed precision under sharded data parallelism: float32 master rows only (private).

:class:`hpcdist.nn.amp.MixedPrecision` keeps a float32 master copy of every
parameter beside the 16-bit compute weights. Handed to
:class:`~hpcdist.parallel.ShardedDataParallel` in place of the optimizer, it
is re-pointed at this rank's rows, as DeepSpeed's ZeRO does it:

- the compute weights stay 16-bit: they are what is gathered (stage 3 before
  each layer, stages 1-2 after the step) and their gradients are what is
  averaged (allreduced at stage 1, reduce-scattered at stages 2-3, in 16
  bits, the model's dtype, as DeepSpeed's default communication dtype);
- each rank keeps float32 masters (and the optimizer state) of its own rows
  only, unscales its rows of the averaged gradient into float32, steps them
  and rounds them into its 16-bit rows;
- an overflow found in any rank's rows skips the step on every rank (the
  scaler agrees over the wrapper's ranks).
"""

from ..comm import broadcast
from ..exceptions import InvalidArgumentError
from ..nn.module import Parameter

__all__ = ["check_mixed_precision", "mixed_precision_settings", "shard_mixed_precision"]

_OWNER = "ShardedDataParallel"


def mixed_precision_settings(amp):
    """What must agree across ranks about ``amp`` (for the wrapper's agreement check)."""
    scaler = amp.scaler
    return {"mixed precision": f"{amp.dtype} over {amp.master_dtype} masters",
            "loss scaling": (f"scale={scaler.scale}, growth={scaler.growth_factor}, "
                             f"backoff={scaler.backoff_factor}, "
                             f"interval={scaler.growth_interval}")}


def check_mixed_precision(amp, module, named, ctx):
    """Raise unless ``amp`` was built on ``module``, agrees over ``ctx``'s ranks and its
    optimizer steps the masters of every trainable parameter."""
    if amp.module is not module:
        raise InvalidArgumentError(
            f"{_OWNER}: the MixedPrecision was built on another module; build it on the module "
            "you wrap: MixedPrecision(model, ...), then ShardedDataParallel(model, amp)")
    if amp._sharding is not None:
        raise InvalidArgumentError(
            f"{_OWNER}: this MixedPrecision already trains a sharded model; build a new one "
            "for another ShardedDataParallel")
    scaler_ctx = amp.scaler.ctx
    if scaler_ctx is not None and scaler_ctx.size != ctx.size:
        raise InvalidArgumentError(
            f"{_OWNER}: the MixedPrecision agrees on overflows over {scaler_ctx.size} rank(s), "
            f"the wrapper trains over {ctx.size}; build both on the same context")
    master_of = {id(p): master for p, master in zip(amp.params, amp.master_params)}
    held = {id(p) for group in amp.optimizer.param_groups for p in group["params"]}
    missing = [name for name, p in named if id(master_of.get(id(p))) not in held]
    if missing:
        raise InvalidArgumentError(
            f"{_OWNER}: the MixedPrecision's optimizer does not step the master of "
            f"{missing[0]!r}; let MixedPrecision build the optimizer on its master_params")


def shard_mixed_precision(amp, shards, ctx, repoint_optimizer, wrapper):
    """Re-point ``amp`` at this rank's rows of each shard.

    Every rank's float32 masters are rank 0's (as the compute weights are);
    each shard gets ``master``, a float32 :class:`Parameter` of its rows, which
    the optimizer steps in place of the whole master (its state cut to the
    rows). ``amp.params`` become the 16-bit rows (whose gradients the wrapper
    fills), ``amp.master_params`` their masters, and ``amp.step()`` and
    ``amp.zero_grad()`` are the ``wrapper``'s (which steps through ``amp``).
    """
    index_of = {id(p): index for index, p in enumerate(amp.params)}
    by_master = {}
    for shard in shards:
        whole = amp.master_params[index_of[id(shard.parameter)]]
        if ctx.size > 1:
            broadcast(whole.data, root=0, shape_known=True, ctx=ctx)
        shard.master = Parameter(shard.rows_of(whole.data).copy(), requires_grad=True)
        by_master[id(whole)] = shard
    repoint_optimizer(amp.optimizer, by_master, lambda shard: shard.master)
    shard_of = {id(shard.parameter): shard for shard in shards}
    amp.params = [shard_of[id(p)].piece if id(p) in shard_of else p for p in amp.params]
    amp.master_params = [by_master[id(m)].master if id(m) in by_master else m
                         for m in amp.master_params]
    amp._grad_buffers = [None] * len(amp.params)
    amp._found_inf = None
    amp.scaler.ctx = ctx  # each rank checks only its rows: every rank must hear of an overflow
    amp._sharding = wrapper
