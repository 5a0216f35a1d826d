"""Pipeline schedules: the order in which one stage runs its micro-batches.

A schedule is a list of actions ``("F", i)`` (forward of micro-batch ``i``)
and ``("B", i)`` (its backward) for one stage of ``stages``. Forwards and
backwards each go in micro-batch order, so messages between two stages are
matched in the order they are sent.

- ``"gpipe"`` (Huang et al., 2019): every forward, then every backward; a
  stage holds the activations of all ``micro_batches`` at the turn.
- ``"1f1b"`` (PipeDream-flush, Narayanan et al., 2021; Megatron-LM):
  ``stages - stage - 1`` warm-up forwards, then one forward and one backward
  in turn, then the remaining backwards; a stage holds at most
  ``stages - stage`` micro-batches.

Both leave each stage idle for a fraction ``(p - 1) / (m + p - 1)`` of an
ideal step (equal stages, ``p`` stages, ``m`` micro-batches): see
:func:`ideal_bubble` and :func:`replay_bubble`.
"""

from ..exceptions import InvalidArgumentError

__all__ = ["SCHEDULES", "schedule_actions", "ideal_bubble", "replay_bubble"]

SCHEDULES = ("gpipe", "1f1b")


def schedule_actions(schedule, stage, stages, micro_batches):
    """The actions of ``stage`` (0-based) of ``stages`` over ``micro_batches``.

    Returns
    -------
    list of tuple (str, int)
        ``("F", i)`` or ``("B", i)`` in execution order.
    """
    m = micro_batches
    if schedule == "gpipe":
        return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]
    if schedule == "1f1b":
        warmup = min(stages - stage - 1, m)
        actions = [("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            actions += [("F", warmup + i), ("B", i)]
        return actions + [("B", i) for i in range(m - warmup, m)]
    raise InvalidArgumentError(f"Pipeline: schedule={schedule!r} should be one of "
                               f"{', '.join(map(repr, SCHEDULES))}")


def ideal_bubble(stages, micro_batches):
    """``(p - 1) / (m + p - 1)``: the idle fraction of each stage in an ideal pipeline."""
    return (stages - 1) / (micro_batches + stages - 1)


def replay_bubble(schedule, forward_seconds, backward_seconds, micro_batches):
    """The bubble of a schedule replayed with measured stage durations.

    Every action starts when its stage is free and its input has arrived
    (communication taken as instantaneous), so the result shows what the
    schedule and the stages' balance cost, without the noise of ranks
    sharing cores.

    Parameters
    ----------
    schedule : {"gpipe", "1f1b"}
    forward_seconds, backward_seconds : sequence of float
        Per stage: the time of one micro-batch's forward (backward; the
        last stage's forward includes the loss).
    micro_batches : int

    Returns
    -------
    float
        The mean over stages of ``1 - busy / makespan``.
    """
    stages = len(forward_seconds)
    plans = [schedule_actions(schedule, s, stages, micro_batches) for s in range(stages)]
    done = {}  # (op, stage, micro-batch) -> finishing time
    free = [0.0] * stages
    position = [0] * stages
    while any(position[s] < len(plans[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if position[s] == len(plans[s]):
                continue
            op, i = plans[s][position[s]]
            if op == "F":
                ready = 0.0 if s == 0 else done.get(("F", s - 1, i))
                cost = forward_seconds[s]
            else:
                ready = done.get(("F", s, i)) if s == stages - 1 else done.get(("B", s + 1, i))
                cost = backward_seconds[s]
            if ready is None:
                continue
            done[(op, s, i)] = free[s] = max(free[s], ready) + cost
            position[s] += 1
            progressed = True
        if not progressed:  # pragma: no cover - the schedules above never deadlock
            raise InvalidArgumentError(f"replay_bubble: schedule {schedule!r} deadlocks")
    makespan = max(free)
    busy = [micro_batches * (f + b) for f, b in zip(forward_seconds, backward_seconds)]
    return sum(1 - b / makespan for b in busy) / stages
