"""A function of a framework's module replaced by a wrapper, and put back.

Frameworks emit no event for some phases (JAX's backend init, PyTorch's
process-group start, the first CUDA init, ``torch.compile`` before
TorchDynamo is imported): the adapters wrap the function that runs them.
:class:`AttributePatch` remembers the original and puts it back on
:meth:`~AttributePatch.remove` only while the wrapper is still the module's
attribute (whoever replaced it after us keeps theirs, and ours falls
through, as the wrappers check whether their adapter is active).
"""

from __future__ import annotations

from typing import Any, Callable, Optional

__all__ = ["AttributePatch"]


class AttributePatch:
    """One attribute replaced by a wrapper (at most one at a time).

    Attributes:
      orig: the replaced function while applied, else None.
      wrapper: the wrapper while applied, else None.
    """

    __slots__ = ("owner", "name", "orig", "wrapper")

    def __init__(self) -> None:
        self.owner: Any = None
        self.name: Optional[str] = None
        self.orig: Optional[Callable] = None
        self.wrapper: Optional[Callable] = None

    @property
    def applied(self) -> bool:
        return self.wrapper is not None

    def apply(self, owner: Any, name: str, make_wrapper: Callable[[Callable], Callable], *,
              keep_doc: bool = False) -> bool:
        """Replaces ``owner.name`` with ``make_wrapper(original)``.

        The wrapper gets ``__wrapped__`` (and with ``keep_doc`` the original's
        docstring: users read it through the wrapper).

        Returns:
          False, changing nothing, when applied already or ``owner`` has no
          callable ``name``.
        """
        orig = getattr(owner, name, None)
        if self.wrapper is not None or not callable(orig):
            return False
        wrapper = make_wrapper(orig)
        wrapper.__wrapped__ = orig  # type: ignore[attr-defined]
        if keep_doc:
            wrapper.__doc__ = getattr(orig, "__doc__", None)
        self.owner, self.name, self.orig, self.wrapper = owner, name, orig, wrapper
        setattr(owner, name, wrapper)
        return True

    def remove(self) -> None:
        """Puts the original back if our wrapper is still there; forgets both."""
        if self.wrapper is not None and getattr(self.owner, self.name, None) is self.wrapper:
            setattr(self.owner, self.name, self.orig)
        self.owner = self.name = self.orig = self.wrapper = None
