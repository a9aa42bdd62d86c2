"""A loopback fake of Cloud Storage's JSON API, enough for ``blob.upload_from_filename``
of small files (multipart uploads). Point google-cloud-storage at it with
``STORAGE_EMULATOR_HOST=<server.url>``; uploaded objects are in ``server.objects``."""

from __future__ import annotations

import email.parser
import email.policy
import http.server
import json
import threading
import urllib.parse
from typing import Dict, Tuple


class FakeGcs:
    """``with FakeGcs() as gcs: ...``; ``gcs.objects[(bucket, name)]`` holds the bytes."""

    def __init__(self):
        self.objects: Dict[Tuple[str, str], bytes] = {}
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output clean
                pass

            def do_POST(self):
                url = urllib.parse.urlparse(self.path)
                parts = url.path.strip("/").split("/")
                # /upload/storage/v1/b/<bucket>/o?uploadType=multipart
                if parts[:4] != ["upload", "storage", "v1", "b"] or len(parts) != 6:
                    self.send_error(404)
                    return
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                head = f"Content-Type: {self.headers['Content-Type']}\r\n\r\n".encode()
                msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
                meta_part, data_part = list(msg.iter_parts())[:2]
                meta = json.loads(meta_part.get_payload(decode=True))
                data = data_part.get_payload(decode=True)
                owner.objects[(parts[4], meta["name"])] = data
                reply = json.dumps({"bucket": parts[4], "name": meta["name"],
                                    "size": str(len(data)), "generation": "1"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FakeGcs":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
