"""The ``tricut`` command line and its plots."""

from .main import main

__all__ = ["main"]
