"""Off Google Cloud, nothing may probe the GCE metadata server (docs/quality.md P9).

:func:`off_google_cloud` makes this machine look like one that is not a
Google Cloud VM (no ``GCE_METADATA_HOST``, DMI data of a plain PC) and spies
on every socket connect at the lowest level: a connect to the metadata host
is recorded and refused, so no test ever sends a packet there.
:func:`on_google_cloud_vm` makes the DMI data say Google instead.
"""

from __future__ import annotations

import socket
from typing import Any, List, Tuple

from goodput_core import gcp

METADATA_HOST = "169.254.169.254"


class ConnectSpy:
    """Every address a socket tried to connect to, in order."""

    def __init__(self) -> None:
        self.addresses: List[Tuple[Any, ...]] = []

    @property
    def metadata_probes(self) -> List[Tuple[Any, ...]]:
        """The connects that went to the metadata server's address."""
        return [a for a in self.addresses if isinstance(a, tuple) and a and a[0] == METADATA_HOST]


def _dmi(tmp_path: Any, text: str) -> Tuple[str, ...]:
    path = tmp_path / "product_name"
    path.write_text(text + "\n")
    return (str(path),)


def off_google_cloud(monkeypatch: Any, tmp_path: Any) -> ConnectSpy:
    """No metadata host set, a plain PC's DMI data, and a spy on socket connects."""
    monkeypatch.delenv(gcp.METADATA_HOST_ENV, raising=False)
    monkeypatch.delenv("GCE_METADATA_ROOT", raising=False)
    monkeypatch.setattr(gcp, "_DMI_FILES", _dmi(tmp_path, "Standard PC (Q35 + ICH9)"))
    spy = ConnectSpy()
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def connect(sock: socket.socket, address: Any) -> Any:
        spy.addresses.append(address)
        if isinstance(address, tuple) and address and address[0] == METADATA_HOST:
            raise ConnectionRefusedError("the tests never reach the metadata server")
        return real_connect(sock, address)

    def connect_ex(sock: socket.socket, address: Any) -> Any:
        spy.addresses.append(address)
        if isinstance(address, tuple) and address and address[0] == METADATA_HOST:
            return 111  # ECONNREFUSED
        return real_connect_ex(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    return spy


def on_google_cloud_vm(monkeypatch: Any, tmp_path: Any) -> None:
    """The DMI data of a Google Compute Engine VM (what GCE, GKE and TPU VMs show)."""
    monkeypatch.setattr(gcp, "_DMI_FILES", _dmi(tmp_path, "Google Compute Engine"))
