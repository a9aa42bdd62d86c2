"""Exporters: where monitor results go (TensorBoard, Cloud Monitoring, Prometheus, console).

Each exporter module imports its client library only inside itself, so this
package stays import-cheap. The shared interface is in :mod:`.base`.
"""

from goodput_core.exporters.base import Exporter, MonitorSnapshot

__all__ = ["Exporter", "MonitorSnapshot"]
