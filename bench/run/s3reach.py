"""Can this pod reach S3? Checked once before a sweep starts, where the answer can be known.

In the cluster, the namespace's NetworkPolicy allows S3 only at the ranges of the region's S3 prefix
list as they were at the last `pulumi up`; the Job gets the same list (VLLM_POC_S3_CIDRS, from the
ConfigMap the stack writes beside the policy). When AWS has added a range since, S3's name may
resolve to an address the policy drops, and the first upload would only time out. This compares
the addresses S3 resolves to with the allowed ranges and says what is wrong and which `up` fixes it.

Without VLLM_POC_S3_CIDRS (a laptop, or a cluster without the ConfigMap) nothing is checked.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass
from typing import Callable
from urllib.parse import urlparse

RANGES_ENV = "VLLM_POC_S3_CIDRS"


@dataclass(frozen=True)
class Reach:
    blocked: bool  # every address S3 resolves to is outside the allowed ranges
    message: str | None  # for the log; None when all is well or nothing was checked


def s3_host(bucket: str, region: str | None, endpoint_url: str | None = None) -> str:
    """The host boto3 connects to for `bucket` (virtual-hosted style), or the configured endpoint's."""
    if endpoint_url:
        return urlparse(endpoint_url).hostname or endpoint_url
    return f"{bucket}.s3.{region or 'us-east-1'}.amazonaws.com"


def resolve(host: str) -> list[str]:
    return sorted({info[4][0] for info in socket.getaddrinfo(host, 443, proto=socket.IPPROTO_TCP)})


def parse_ranges(text: str | None) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    nets = []
    for part in (text or "").split(","):
        part = part.strip()
        if part:
            try:
                nets.append(ipaddress.ip_network(part, strict=False))
            except ValueError:
                continue
    return nets


def check(bucket: str, region: str | None, ranges_text: str | None, *, endpoint_url: str | None = None,
          resolver: Callable[[str], list[str]] = resolve, stack: str | None = None) -> Reach:
    ranges = parse_ranges(ranges_text)
    if not ranges:
        return Reach(False, None)
    host = s3_host(bucket, region, endpoint_url)
    try:
        addresses = resolver(host)
    except OSError as exc:
        return Reach(False, f"S3 reach: could not resolve {host} ({exc}); the upload will say more")
    outside = [a for a in addresses if not any(ipaddress.ip_address(a) in net for net in ranges)]
    if not outside:
        return Reach(False, None)
    stack_name = stack or "<stack>"
    why = (f"{host} resolves to {', '.join(outside)}, outside the S3 ranges this namespace's NetworkPolicy allows "
           f"({', '.join(map(str, ranges))}, the region's S3 prefix list at the last `pulumi up`): AWS has added "
           "ranges since, and traffic to them is dropped. `python -m stacks preflight "
           f"{stack_name}` shows the difference; `pulumi up -s {stack_name}` rewrites the policy.")
    if len(outside) == len(addresses):
        # A failed bench Job is not replaced by the next `pulumi up` (it has no replaceUnready): say so.
        pod = os.environ.get("HOSTNAME", "")
        job = pod.rsplit("-", 1)[0] if pod.count("-") >= 2 else "<this bench Job>"
        return Reach(True, f"S3 reach: {why} Stopping before the sweep: nothing could be uploaded. After the `up`, "
                           f"delete this Job (`kubectl -n vllm delete job {job}`) and run `pulumi up -s {stack_name}` "
                           "again to create it anew; the sweep resumes from what is already in S3.")
    return Reach(False, f"S3 reach: warning: {why} Some uploads may fail and be retried.")


def check_from_env(bucket: str, stack: str | None = None) -> Reach:
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    return check(bucket, region, os.environ.get(RANGES_ENV), endpoint_url=endpoint, stack=stack)
