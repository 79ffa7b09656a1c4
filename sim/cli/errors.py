"""The CLI's error for bad input files and flags."""

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad input file or flag; printed as one line."""
