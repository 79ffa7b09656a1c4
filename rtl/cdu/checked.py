"""A component whose constructor arguments are checked before the object exists."""

import inspect

from amaranth.lib import wiring

__all__ = ["CheckedComponent"]


class CheckedComponent(wiring.Component):
    """A :class:`~amaranth.lib.wiring.Component` that checks its arguments in ``__new__``.

    Amaranth warns (``UnusedElaboratable``) about every elaboratable that is created and never
    elaborated, one whose ``__init__`` raised included. A subclass defines the static method
    ``_check(**params)``, called with ``__init__``'s parameters by name (defaults applied), which
    raises ``ValueError`` naming the first bad parameter and its value; so after a bad
    argument no object exists. An argument ``__init__`` does not take raises ``TypeError``.
    """

    def __new__(cls, *args, **kwargs):
        cls.check(*args, **kwargs)
        # src_loc_at=1: the source location Amaranth records is that of the caller
        return super().__new__(cls, src_loc_at=1)

    @classmethod
    def check(cls, *args, **kwargs):
        """Check constructor arguments without constructing; returns what ``_check`` returns."""
        bound = inspect.signature(cls.__init__).bind(None, *args, **kwargs)
        bound.apply_defaults()
        params = dict(bound.arguments)
        params.pop(next(iter(params)))      # self
        return cls._check(**params)

    @staticmethod
    def _check(**params):
        raise NotImplementedError
