"""The one place that loads ``mpi4py.MPI``.

Importing any part of hpcdist starts no MPI: ``mpi4py.MPI`` (whose import
initialises MPI, as the user's ``mpi4py.rc`` says) is imported here on first
communication, as :func:`mpi4py.run`'s ``import_MPI`` does. Every other module
of :mod:`hpcdist.comm` names MPI through :data:`MPI`, a stand-in whose first
attribute lookup loads the real module; mpi4py's settings are never changed.
"""

import sys
import types

__all__ = ["MPI", "load_mpi", "load_pkl5", "mpi_is_loaded", "world_rank", "library_version",
           "library_name"]


def load_mpi():
    """The ``mpi4py.MPI`` module, imported (and so MPI initialised) on first call."""
    from mpi4py import MPI as module  # the only import of mpi4py.MPI in hpcdist
    return module


def load_pkl5():
    """``mpi4py.util.pkl5`` (pickle protocol 5 messages, out-of-band buffers, counts over
    2 GiB), imported on first call: it loads ``mpi4py.MPI`` too."""
    from mpi4py.util import pkl5  # beside the MPI loader: the same door
    return pkl5


def mpi_is_loaded():
    """Whether ``mpi4py.MPI`` has been imported, by hpcdist or by the user."""
    return "mpi4py.MPI" in sys.modules


def library_version():
    """``MPI_Get_library_version``'s text, without the NUL bytes Open MPI ends it with."""
    return MPI.Get_library_version().replace("\x00", "").strip()


def library_name():
    """The first line of :func:`library_version`, its spaces collapsed (``"Open MPI v5.0.11,
    ..."``, ``"MPICH Version: 4.3.0"``)."""
    return " ".join(library_version().splitlines()[0].split())


def world_rank():
    """This process's rank in ``MPI.COMM_WORLD``, or 0 while MPI is not initialised.

    Starts no MPI (a per-rank default, e.g. a seed, before any communication).
    """
    if mpi_is_loaded() and MPI.Is_initialized() and not MPI.Is_finalized():
        return MPI.COMM_WORLD.Get_rank()
    return 0


class _MPIOnFirstUse(types.ModuleType):
    """Stands for ``mpi4py.MPI`` and loads it on the first attribute lookup.

    The loaded module's names are then copied into this object and it
    becomes a plain module, so later lookups (``MPI.SUM`` on a hot path)
    cost what a module attribute costs.
    """

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        vars(self).update((key, value) for key, value in vars(load_mpi()).items()
                          if not key.startswith("__"))
        self.__class__ = types.ModuleType  # no more __getattr__ hook on later lookups
        return getattr(self, name)


#: ``mpi4py.MPI``, loaded on first attribute lookup
MPI = _MPIOnFirstUse("mpi4py.MPI")
