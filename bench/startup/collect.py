"""`python -m bench timeline`: record the startup of a server's pods from inside the cluster.

For every pod matching --selector in --namespace it reads, with the bench Job's service account
(read-only): the pod, its Events, its Node, the Karpenter NodeClaim behind the node (named by the
node's owner reference, else by Karpenter's `Nominated` event) and the server container's log
(`timestamps=true`, its first 16 MiB), and, where the pod has them, the logs of its
compile-cache pull and push steps (their last line says what was restored or pushed). bench/startup/timeline.py
turns them into a record,
written to OUT/startup/<pod>.json beside the sweep's results. Optionally it times sleep mode on
the server first (bench/startup/sleepwake.py) into OUT/startup/sleep-<pod>.json.

RBAC it needs (components/startup_job.py grants exactly these): get/list pods and get pods/log and
list events in the servers' namespace; get nodes; get karpenter.sh nodeclaims.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Protocol

from bench.common import kube
from bench.common import options as O
from bench.common.cli import Help, run_one
from bench.startup import phases, sleepwake, timeline
from bench.startup import report as startup_report
from bench.startup.streamer import upload

LOG_LIMIT_BYTES = 16 * 2**20
_NOMINATED = re.compile(r"nodeclaim/(?P<name>[a-z0-9][-a-z0-9.]*)")


class Api(Protocol):
    def get(self, path: str, **params: str) -> dict[str, Any]: ...


def get_text(client: Any, path: str, **params: str) -> str:
    """GET a text endpoint (pod logs) with the client's own address, token and TLS settings."""
    if hasattr(client, "get_text"):
        return client.get_text(path, **params)
    url = client.base_url.rstrip("/") + path + ("?" + urllib.parse.urlencode(params) if params else "")
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {client.token}"})
    try:
        with urllib.request.urlopen(request, timeout=getattr(client, "timeout_s", 10.0),
                                    context=getattr(client, "context", None)) as resp:
            return resp.read().decode("utf-8", errors="replace")
    except (OSError, urllib.error.URLError) as exc:
        raise RuntimeError(f"GET {path}: {getattr(exc, 'reason', exc)}") from None


def _safe_get(client: Api, path: str, problems: list[str], **params: str) -> dict | None:
    try:
        return client.get(path, **params)
    except Exception as exc:  # noqa: BLE001 - a missing fact is recorded, never fatal
        problems.append(str(exc))
        return None


def nodeclaim_name(node: dict | None, pod_events: list[dict]) -> str | None:
    for ref in ((node or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "NodeClaim":
            return ref.get("name")
    for event in reversed(pod_events):
        if event.get("reason") == "Nominated" and (m := _NOMINATED.search(event.get("message") or "")):
            return m["name"]
    return None


def collect(client: Api, namespace: str, pod_name: str, *, container: str | None = "vllm",
            server: str | None = None, config_hash: str | None = None,
            log_limit_bytes: int = LOG_LIMIT_BYTES) -> dict[str, Any]:
    problems: list[str] = []
    pod = client.get(f"/api/v1/namespaces/{namespace}/pods/{pod_name}")
    events = _safe_get(client, f"/api/v1/namespaces/{namespace}/events", problems,
                       fieldSelector=f"involvedObject.name={pod_name}") or {"items": []}
    node_name = (pod.get("spec") or {}).get("nodeName")
    node = _safe_get(client, f"/api/v1/nodes/{node_name}", problems) if node_name else None
    claim_name = nodeclaim_name(node, timeline.events_for(events, "Pod", pod_name))
    nodeclaim = (_safe_get(client, f"/apis/karpenter.sh/v1/nodeclaims/{claim_name}", problems)
                 if claim_name else None)
    params = {"timestamps": "true", "limitBytes": str(log_limit_bytes)}
    if container:
        params["container"] = container
    try:
        log = phases.parse_log(get_text(client, f"/api/v1/namespaces/{namespace}/pods/{pod_name}/log",
                                         **params).splitlines())
    except Exception as exc:  # noqa: BLE001
        problems.append(str(exc))
        log = {}
    steps: dict[str, dict | None] = {}
    for step in (timeline.CACHE_PULL_CONTAINER, timeline.CACHE_PUSH_CONTAINER):
        if not timeline.has_init_container(pod, step):
            continue
        try:
            steps[step] = timeline.cache_result(get_text(
                client, f"/api/v1/namespaces/{namespace}/pods/{pod_name}/log", container=step,
                limitBytes=str(log_limit_bytes)))
        except Exception as exc:  # noqa: BLE001 - a missing fact is recorded, never fatal
            problems.append(str(exc))
    record = timeline.build(pod, node=node, nodeclaim=nodeclaim, events=events, log=log, container=container,
                            server=server, config_hash=config_hash,
                            cache_pull=steps.get(timeline.CACHE_PULL_CONTAINER),
                            cache_push=steps.get(timeline.CACHE_PUSH_CONTAINER))
    record["problems"] = problems
    return record


def pods(client: Api, namespace: str, selector: str) -> list[str]:
    listed = client.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=selector)
    return sorted(p["metadata"]["name"] for p in listed.get("items") or [])


def write(record: dict[str, Any], out: Path, name: str | None = None) -> Path:
    folder = out / "startup"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or record['pod']}.json"
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return path


def _upload(paths: list[Path], out: Path, uri: str | None) -> bool:
    if not uri:
        return True
    return all([upload(path, out, uri) for path in paths])


def in_cluster_client() -> Any:
    """The bench's in-cluster client (service-account token), or None outside a pod."""
    return kube.InCluster.from_environment()


def run(args: argparse.Namespace, client: Any = None) -> int:
    client = client or in_cluster_client()
    if client is None:
        print("bench timeline: no service-account token: run it in the cluster (the bench Job does); "
              "on a laptop, `python -m bench startup <log or record>` reads stored records", file=sys.stderr)
        return 2
    out = Path(args.out)
    try:
        names = pods(client, args.namespace, args.selector)
    except Exception as exc:  # noqa: BLE001
        print(f"bench timeline: listing pods {args.selector!r} in {args.namespace}: {exc}", file=sys.stderr)
        return 1
    if not names:
        print(f"bench timeline: no pod matches {args.selector!r} in namespace {args.namespace}", file=sys.stderr)
        return 1
    written: list[Path] = []
    for name in names:
        record = collect(client, args.namespace, name, container=args.container, server=args.server,
                         config_hash=args.config_hash)
        path = write(record, out)
        written.append(path)
        if args.sleep_wake_port and record.get("pod_ip"):
            host = f"[{record['pod_ip']}]" if ":" in record["pod_ip"] else record["pod_ip"]
            timing = sleepwake.measure(f"http://{host}:{args.sleep_wake_port}", level=args.sleep_level,
                                       model=args.model)
            written.append(write(dict(timing, server=args.server, pod=name), out, f"sleep-{name}"))
            print(f"bench timeline: {name}: sleep {timing['sleep_s']} s, wake {timing['wake_s']} s"
                  + (f" ({timing['error']})" if timing["error"] else ""))
        print(f"bench timeline: {name}: {startup_report.summary_line(record)} -> {path}")
        if warned := timeline.memory_warning(record):
            print(f"bench timeline: {name}: warning: {warned}")
        for problem in record["problems"]:
            print(f"bench timeline: {name}: unknown fact: {problem}", file=sys.stderr)
    return 0 if _upload(written, out, args.upload) else 1


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "timeline", help="record server pods' startup timelines from the Kubernetes API",
        description=__doc__, formatter_class=Help,
    )
    p.add_argument("--namespace", required=True, help="namespace of the server pods")
    p.add_argument("--selector", required=True, help="label selector of the server pods")
    O.add_out(p, "timeline", "the records (under startup/)", s3=False)
    p.add_argument("--container", default="vllm", help="server container name (default: %(default)s)")
    p.add_argument("--server", default=None, help="server name recorded with the timeline")
    p.add_argument("--config-hash", default=None,
                   help="hash of the server's configuration: KV cache regressions compare equal hashes")
    p.add_argument("--sleep-wake-port", type=int, default=None,
                   help="server port: then time POST /sleep and /wake_up on each pod's own IP (sleep mode on)")
    p.add_argument("--sleep-level", type=int, default=1, choices=(1, 2), help="sleep level (default: 1)")
    p.add_argument("--model", default=None, help="served model name: also time the first request after wake-up")
    p.add_argument("--upload", default=os.environ.get("VLLM_POC_RESULTS_URI") or None,
                   help="s3://bucket/prefix/ to store the records under (env VLLM_POC_RESULTS_URI)")
    p.set_defaults(func=run)
    return p


def main(argv: list[str] | None = None) -> int:
    """`python -m bench.startup.collect ...` = `python -m bench timeline ...` with only the modules it needs."""
    return run_one(add_parser, "timeline", argv)


if __name__ == "__main__":
    sys.exit(main())
