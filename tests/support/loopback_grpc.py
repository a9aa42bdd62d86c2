"""A gRPC server on 127.0.0.1 for the fakes of Google services.

Subclasses implement :meth:`LoopbackGrpcServer.handlers`; the real client
libraries reach the server over TLS with a self-signed certificate for
``localhost`` (see :mod:`tests.support.loopback_tls`) or over plaintext.
"""

from __future__ import annotations

from concurrent import futures
from typing import Dict, Tuple

import grpc

from tests.support.loopback_tls import loopback_tls


class LoopbackGrpcServer:
    """Start/stop, context manager and endpoint of a fake service.

    Args:
      tls: serve TLS (the public ``api_endpoint`` route) instead of plaintext.
      max_workers: request threads.
    """

    def __init__(self, *, tls: bool = True, max_workers: int = 4):
        self._tls = tls
        self._max_workers = max_workers
        self._server = None
        self.port = 0  # kept across stop/start: a restart serves the same port

    def handlers(self) -> Tuple[str, Dict[str, grpc.RpcMethodHandler]]:
        """(fully qualified service name, {method name: handler})."""
        raise NotImplementedError

    def start(self):
        loopback_tls()  # sets the roots variable before any TLS channel exists
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=self._max_workers))
        service, methods = self.handlers()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, methods),))
        address = f"127.0.0.1:{self.port}"
        if self._tls:
            tls = loopback_tls()
            creds = grpc.ssl_server_credentials([(tls.key_pem, tls.cert_pem)])
            self.port = server.add_secure_port(address, creds)
        else:
            self.port = server.add_insecure_port(address)
        server.start()
        self._server = server
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait()
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        """``localhost:PORT``: the ``api_endpoint`` client option (the certificate's name)."""
        return f"localhost:{self.port}"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"
