"""Benchmarks of hpcdist against its baselines.

Each module here has a ``main(argv=None) -> int`` entry point, run under MPI
(``mpiexec -n N python -m hpcdist.bench.NAME``) or through ``hpcdist bench
NAME``. Nothing is imported at package import time.
"""
