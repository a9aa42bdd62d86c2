"""Framework adapters, imported as ``goodput_integrations`` (folder ``integrations/``).

Each adapter lives in its own subpackage (``goodput_integrations.jax``,
``.orbax``, ``.maxtext``, ``.axlearn``, ``.torch``); framework imports happen
only there.
Asking for an adapter whose framework is missing raises
:class:`AdapterUnavailable`.
"""

from goodput_integrations.errors import AdapterUnavailable

__all__ = ["AdapterUnavailable"]
