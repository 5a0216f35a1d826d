"""The installed version of hpcdist."""

__version__ = "0.1.0"
