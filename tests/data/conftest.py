"""Helpers shared by the data tests."""

from hpcdist.comm import Context


def explicit_context(rank, size):
    """Rank ``rank`` of ``size``: a Context holding only its rank and size.

    Made without a communicator, it lets a test compute every rank's share
    in one process; the data functions read nothing else from it.
    """
    ctx = Context.__new__(Context)
    ctx.rank, ctx.size = rank, size
    return ctx
