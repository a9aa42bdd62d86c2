"""Google Cloud metadata: the project, zone, accelerator and cluster a job runs on.

The Cloud Monitoring exporter and the ``goodput monitor`` command read these;
:mod:`goodput_core.compat.goodput_utils` re-exports them under the reference's
names (``ml_goodput_measurement.goodput_utils``), so the engine never imports the
compat layer. Lookups never block for long: ``timeout`` is one deadline for all
attempts, an unreachable server is not retried, proxies are bypassed, and the host
is ``GCE_METADATA_HOST`` (as google-auth reads it) or the link-local address, so no
DNS lookup can hang. Off Google Cloud nothing probes by itself:
:func:`metadata_server_expected` (local files and environment only) is False there.
No Google client is imported here.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
import types
from typing import Optional

__all__ = [
    "GCPOptions", "MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING", "METADATA_HOST_ENV",
    "get_accelerator_type", "get_cluster_name", "get_gcp_metadata", "get_gcp_project_id",
    "get_node_zone", "metadata_base_url", "metadata_server_expected",
]

logger = logging.getLogger(__name__)

# Substring of the machine-type name -> accelerator type. Order matters: the
# first key found in the name wins ('ct5lp' before 'ct5l', 'tpu' after the
# specific TPU names), as in the reference.
MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING = types.MappingProxyType({
    "tpu7x": "TPU-7x",
    "ct6e": "TPU-v6e",
    "ct5p": "TPU-v5p",
    "ct5lp": "TPU-v5e",
    "ct5l": "TPU-v5e",
    "ct4p": "TPU-v4p",
    "ct3p": "TPU-v3",
    "ct3": "TPU-v3",
    "tpu-v2": "TPU-v2",
    "tpu": "TPU",
    "a3-edgegpu": "NVIDIA-H100",
    "a3-highgpu": "NVIDIA-H100",
    "a3-megagpu": "NVIDIA-H100",
    "a3-ultragpu": "NVIDIA-H200",
    "a2": "NVIDIA-A100",
    "gpu": "GPU",
})


@dataclasses.dataclass
class GCPOptions:
    """Google Cloud settings of a monitor; plain values only, no lookups."""

    project_id: Optional[str] = None
    location: Optional[str] = None
    replica_id: str = "0"
    acc_type: Optional[str] = None
    cluster_name: Optional[str] = None
    enable_gcp_goodput_metrics: bool = True
    enable_gcp_step_deviation_metrics: bool = True


METADATA_HOST_ENV = "GCE_METADATA_HOST"  # host[:port], as google-auth reads it
_LEGACY_METADATA_HOST_ENV = "GCE_METADATA_ROOT"
# The metadata server's fixed link-local address: no DNS lookup, which a
# socket timeout does not bound, on machines outside Google Cloud.
_DEFAULT_METADATA_HOST = "169.254.169.254"
_METADATA_HEADERS = {"Metadata-Flavor": "Google"}
_RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
_BACKOFF_FACTOR = 0.5
# Module attributes so that tests can drive time without sleeping.
_monotonic = time.monotonic
_sleep = time.sleep


def metadata_base_url() -> str:
    """``http://HOST/computeMetadata/v1/``; HOST from ``GCE_METADATA_HOST`` when set."""
    host = (os.environ.get(METADATA_HOST_ENV) or os.environ.get(_LEGACY_METADATA_HOST_ENV)
            or _DEFAULT_METADATA_HOST).strip().rstrip("/")
    if "://" not in host:
        host = "http://" + host
    return f"{host}/computeMetadata/v1/"


# Google Cloud VMs (GCE, GKE nodes, Cloud TPU VMs) say so in their DMI data,
# readable without the network (google-auth reads the same file).
_DMI_FILES = ("/sys/class/dmi/id/product_name", "/sys/class/dmi/id/sys_vendor")


def metadata_server_expected() -> bool:
    """True when a GCE metadata server should answer here, decided without the network.

    True when ``GCE_METADATA_HOST`` (or ``GCE_METADATA_ROOT``) names one, or
    when the machine's DMI data says it is a Google Cloud VM. Automatic
    lookups (the Cloud Monitoring exporter's project, zone and accelerator
    type) happen only then, so that a job off Google Cloud never sends a
    packet to 169.254.169.254.
    """
    if os.environ.get(METADATA_HOST_ENV) or os.environ.get(_LEGACY_METADATA_HOST_ENV):
        return True
    for path in _DMI_FILES:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                if f.read(256).strip().startswith("Google"):
                    return True
        except OSError:
            continue
    return False


def get_gcp_metadata(category: str, attribute: str, timeout=5, retries=3):
    """Fetches one value from the GCP metadata server.

    Args:
      category: e.g. 'instance' or 'project'.
      attribute: e.g. 'zone' or 'attributes/cluster-name'.
      timeout: overall deadline in seconds, retries included (None: none).
      retries: retries after answers 429/500/502/503/504 (backoff 0, 1, 2 s...
        cut to the deadline). An unreachable server is not retried.

    Returns:
      The value as text, or ``None`` when it cannot be fetched.
    """
    # Imported here: http.client and ssl cost ~25 ms, which every user of the
    # statistics helpers would otherwise pay.
    import http.client  # pylint: disable=import-outside-toplevel
    import urllib.error  # pylint: disable=import-outside-toplevel
    import urllib.request  # pylint: disable=import-outside-toplevel

    url = f"{metadata_base_url()}{category}/{attribute}"
    deadline = math.inf if timeout is None else _monotonic() + float(timeout)
    # An empty ProxyHandler: the metadata server is never reached via a proxy.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    attempt = 0
    while True:
        remaining = deadline - _monotonic()
        if remaining <= 0:
            logger.warning("Metadata %s/%s: timed out", category, attribute)
            return None
        request = urllib.request.Request(url, headers=_METADATA_HEADERS)
        try:
            with opener.open(request, timeout=None if math.isinf(remaining) else remaining) as resp:
                return resp.read().decode("utf-8")
        except urllib.error.HTTPError as e:
            if e.code not in _RETRY_STATUSES or attempt >= retries:
                logger.warning("Metadata %s/%s: HTTP %s", category, attribute, e.code)
                return None
        except (OSError, http.client.HTTPException, ValueError) as e:
            # Refused, unreachable or timed out: not on Google Cloud, or the
            # server is gone; retrying would only block the caller longer.
            logger.warning("Metadata %s/%s unavailable: %s", category, attribute,
                           type(e).__name__)
            return None
        attempt += 1
        delay = 0.0 if attempt == 1 else _BACKOFF_FACTOR * 2 ** (attempt - 1)
        delay = min(delay, deadline - _monotonic())
        if delay > 0:
            _sleep(delay)


def get_gcp_project_id():
    """The project id of the current GCP project, or ``None``."""
    return get_gcp_metadata("project", "project-id")


def get_node_zone():
    """The zone of the instance (last part of 'projects/N/zones/ZONE'), or ``None``."""
    zone_path = get_gcp_metadata("instance", "zone")
    return zone_path.rsplit("/", 1)[-1] if zone_path else None


def get_accelerator_type():
    """The accelerator type from the machine type, or 'UNKNOWN'."""
    machine_type = get_gcp_metadata("instance", "machine-type")
    name = machine_type.split("/")[-1].lower() if machine_type else ""
    if not name:
        return "UNKNOWN"
    for fragment, accelerator in MACHINE_TYPE_TO_ACCELERATOR_TYPE_MAPPING.items():
        if fragment in name:
            return accelerator
    return "UNKNOWN"


def get_cluster_name() -> Optional[str]:
    """The GKE cluster name from the instance attributes, or ``None``."""
    return get_gcp_metadata("instance", "attributes/cluster-name")
