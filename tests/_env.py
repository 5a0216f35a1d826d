"""The environment as it was before MPI started in this process.

Imported first by conftest.py: MPI initialisation (a singleton under Open MPI
in particular) may add process-manager variables that must not leak into the
``mpiexec`` jobs that fault tests start.
"""
import os

ORIGINAL = dict(os.environ)
