"""The open timeline recording, which every context appends its operations to."""

__all__ = ["RECORDING"]

#: the open recording of :func:`hpcdist.timeline`, when any: ``[(events, origin time)]``
RECORDING = []
