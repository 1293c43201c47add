"""Container images pre-loaded on an EBS snapshot, mounted as the GPU nodes' containerd data.

The EC2NodeClass asks for a second EBS volume (`/dev/xvdb`) made from the snapshot, and a user-data
script mounts it at /var/lib/containerd before containerd starts. On AL2023, nodeadm's config phase
runs before cloud-init and its run phase (containerd, kubelet) after the user-data scripts, and
Karpenter merges this MIME part with its own NodeConfig part. With RAID0, nodeadm bind-mounts
/var/lib/containerd onto the NVMe array in its config phase; the snapshot volume is mounted over
that, so images come from the snapshot while kubelet and the compile cache stay on NVMe. Should an
AMI order this differently, containerd simply pulls as before: the startup timeline records for
every boot whether the image was already present or pulled, and how long that took.

The kubelet then finds the vLLM image present ("already present on machine") and starts the
container without a pull; blocks of the volume load from S3 on first read unless an
initialization rate is set (EBS volume initialization, 100-300 MiB/s).
"""

from __future__ import annotations

from dataclasses import dataclass

DEVICE = "/dev/xvdb"
MOUNT = "/var/lib/containerd"
BOUNDARY = "VLLMPOC-IMAGE-CACHE"


@dataclass(frozen=True)
class ImageCacheSpec:
    snapshot_id: str
    volume_gib: int
    initialization_rate: int | None = None  # MiB/s


def block_device_mapping(spec: ImageCacheSpec) -> dict:
    ebs: dict = {"snapshotID": spec.snapshot_id, "volumeSize": f"{spec.volume_gib}Gi", "volumeType": "gp3",
                 "encrypted": True, "deleteOnTermination": True}
    if spec.initialization_rate is not None:
        ebs["volumeInitializationRate"] = spec.initialization_rate
    return {"deviceName": DEVICE, "ebs": ebs}


MOUNT_SCRIPT = f"""#!/bin/bash
# vllm-poc: containerd data from the image-cache snapshot ({DEVICE}), before containerd starts.
set -euo pipefail
for _ in $(seq 1 120); do [ -e {DEVICE} ] && break; sleep 1; done
if [ ! -e {DEVICE} ]; then echo "vllm-poc image cache: {DEVICE} never appeared; images will be pulled" >&2; exit 0; fi
was_active=0
if systemctl is-active --quiet containerd; then was_active=1; systemctl stop containerd; fi
mkdir -p {MOUNT}
mount -o defaults,noatime {DEVICE} {MOUNT}
if [ "$was_active" = 1 ]; then systemctl start containerd; fi
"""


def user_data() -> str:
    """A MIME multi-part document with the mount script (Karpenter appends its NodeConfig part)."""
    return (
        "MIME-Version: 1.0\n"
        f'Content-Type: multipart/mixed; boundary="{BOUNDARY}"\n\n'
        f"--{BOUNDARY}\n"
        'Content-Type: text/x-shellscript; charset="us-ascii"\n\n'
        f"{MOUNT_SCRIPT}\n"
        f"--{BOUNDARY}--\n"
    )


def apply(node_class_spec: dict, spec: ImageCacheSpec | None) -> dict:
    """The EC2NodeClass spec with the snapshot volume and its mount script (unchanged when off)."""
    if spec is None:
        return node_class_spec
    out = dict(node_class_spec)
    out["blockDeviceMappings"] = [*node_class_spec.get("blockDeviceMappings", []), block_device_mapping(spec)]
    out["userData"] = user_data()
    return out
