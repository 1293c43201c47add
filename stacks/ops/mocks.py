"""Pulumi's unit-test runtime, set up to record the whole desired state of a stack.

`RecordingMocks` answers the engine's calls with plausible cloud outputs (ids, ARNs, a kubeconfig)
and `RecordingMonitor` keeps what the engine would receive for each resource: its type, name,
parent, inputs, explicit dependencies and options. The offline render (`stacks.ops.render`) and the
tests read the same records, so what the tests assert is what a render shows.

Remote components (pulumi-eks `eks:index:*`) are answered in one call with no children, as
Pulumi's mock monitor does; their inputs are what we can check offline.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pulumi
from pulumi.runtime import resource as runtime_resource
from pulumi.runtime import settings as runtime_settings
from pulumi.runtime.proto import source_pb2
from pulumi.runtime.mocks import MockCallArgs, MockMonitor, MockResourceArgs, Mocks
from pulumi.runtime.stack import run_pulumi_func
from pulumi.runtime.sync_await import _sync_await
from google.protobuf import struct_pb2

from bench.common.interrupts import Interrupted, stop_loop_on_signals

ACCOUNT_ID = "123456789012"
# The identity the mocks run `pulumi up` as: a CI role's session, as GitHub OIDC gives it.
CALLER_ARN = f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/vllm-poc-deploy/pulumi"
# Instance type offerings per AZ suffix (getInstanceTypeOfferings): g7e is not in zone a, so a stack
# with a g7e pool lands in b and c rather than the region's first two zones.
OFFERED_ZONES = {"g6e": "abcd", "g7e": "bcd"}
# Private subnets an earlier `up` created ({subnet id: zone}), found by getSubnets; empty: a first `up`.
LIVE_SUBNETS: dict[str, str] = {}
# SSM parameters that do not exist (tests add names to see a lookup fail).
MISSING_PARAMETERS: set[str] = set()
# Secrets Manager secrets that do not exist (tests add names to see a lookup fail).
MISSING_SECRETS: set[str] = set()
# Objects the mock S3 holds for the program's own reads ({bucket/key: text body}); empty: none yet.
S3_OBJECTS: dict[str, str] = {}
# How the SDK marks a resource reference inside serialized properties (pulumi.runtime.rpc).
_SIG_KEY = "4dabf18193072939515e22adb298388d"
_RESOURCE_SIG = "5cf8f73096256a8f31e491e813e4eb8e"


def _short_hash(text: str, length: int = 8) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass
class Registration:
    """One resource as the engine would receive it."""

    type: str
    name: str
    urn: str
    parent_urn: str | None
    custom: bool
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    dependencies: list[str] = field(default_factory=list)  # URNs from depends_on
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def parent_name(self) -> str | None:
        # top-level resources are children of the stack itself, which is not a resource to render
        if not self.parent_urn or self.parent_urn.split("::")[2].endswith("pulumi:pulumi:Stack"):
            return None
        return self.parent_urn.rsplit("::", 1)[-1]


def _options(request) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    timeouts = request.customTimeouts
    if timeouts is not None and any((timeouts.create, timeouts.update, timeouts.delete)):
        opts["customTimeouts"] = {
            k: getattr(timeouts, k) for k in ("create", "update", "delete") if getattr(timeouts, k)
        }
    if request.protect:
        opts["protect"] = True
    if request.retainOnDelete:
        opts["retainOnDelete"] = True
    if request.deleteBeforeReplace:
        opts["deleteBeforeReplace"] = True
    if request.replaceOnChanges:
        opts["replaceOnChanges"] = list(request.replaceOnChanges)
    if request.ignoreChanges:
        opts["ignoreChanges"] = list(request.ignoreChanges)
    if request.provider:
        opts["provider"] = request.provider.split("::")[-2] if "::" in request.provider else request.provider
    return opts


def _resource_refs_by_name(value: struct_pb2.Value) -> None:
    """Replace every resource reference inside `value` with {"$resource": <name>}, in place."""
    kind = value.WhichOneof("kind")
    if kind == "list_value":
        for item in value.list_value.values:
            _resource_refs_by_name(item)
    elif kind == "struct_value":
        fields = value.struct_value.fields
        if _SIG_KEY in fields and fields[_SIG_KEY].string_value == _RESOURCE_SIG:
            name = fields["name"].string_value if "name" in fields else fields["urn"].string_value.rsplit("::", 1)[-1]
            value.struct_value.Clear()
            value.struct_value.update({"$resource": name})
        else:
            for item in fields.values():
                _resource_refs_by_name(item)


def _without_resource_refs(request, field_name: str):
    """A copy of a monitor request whose resource references are plain {"$resource": name} records.

    The SDK's mock monitor runs on the engine's worker threads and rehydrates a resource reference
    (pulumi-eks' ManagedNodeGroup takes the Cluster itself as an input) by constructing the resource
    there: that schedules a `get` RPC on the worker thread's own event loop while the RPC manager,
    awaited by the program's loop, tracks it. When the worker loop has not finished that task by then,
    the program's loop awaits a future of another loop and the run dies with "attached to a different
    loop". Recording references by name constructs nothing off the program's loop.
    """
    copy = type(request)()
    copy.CopyFrom(request)
    struct = getattr(copy, field_name)
    for item in struct.fields.values():
        _resource_refs_by_name(item)
    return copy


class RecordingMonitor(MockMonitor):
    """The SDK's mock monitor, keeping what it is told about parents, dependencies and options."""

    def __init__(self, mocks: RecordingMocks):
        super().__init__(mocks)
        # The SDK calls Mocks.new_resource from inside RegisterResource, on the same thread.
        self.current = threading.local()

    def Invoke(self, request):  # noqa: N802 (gRPC method name)
        return super().Invoke(_without_resource_refs(request, "args"))

    def ReadResource(self, request):  # noqa: N802
        return super().ReadResource(_without_resource_refs(request, "properties"))

    def RegisterResource(self, request):  # noqa: N802 (gRPC method name)
        request = _without_resource_refs(request, "object")
        self.current.request = {
            "urn": self.make_urn(request.parent, request.type, request.name),
            "parent_urn": request.parent or None,
            "dependencies": list(request.dependencies),
            "options": _options(request),
        }
        try:
            return super().RegisterResource(request)
        finally:
            self.current.request = None


class RecordingMocks(Mocks):
    def __init__(self, region: str = "ap-northeast-2"):
        self.region = region
        self.monitor = RecordingMonitor(self)
        self.registrations: list[Registration] = []

    # -- engine calls -----------------------------------------------------------------------
    def new_resource(self, args: MockResourceArgs):
        inputs = dict(args.inputs)
        resource_id, outputs = self._outputs(args.typ, args.name, inputs)
        # ReadResource (a `get`) carries no registration request: record it without options.
        pending = getattr(self.monitor.current, "request", None) or {}
        self.registrations.append(
            Registration(
                type=args.typ,
                name=args.name,
                urn=pending.get("urn", self.monitor.make_urn("", args.typ, args.name)),
                parent_urn=pending.get("parent_urn"),
                custom=bool(args.custom),
                inputs=inputs,
                outputs=outputs,
                dependencies=pending.get("dependencies", []),
                options=pending.get("options", {}),
            )
        )
        return resource_id, outputs

    def call(self, args: MockCallArgs):
        token = args.token
        if token == "aws:index/getCallerIdentity:getCallerIdentity":
            return {
                "accountId": ACCOUNT_ID,
                "arn": CALLER_ARN,
                "userId": "AIDAEXAMPLE",
                "id": ACCOUNT_ID,
            }
        if token == "aws:index/getRegion:getRegion":
            return {"name": self.region, "region": self.region, "id": self.region,
                    "description": self.region, "endpoint": f"ec2.{self.region}.amazonaws.com"}
        if token == "aws:index/getPartition:getPartition":
            return {"partition": "aws", "dnsSuffix": "amazonaws.com", "id": "aws",
                    "reverseDnsPrefix": "com.amazonaws"}
        if token == "aws:ec2/getPrefixList:getPrefixList":
            # Documentation ranges (RFC 5737) stand in for the region's S3 prefix list.
            return {"id": "pl-78a54011", "prefixListId": "pl-78a54011", "name": args.args.get("name"),
                    "cidrBlocks": ["192.0.2.0/24", "198.51.100.0/24"], "filters": []}
        if token == "aws:ec2/getVpc:getVpc":
            return {"id": args.args.get("id"), "cidrBlock": "10.60.0.0/16", "cidrBlockAssociations": []}
        if token == "aws:index/getAvailabilityZones:getAvailabilityZones":
            names = [f"{self.region}{z}" for z in "abcd"]
            return {"names": names, "zoneIds": [f"apne2-az{i}" for i in range(1, 5)],
                    "id": self.region, "state": "available"}
        if token == "aws:ec2/getInstanceTypeOfferings:getInstanceTypeOfferings":
            wanted = [v for f in args.args.get("filters") or [] if f.get("name") == "instance-type"
                      for v in f.get("values") or []]
            pairs = [(t, f"{self.region}{z}") for t in sorted(wanted)
                     for z in OFFERED_ZONES.get(t.split(".", 1)[0], "abcd")]
            return {"instanceTypes": [t for t, _ in pairs], "locations": [z for _, z in pairs],
                    "locationTypes": ["availability-zone"] * len(pairs), "id": self.region}
        if token == "aws:secretsmanager/getSecret:getSecret":
            name = args.args.get("name")
            if name in MISSING_SECRETS:
                return {}, [("name", f"ResourceNotFoundException: Secrets Manager can't find the specified secret {name}")]
            arn = f"arn:aws:secretsmanager:{self.region}:{ACCOUNT_ID}:secret:{name}-{_short_hash(name, 6)}"
            return {"arn": arn, "id": arn, "name": name, "tags": {}}
        if token == "aws:ec2/getSubnets:getSubnets":
            return {"ids": sorted(LIVE_SUBNETS), "filters": args.args.get("filters") or [], "id": self.region}
        if token == "aws:ec2/getSubnet:getSubnet":
            subnet = args.args.get("id")
            return {"id": subnet, "availabilityZone": LIVE_SUBNETS.get(subnet, ""), "vpcId": "vpc-0live"}
        if token == "aws:s3/getObjects:getObjects":
            bucket, prefix = args.args.get("bucket"), args.args.get("prefix") or ""
            keys = sorted(k.split("/", 1)[1] for k in S3_OBJECTS if k.startswith(f"{bucket}/{prefix}"))
            return {"bucket": bucket, "prefix": prefix, "keys": keys, "commonPrefixes": [], "owners": [],
                    "id": bucket}
        if token == "aws:s3/getObject:getObject":
            name = f"{args.args.get('bucket')}/{args.args.get('key')}"
            if name not in S3_OBJECTS:
                return {}, [("key", f"NoSuchKey: {name}")]
            return {"bucket": args.args.get("bucket"), "key": args.args.get("key"), "body": S3_OBJECTS[name],
                    "contentType": "application/json", "id": name}
        if token == "aws:ssm/getParameter:getParameter":
            name = args.args.get("name")
            if name in MISSING_PARAMETERS:  # the engine's answer to a failed invoke
                return {}, [("name", f"ParameterNotFound: parameter {name} not found")]
            return {"name": name, "value": "ami-0123456789abcdef0", "insecureValue": "ami-0123456789abcdef0",
                    "type": "String", "version": 1, "arn": f"arn:aws:ssm:{self.region}::parameter{name}",
                    "id": name, "withDecryption": True}
        return {}

    # -- plausible outputs per resource type ---------------------------------------------------
    def _outputs(self, typ: str, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        out = dict(inputs)
        rid = f"{name}-id"
        if typ == "eks:index:Cluster":
            return self._eks_cluster(name, inputs)
        if typ.startswith("aws:"):
            service = typ.split(":")[1].split("/")[0]
            resource_name = inputs.get("name") or f"{name}-{_short_hash(name, 7)}"
            if typ in ("aws:s3/bucket:Bucket", "aws:s3/bucketV2:BucketV2"):
                bucket = inputs.get("bucket") or f"{name}-{_short_hash(name, 7)}"
                rid = bucket
                out.update(bucket=bucket, arn=f"arn:aws:s3:::{bucket}",
                           bucketRegionalDomainName=f"{bucket}.s3.{self.region}.amazonaws.com")
            elif typ == "aws:iam/role:Role":
                rid = resource_name
                out.update(name=resource_name, arn=f"arn:aws:iam::{ACCOUNT_ID}:role/{resource_name}",
                           uniqueId=f"AROA{_short_hash(name, 12).upper()}")
            elif typ == "aws:iam/policy:Policy":
                out.update(name=resource_name,
                           arn=f"arn:aws:iam::{ACCOUNT_ID}:policy/{resource_name}")
                rid = out["arn"]
            elif typ == "aws:sqs/queue:Queue":
                out.update(name=resource_name,
                           arn=f"arn:aws:sqs:{self.region}:{ACCOUNT_ID}:{resource_name}",
                           url=f"https://sqs.{self.region}.amazonaws.com/{ACCOUNT_ID}/{resource_name}")
                rid = out["url"]
            elif typ.startswith("aws:ec2/"):
                kind = typ.rsplit(":", 1)[-1]
                prefix = {"Vpc": "vpc", "Subnet": "subnet", "InternetGateway": "igw",
                          "NatGateway": "nat", "Eip": "eipalloc", "RouteTable": "rtb",
                          "SecurityGroup": "sg", "VpcEndpoint": "vpce"}.get(kind, kind.lower())
                rid = f"{prefix}-{_short_hash(name, 12)}"
                out.setdefault("arn", f"arn:aws:ec2:{self.region}:{ACCOUNT_ID}:{prefix}/{rid}")
                if kind == "LaunchTemplate":
                    out.setdefault("latestVersion", 1)
            else:
                out.setdefault("name", resource_name)
                out.setdefault("arn", f"arn:aws:{service}:{self.region}:{ACCOUNT_ID}:{resource_name}")
            out.setdefault("id", rid)
            return rid, out
        if typ.startswith("kubernetes:") and typ != "kubernetes:helm.sh/v3:Release":
            metadata = dict(out.get("metadata") or {})
            metadata.setdefault("name", f"{name}-{_short_hash(name, 8)}")
            out["metadata"] = metadata
            namespace = metadata.get("namespace")
            rid = f"{namespace}/{metadata['name']}" if namespace else metadata["name"]
            return rid, out
        if typ == "kubernetes:helm.sh/v3:Release":
            out.setdefault("name", inputs.get("name") or name)
            out["status"] = {"status": "deployed", "namespace": inputs.get("namespace", "default")}
        return rid, out

    def _eks_cluster(self, name: str, inputs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        cluster_name = inputs.get("name") or f"{name}-eksCluster-{_short_hash(name, 7)}"
        arn = f"arn:aws:eks:{self.region}:{ACCOUNT_ID}:cluster/{cluster_name}"
        sg = f"sg-{_short_hash(name + 'cluster', 12)}"
        state = {
            "name": cluster_name,
            "arn": arn,
            "endpoint": f"https://{_short_hash(cluster_name, 32).upper()}.gr7.{self.region}.eks.amazonaws.com",
            "version": inputs.get("version"),
            "vpcConfig": {"clusterSecurityGroupId": sg, "vpcId": inputs.get("vpcId")},
            "certificateAuthority": {"data": "LS0tLS1CRUdJTi..."},
        }
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kubernetes", "cluster": {"server": state["endpoint"],
                          "certificate-authority-data": state["certificateAuthority"]["data"]}}],
            "contexts": [{"name": "aws", "context": {"cluster": "kubernetes", "user": "aws"}}],
            "current-context": "aws",
            "users": [{"name": "aws", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                "args": ["eks", "get-token", "--cluster-name", cluster_name]}}}],
        }
        out = dict(inputs)
        out.update(
            kubeconfig=kubeconfig,
            kubeconfigJson=json.dumps(kubeconfig),
            clusterSecurityGroupId=sg,
            nodeSecurityGroupId=f"sg-{_short_hash(name + 'node', 12)}",
            oidcIssuer="",
        )
        return cluster_name, out


def install(region: str, project: str, stack: str) -> RecordingMocks:
    """Install recording mocks as Pulumi's runtime for the given project and stack."""
    mocks = RecordingMocks(region=region)
    pulumi.runtime.set_mocks(mocks, project=project, stack=stack, preview=False, monitor=mocks.monitor)
    return mocks


def _no_stack_trace():
    return source_pb2.StackTrace()


def run(program: Callable[[], Awaitable[None] | None], *, region: str = "ap-northeast-2",
        project: str = "vllm-poc", stack: str = "test") -> RecordingMocks:
    """Run `program` under a fresh mock runtime and wait for every registration; returns the records.

    Each call starts from a clean state (event loop, root stack, outstanding outputs), so one render
    or test never awaits what another left behind.
    """
    # The engine's source positions (a stack walk per resource, a third of a render's time) are not
    # part of the desired state: skip them under the mocks.
    runtime_resource._get_stack_trace = _no_stack_trace
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    runtime_settings.ROOT.set(None)
    runtime_settings.SETTINGS.rpc_manager.clear()
    runtime_settings.SETTINGS.outputs.clear()
    mocks = install(region=region, project=project, stack=stack)

    async def body() -> None:
        result = program()
        if inspect.isawaitable(result):
            await result

    # A stop (SIGTERM, Ctrl-C) stops the loop between callbacks: raised inside the runtime's tasks, it could
    # be caught there and leave the render waiting for ever.
    with stop_loop_on_signals(loop) as stopped:
        try:
            _sync_await(run_pulumi_func(body))
        except RuntimeError:  # "Event loop stopped before Future completed."
            if not stopped:
                raise
    if stopped:
        raise Interrupted(stopped[0])
    return mocks
