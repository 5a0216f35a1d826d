"""The ``hpcdist`` command line."""
