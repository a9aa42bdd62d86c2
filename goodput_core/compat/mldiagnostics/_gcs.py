"""Uploads finished profile sessions to ``gs://`` in a background thread.

google-cloud-storage is imported here only (when a run's ``gcs_path`` is a
``gs://`` path and a session finished). Credentials are the library's
usual ones (Application Default Credentials); ``STORAGE_EMULATOR_HOST``
points it at an emulator. A failed upload is logged once; the local copy
stays either way.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import List

logger = logging.getLogger("goodput")

_warned: set = set()
_threads: List[threading.Thread] = []


def _split(url: str):
    bucket, _, prefix = url[len("gs://"):].partition("/")
    return bucket, prefix.strip("/")


def upload(local_root: str, remote_root: str, files: List[str]) -> int:
    """Uploads ``files`` (under ``local_root``) to the same relative paths
    under ``remote_root`` (``gs://bucket/prefix``); returns how many."""
    from google.cloud import storage

    bucket_name, prefix = _split(remote_root)
    bucket = storage.Client().bucket(bucket_name)
    for path in files:
        rel = os.path.relpath(path, local_root).replace(os.sep, "/")
        bucket.blob(f"{prefix}/{rel}" if prefix else rel).upload_from_filename(path)
    return len(files)


def _run(local_root: str, remote_root: str, files: List[str]) -> None:
    try:
        n = upload(local_root, remote_root, files)
        logger.info("goodput: uploaded %d profile files to %s", n, remote_root)
    except Exception:
        if remote_root not in _warned:
            _warned.add(remote_root)
            logger.warning("goodput: uploading profiles to %s failed; they stay in %s",
                           remote_root, local_root, exc_info=True)


def upload_in_background(local_root: str, remote_root: str, session_dir: str,
                         files: List[str]) -> threading.Thread:
    """Starts the upload of one session's files off the training thread."""
    thread = threading.Thread(target=_run, args=(local_root, remote_root, list(files)),
                              name="goodput-xprof-upload", daemon=True)
    thread.start()
    _threads.append(thread)
    return thread


def wait_for_uploads(timeout: float = 60.0) -> bool:
    """Waits for the uploads started so far (tests, or before exit); True when all ended."""
    for thread in list(_threads):
        thread.join(timeout)
    alive = [t for t in _threads if t.is_alive()]
    _threads[:] = alive
    return not alive
