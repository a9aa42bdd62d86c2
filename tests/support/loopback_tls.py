"""One self-signed TLS certificate per test process, trusted by gRPC clients.

Google's client libraries talk TLS to whatever ``api_endpoint`` they are given
and offer no public option for extra root certificates; gRPC reads its roots
from ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH``, but only ONCE per process, when the
first TLS channel using default roots is created. So the certificate is made
and the variable set when this module is imported: test modules import it (via
their fake server module) at collection, before any test opens a channel.

Every loopback fake server of the suite that needs TLS should serve
:func:`loopback_tls`'s certificate, so that one root file covers them all.
The certificate is valid for ``localhost`` and ``127.0.0.1`` for two days.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from typing import NamedTuple, Optional

__all__ = ["TlsFiles", "loopback_tls", "ROOTS_ENV"]

ROOTS_ENV = "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH"


class TlsFiles(NamedTuple):
    """PEM bytes of the key and certificate, and the roots file gRPC reads."""

    key_pem: bytes
    cert_pem: bytes
    roots_path: str


_LOCK = threading.Lock()
_TLS: Optional[TlsFiles] = None


def _make_cert():
    from tests.support.tls_ca import self_signed_loopback

    return self_signed_loopback()


def loopback_tls() -> TlsFiles:
    """The process's loopback certificate (made on first call) and its roots file.

    If ``GRPC_DEFAULT_SSL_ROOTS_FILE_PATH`` already names another file, the
    roots file written here holds that file's certificates plus ours, and the
    variable is pointed at it, so both stay trusted.
    """
    global _TLS
    with _LOCK:
        if _TLS is not None:
            return _TLS
        key_pem, cert_pem = _make_cert()
        directory = tempfile.mkdtemp(prefix="goodput-tls-")
        atexit.register(shutil.rmtree, directory, True)
        roots = cert_pem
        previous = os.environ.get(ROOTS_ENV)
        if previous and os.path.isfile(previous):
            with open(previous, "rb") as f:
                roots = f.read().rstrip(b"\n") + b"\n" + cert_pem
        roots_path = os.path.join(directory, "roots.pem")
        with open(roots_path, "wb") as f:
            f.write(roots)
        os.environ[ROOTS_ENV] = roots_path
        _TLS = TlsFiles(key_pem, cert_pem, roots_path)
        return _TLS


loopback_tls()  # at import: before the process's first TLS channel (see above)
