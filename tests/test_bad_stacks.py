"""Bad stack files: each is refused with exit 2, a message naming the key as written, no traceback.

Every case is one stack file (a mutation of Pulumi.dev.yaml, or raw text for syntax and structure
mistakes), run through `python -m stacks render` and `python -m stacks preflight` in-process (the
commands fail before any Pulumi run or AWS call) and a few through real subprocesses.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from stacks.__main__ import main as stacks_main
from stacks.settings import REPO

DELETE = object()
BASE = yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text())


def _set(doc: dict, path: str, value: Any) -> None:
    """Set `vllm-poc:gpuPools[0].gpuLimit` style paths inside doc["config"]."""
    parts = re.findall(r"[^.\[\]]+|\[\d+\]", path)
    node = doc["config"]
    for part in parts[:-1]:
        node = node[int(part[1:-1])] if part.startswith("[") else node.setdefault(part, {})
    last = parts[-1]
    key: Any = int(last[1:-1]) if last.startswith("[") else last
    if value is DELETE:
        del node[key]
    else:
        node[key] = value


def mutate(*changes: tuple[str, Any]) -> str:
    doc = copy.deepcopy(BASE)
    for path, value in changes:
        _set(doc, path, value)
    return yaml.safe_dump(doc, sort_keys=False)


POOL = "vllm-poc:gpuPools"
SRV = "vllm-poc:servers"
BENCH = "vllm-poc:bench"
NET = "vllm-poc:network"
SYS = "vllm-poc:systemNodes"
CL = "vllm-poc:cluster"
VALID_POOL = {"name": "extra", "instanceType": "g6e.2xlarge", "gpuLimit": 2}

# (case id, stack file text, text the message must contain: the key as the user wrote it)
CASES: list[tuple[str, str, str]] = [
    # -- YAML syntax and file structure ------------------------------------------------------------
    ("yaml-bad-indent", "config:\n  aws:region: ap-northeast-2\n   vllm-poc:cluster: {}\n", "case.yaml:3:"),
    ("yaml-tab", "config:\n\taws:region: ap-northeast-2\n", "replace the tab"),
    ("yaml-unclosed-bracket", "config:\n  vllm-poc:bench:\n    targets: [gemma-fp8\n", "YAML syntax error"),
    ("yaml-unclosed-quote", "config:\n  aws:region: \"ap-northeast-2\n", "YAML syntax error"),
    ("yaml-unclosed-brace", "config:\n  vllm-poc:cluster: {name: x\n", "YAML syntax error"),
    ("yaml-colon-in-value", "config:\n  aws:region: a: b\n", "case.yaml:2:"),
    ("yaml-two-documents", "config: {}\n---\nconfig: {}\n", "YAML syntax error"),
    ("top-level-list", "- config\n- aws:region\n", "holds a list"),
    ("top-level-scalar", "just text\n", "holds a str"),
    ("empty-file", "", "the file is empty"),
    ("only-comment", "# nothing here\n", "the file is empty"),
    ("no-config-wrapper", "aws:region: ap-northeast-2\nvllm-poc:cluster:\n  name: x\n", "no `config:` key"),
    ("config-is-list", "config:\n  - aws:region\n", "config: must be a mapping"),
    ("config-is-text", "config: ap-northeast-2\n", "config: must be a mapping"),
    ("unknown-file-key", "confg:\n  aws:region: ap-northeast-2\n", "confg"),
    ("duplicate-key", "config:\n  aws:region: ap-northeast-2\n  aws:region: us-east-1\n", "aws:region: duplicate key"),
    ("duplicate-nested-key", "config:\n  vllm-poc:cluster:\n    name: a\n    name: b\n", "vllm-poc:cluster.name: duplicate key"),
    ("duplicate-config", "config:\n  aws:region: us-east-1\nconfig:\n  aws:region: us-east-2\n", "config: duplicate top-level key"),
    ("yaml-unhashable-key", "config:\n  ? [a]\n  : b\n", "case.yaml:2:"),
    ("yaml-alias-loop", "config: &a\n  aws:region: *a\n", "a YAML alias that contains itself"),
    ("yaml-alias-bomb", "config:\n  vllm-poc:tags:\n    a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"    a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)), "through YAML aliases"),
    ("non-text-keys", "config:\n  123: x\n", "123: config keys are text"),
    ("null-section", "config:\n  vllm-poc:cluster:\n", "vllm-poc:cluster"),
    ("null-region", "config:\n  aws:region:\n", "aws:region"),
    ("pool-entry-null", mutate((f"{POOL}[0]", None)), "vllm-poc:gpuPools[0]"),
    # -- namespaces and keys -----------------------------------------------------------------------
    ("no-namespace", mutate(("gpuPools", [VALID_POOL])), "gpuPools: no namespace"),
    ("misspelt-namespace", mutate(("vllm_poc:bench", {"targets": ["gemma-fp8"]})), "vllm_poc:bench"),
    ("other-namespace", mutate(("kubernetes:context", "x")), "kubernetes:context"),
    ("pulumi-namespace", mutate(("pulumi:disable-default-providers", ["*"])), "pulumi:disable-default-providers"),
    ("aws-misspelt", mutate(("aws:regoin", "us-east-1")), "aws:regoin"),
    ("aws-profile", mutate(("aws:profile", "prod")), "aws:profile"),
    ("unknown-project-key", mutate(("vllm-poc:servres", [])), "vllm-poc:servres"),
    ("project-key-case", mutate(("vllm-poc:GpuPools", [])), "vllm-poc:GpuPools"),
    ("secure-top", mutate(("vllm-poc:tags", {"secure": "v1:abcd"})), "vllm-poc:tags"),
    ("secure-nested", mutate(("vllm-poc:tags", {"Owner": {"secure": "v1:abcd"}})), "vllm-poc:tags.Owner"),
    ("secure-region", mutate(("aws:region", {"secure": "v1:abcd"})), "aws:region"),
    ("secure-in-list", mutate((f"{SRV}[0].extraArgs", [{"secure": "v1:abcd"}])), "vllm-poc:servers[0].extraArgs[0]"),
    ("section-is-text", mutate((CL, "vllm-poc-dev")), "vllm-poc:cluster"),
    ("section-is-number", mutate((NET, 5)), "vllm-poc:network"),
    # -- region --------------------------------------------------------------------------------------
    ("region-unknown", mutate(("aws:region", "ap-northeast-9")), "aws:region"),
    ("region-name", mutate(("aws:region", "seoul")), "aws:region"),
    ("region-number", mutate(("aws:region", 5)), "aws:region"),
    ("region-upper", mutate(("aws:region", "AP-NORTHEAST-2")), "aws:region"),
    ("region-zone", mutate(("aws:region", "ap-northeast-2a")), "aws:region"),
    # -- cluster -------------------------------------------------------------------------------------
    ("k8s-version-float", mutate((f"{CL}.kubernetesVersion", 1.30)), "quote it"),
    ("k8s-version-old", mutate((f"{CL}.kubernetesVersion", "1.20")), "vllm-poc:cluster.kubernetesVersion"),
    ("cluster-name-underscore", mutate((f"{CL}.name", "vllm_poc")), "vllm-poc:cluster.name"),
    ("cluster-name-long", mutate((f"{CL}.name", "a" * 39)), "vllm-poc:cluster.name"),
    ("cluster-name-digit", mutate((f"{CL}.name", "1cluster")), "vllm-poc:cluster.name"),
    ("cluster-name-empty", mutate((f"{CL}.name", "")), "vllm-poc:cluster.name"),
    ("cidr-prefix-33", mutate((f"{CL}.publicAccessCidrs", ["10.0.0.0/33"])), "vllm-poc:cluster.publicAccessCidrs"),
    ("cidr-host-bits", mutate((f"{CL}.publicAccessCidrs", ["10.0.0.1/16"])), "vllm-poc:cluster.publicAccessCidrs"),
    ("cidr-text", mutate((f"{CL}.publicAccessCidrs", "0.0.0.0/0")), "vllm-poc:cluster.publicAccessCidrs"),
    ("admin-arn", mutate((f"{CL}.adminRoleArns", ["arn:aws:iam::123:user/x"])), "vllm-poc:cluster.adminRoleArns"),
    ("cluster-misspelt-key", mutate((f"{CL}.kubernetesVerison", "1.36")), "vllm-poc:cluster.kubernetesVerison"),
    ("log-types-text", mutate((f"{CL}.logTypes", "api")), "vllm-poc:cluster.logTypes"),
    # -- the way to the Kubernetes API -------------------------------------------------------------------
    ("api-no-path", mutate((f"{CL}.publicAccessCidrs", DELETE)), "vllm-poc:cluster: no way to the Kubernetes API"),
    ("api-no-path-empty-list", mutate((f"{CL}.publicAccessCidrs", [])), "python -m stacks allow-my-address case"),
    ("api-private-in-new-vpc", mutate((f"{CL}.publicAccessCidrs", []), (f"{CL}.privateAccessSecurityGroups", ["sg-0123abcd"])),
     "creates its VPC in the same `pulumi up`"),
    ("api-private-sg-id", mutate((f"{CL}.privateAccessSecurityGroups", ["runner"])), "vllm-poc:cluster.privateAccessSecurityGroups"),
    ("api-private-sg-twice", mutate((f"{CL}.privateAccessSecurityGroups", ["sg-0123abcd", "sg-0123abcd"])),
     "vllm-poc:cluster.privateAccessSecurityGroups"),
    ("api-private-anywhere", mutate((f"{CL}.privateAccessCidrs", ["0.0.0.0/0"])), "privateAccessCidrs: 0.0.0.0/0"),
    ("api-private-ipv6", mutate((f"{CL}.privateAccessCidrs", ["2001:db8::/32"])), "vllm-poc:cluster.privateAccessCidrs"),
    # -- network -------------------------------------------------------------------------------------
    ("vpc-cidr-8", mutate((f"{NET}.vpcCidr", "10.0.0.0/8")), "vllm-poc:network.vpcCidr"),
    ("vpc-cidr-24", mutate((f"{NET}.vpcCidr", "10.0.0.0/24")), "vllm-poc:network.vpcCidr"),
    ("vpc-cidr-text", mutate((f"{NET}.vpcCidr", "my-vpc")), "vllm-poc:network.vpcCidr"),
    ("az-count-1", mutate((f"{NET}.availabilityZoneCount", 1)), "vllm-poc:network.availabilityZoneCount"),
    ("az-count-5", mutate((f"{NET}.availabilityZoneCount", 5)), "vllm-poc:network.availabilityZoneCount"),
    ("az-count-word", mutate((f"{NET}.availabilityZoneCount", "two")), "vllm-poc:network.availabilityZoneCount"),
    ("nat-gateways", mutate((f"{NET}.natGateways", "double")), "vllm-poc:network.natGateways"),
    ("vpc-id", mutate((f"{NET}.vpcId", "vpc-xyz")), "vllm-poc:network.vpcId"),
    ("subnets-without-vpc", mutate((f"{NET}.privateSubnets", {"ap-northeast-2a": "subnet-0123abcd"})), "vllm-poc:network"),
    ("vpc-without-subnets", mutate((f"{NET}.vpcId", "vpc-0123abcd")), "vllm-poc:network"),
    ("subnets-one-az", mutate((f"{NET}.vpcId", "vpc-0123abcd"), (f"{NET}.availabilityZones", DELETE),
                              (f"{NET}.privateSubnets", {"ap-northeast-2a": "subnet-0123abcd"})), "privateSubnets"),
    ("zone-past-the-address-plan", mutate((f"{NET}.availabilityZones", ["ap-northeast-2b", "ap-northeast-2h"])),
     "vllm-poc:network.availabilityZones"),
    ("mirror-secret-name", mutate((f"{CL}.imageMirror", {"credentialSecret": "dockerhub"})),
     "vllm-poc:cluster.imageMirror.credentialSecret"),
    ("mirror-prefix", mutate((f"{CL}.imageMirror", {"repositoryPrefix": "Vllm_Poc/"})),
     "vllm-poc:cluster.imageMirror.repositoryPrefix"),
    ("log-type-unknown", mutate((f"{CL}.logTypes", ["api", "audits"])), "vllm-poc:cluster.logTypes"),
    ("subnet-id", mutate((f"{NET}.vpcId", "vpc-0123abcd"), (f"{NET}.privateSubnets", {"ap-northeast-2a": "sub-1", "ap-northeast-2b": "subnet-0123abce"})), "vllm-poc:network.privateSubnets"),
    ("subnet-az", mutate((f"{NET}.vpcId", "vpc-0123abcd"), (f"{NET}.privateSubnets", {"zone-a": "subnet-0123abcd", "ap-northeast-2b": "subnet-0123abce"})), "vllm-poc:network.privateSubnets"),
    # -- system nodes ------------------------------------------------------------------------------
    ("system-types-empty", mutate((f"{SYS}.instanceTypes", [])), "vllm-poc:systemNodes.instanceTypes"),
    ("system-type-gpu", mutate((f"{SYS}.instanceTypes", ["p5.48xlarge"])), "vllm-poc:systemNodes.instanceTypes"),
    ("system-min-1", mutate((f"{SYS}.minSize", 1)), "vllm-poc:systemNodes.minSize"),
    ("system-sizes-order", mutate((f"{SYS}.minSize", 3), (f"{SYS}.desiredSize", 2)), "vllm-poc:systemNodes"),
    ("system-disk-small", mutate((f"{SYS}.diskSizeGib", 10)), "vllm-poc:systemNodes.diskSizeGib"),
    ("system-disk-big", mutate((f"{SYS}.diskSizeGib", 1000)), "vllm-poc:systemNodes.diskSizeGib"),
    ("system-size-float", mutate((f"{SYS}.maxSize", 2.5)), "vllm-poc:systemNodes.maxSize"),
    # -- GPU pools -----------------------------------------------------------------------------------
    ("pools-mapping", mutate((POOL, {"l40s": VALID_POOL})), "vllm-poc:gpuPools"),
    ("pools-empty", mutate((POOL, [])), "vllm-poc:servers[0].pool"),
    ("pool-name-upper", mutate((f"{POOL}[0].name", "L40S")), "vllm-poc:gpuPools[0].name"),
    ("pool-name-long", mutate((f"{POOL}[0].name", "p" * 41)), "vllm-poc:gpuPools[0].name"),
    ("pool-name-duplicate", mutate((f"{POOL}[1].name", "l40s")), "vllm-poc:gpuPools[1].name"),
    ("pool-type-unknown", mutate((f"{POOL}[0].instanceType", "g9.xlarge")), "vllm-poc:gpuPools[0].instanceType"),
    ("pool-type-missing", mutate((f"{POOL}[0].instanceType", DELETE)), "vllm-poc:gpuPools[0].instanceType"),
    ("pool-capacity-reserved", mutate((f"{POOL}[0].capacityTypes", ["reserved"])), "vllm-poc:gpuPools[0].capacityTypes"),
    ("pool-capacity-empty", mutate((f"{POOL}[0].capacityTypes", [])), "vllm-poc:gpuPools[0].capacityTypes"),
    ("pool-capacity-twice", mutate((f"{POOL}[0].capacityTypes", ["spot", "spot"])), "vllm-poc:gpuPools[0].capacityTypes"),
    ("pool-gpu-limit-zero", mutate((f"{POOL}[0].gpuLimit", 0)), "vllm-poc:gpuPools[0].gpuLimit"),
    ("pool-gpu-limit-negative", mutate((f"{POOL}[0].gpuLimit", -1)), "vllm-poc:gpuPools[0].gpuLimit"),
    ("pool-gpu-limit-below-node", mutate((f"{POOL}[1].gpuLimit", 2)), "vllm-poc:gpuPools[1]"),
    ("pool-gpu-limit-word", mutate((f"{POOL}[0].gpuLimit", "four")), "vllm-poc:gpuPools[0].gpuLimit"),
    ("pool-weight-zero", mutate((f"{POOL}[0].weight", 0)), "vllm-poc:gpuPools[0].weight"),
    ("pool-weight-101", mutate((f"{POOL}[0].weight", 101)), "vllm-poc:gpuPools[0].weight"),
    ("pool-fallback-on-demand", mutate((f"{POOL}[0].onDemandFallback", True)), "vllm-poc:gpuPools[0]"),
    ("pool-root-volume-small", mutate((f"{POOL}[0].rootVolumeGib", 10)), "vllm-poc:gpuPools[0].rootVolumeGib"),
    ("pool-consolidate-words", mutate((f"{POOL}[0].consolidateAfter", "10 minutes")), "vllm-poc:gpuPools[0].consolidateAfter"),
    ("pool-expire-days", mutate((f"{POOL}[0].expireAfter", "30d")), "vllm-poc:gpuPools[0].expireAfter"),
    ("pool-misspelt-key", mutate((f"{POOL}[0].gpuLimits", 4)), "vllm-poc:gpuPools[0].gpuLimits"),
    ("pool-fallback-collision", mutate((f"{POOL}[0].name", "g7e-on-demand")), "vllm-poc:gpuPools[2].onDemandFallback"),
    ("pool-raid0-word", mutate((f"{POOL}[0].raid0", "yes please")), "vllm-poc:gpuPools[0].raid0"),
    # -- servers -------------------------------------------------------------------------------------
    ("servers-mapping", mutate((SRV, {"gemma-fp8": {"pool": "l40s"}})), "vllm-poc:servers"),
    ("server-duplicate", mutate((SRV, BASE["config"][SRV] * 2)), "vllm-poc:servers[1].name"),
    ("server-name-invalid", mutate((f"{SRV}[0].name", "Gemma_FP8")), "vllm-poc:servers[0].name"),
    ("server-pool-unknown", mutate((f"{SRV}[0].pool", "h100")), "vllm-poc:servers[0].pool"),
    ("server-model-unknown", mutate((f"{SRV}[0].model", "llama-70b")), "vllm-poc:servers[0].model"),
    ("server-model-missing", mutate((f"{SRV}[0].model", DELETE)), "vllm-poc:servers[0].model"),
    ("server-traffic-unknown", mutate((f"{SRV}[0].trafficClass", "realtime")), "vllm-poc:servers[0].trafficClass"),
    ("server-tp-3", mutate((f"{SRV}[0].tensorParallelSize", 3)), "vllm-poc:servers[0].tensorParallelSize"),
    ("server-tp-over-node", mutate((f"{SRV}[0].tensorParallelSize", 8)), "vllm-poc:servers[0]"),
    ("server-max-len-small", mutate((f"{SRV}[0].maxModelLen", 100)), "vllm-poc:servers[0].maxModelLen"),
    ("server-max-len-text", mutate((f"{SRV}[0].maxModelLen", "8k")), "vllm-poc:servers[0].maxModelLen"),
    ("server-max-seqs-zero", mutate((f"{SRV}[0].maxNumSeqs", 0)), "vllm-poc:servers[0].maxNumSeqs"),
    ("server-max-seqs-negative", mutate((f"{SRV}[0].maxNumSeqs", -5)), "vllm-poc:servers[0].maxNumSeqs"),
    ("server-max-seqs-below-bench", mutate((f"{SRV}[0].maxNumSeqs", 8)), "vllm-poc:servers[0]"),
    ("server-gpu-mem-high", mutate((f"{SRV}[0].gpuMemoryUtilization", 1.5)), "vllm-poc:servers[0].gpuMemoryUtilization"),
    ("server-gpu-mem-percent", mutate((f"{SRV}[0].gpuMemoryUtilization", 90)), "vllm-poc:servers[0].gpuMemoryUtilization"),
    ("server-replicas-negative", mutate((f"{SRV}[0].replicas", -1)), "vllm-poc:servers[0].replicas"),
    ("server-replicas-over-limit", mutate((f"{SRV}[0].replicas", 8)), "vllm-poc:servers[0].replicas"),
    ("server-env-list", mutate((f"{SRV}[0].env", ["A=1"])), "vllm-poc:servers[0].env"),
    ("server-misspelt-key", mutate((f"{SRV}[0].maxNumSeq", 64)), "vllm-poc:servers[0].maxNumSeq"),
    ("server-kv-dtype", mutate((f"{SRV}[0].kvCacheDtype", "fp4")), "vllm-poc:servers[0].kvCacheDtype"),
    ("server-spec-tokens", mutate((f"{SRV}[0].numSpeculativeTokens", 0)), "vllm-poc:servers[0].numSpeculativeTokens"),
    ("server-image-latest", mutate((f"{SRV}[0].image", "vllm/vllm-openai:latest")), "vllm-poc:servers[0].image"),
    ("server-extra-args-text", mutate((f"{SRV}[0].extraArgs", "--foo")), "vllm-poc:servers[0].extraArgs"),
    ("server-extra-args-misspelt-flag", mutate((f"{SRV}[0].extraArgs", ["--max-num-seq", "128"])),
     "vllm-poc:servers[0].extraArgs[0]"),
    # -- bench ---------------------------------------------------------------------------------------
    ("bench-target-unknown", mutate((f"{BENCH}.targets", ["gemma-bf16"])), "vllm-poc:bench.targets[0]"),
    ("bench-targets-text", mutate((f"{BENCH}.targets", "gemma-fp8")), "vllm-poc:bench.targets"),
    ("bench-scenario-unknown", mutate((f"{BENCH}.scenarios", ["Z9"])), "vllm-poc:bench.scenarios"),
    ("bench-scenarios-empty", mutate((f"{BENCH}.scenarios", [])), "vllm-poc:bench.scenarios"),
    ("bench-concurrency-zero", mutate((f"{BENCH}.concurrencies", [0])), "vllm-poc:bench.concurrencies"),
    ("bench-concurrencies-empty", mutate((f"{BENCH}.concurrencies", [])), "vllm-poc:bench.concurrencies"),
    ("bench-concurrencies-twice", mutate((f"{BENCH}.concurrencies", [1, 1])), "vllm-poc:bench.concurrencies"),
    ("bench-window-too-short", mutate((f"{BENCH}.windowS", 2)), "vllm-poc:bench.windowS"),
    ("bench-min-prompts-too-few", mutate((f"{BENCH}.minPrompts", 32)), "vllm-poc:bench.minPrompts"),
    ("bench-price-negative", mutate((f"{BENCH}.pricePerHour", {"gemma-fp8": -1})), "vllm-poc:bench.pricePerHour.gemma-fp8"),
    ("bench-price-zero", mutate((f"{BENCH}.pricePerHour", {"gemma-fp8": 0})), "vllm-poc:bench.pricePerHour.gemma-fp8"),
    ("bench-price-not-target", mutate((f"{BENCH}.pricePerHour", {"other": 1.5})), "vllm-poc:bench.pricePerHour.other"),
    ("bench-price-word", mutate((f"{BENCH}.pricePerHour", {"gemma-fp8": "cheap"})), "vllm-poc:bench.pricePerHour.gemma-fp8"),
    ("bench-seed-word", mutate((f"{BENCH}.seed", "abc")), "vllm-poc:bench.seed"),
    ("bench-misspelt-key", mutate((f"{BENCH}.target", ["gemma-fp8"])), "vllm-poc:bench.target"),
    # -- storage and tags --------------------------------------------------------------------------
    ("storage-teardown", mutate(("vllm-poc:storage.teardown", "keep")), "vllm-poc:storage.teardown"),
    ("storage-kms", mutate(("vllm-poc:storage.kmsKeyArn", "alias/mine")), "vllm-poc:storage.kmsKeyArn"),
    ("tag-aws-prefix", mutate(("vllm-poc:tags", {"aws:owner": "me"})), "vllm-poc:tags.aws:owner"),
    ("tag-aws-prefix-upper", mutate(("vllm-poc:tags", {"AWS:Owner": "me"})), "vllm-poc:tags.AWS:Owner"),
    ("tag-value-long", mutate(("vllm-poc:tags", {"Owner": "x" * 257})), "vllm-poc:tags.Owner"),
    ("tag-key-long", mutate(("vllm-poc:tags", {"k" * 129: "x"})), "vllm-poc:tags." + "k" * 129),
    ("tag-key-chars", mutate(("vllm-poc:tags", {"owner#1": "x"})), "vllm-poc:tags.owner#1"),
    ("tag-value-chars", mutate(("vllm-poc:tags", {"Owner": "a<b>"})), "vllm-poc:tags.Owner"),
    ("tags-list", mutate(("vllm-poc:tags", ["Owner=me"])), "vllm-poc:tags"),
    ("tag-value-number", mutate(("vllm-poc:tags", {"CostCenter": 1234})), "vllm-poc:tags.CostCenter"),
]


def _write(tmp_path: Path, body: str) -> Path:
    (tmp_path / "Pulumi.case.yaml").write_text(body)
    return tmp_path


def test_the_table_holds_at_least_100_distinct_files():
    assert len(CASES) >= 100
    assert len({case_id for case_id, _, _ in CASES}) == len(CASES)
    assert len({body for _, body, _ in CASES}) == len(CASES), "two cases write the same file"


@pytest.mark.parametrize("case_id,body,expected", CASES, ids=[c[0] for c in CASES])
def test_bad_stack_file_is_refused_by_render_and_preflight(case_id, body, expected, tmp_path, capsys):
    directory = _write(tmp_path, body)
    rc = stacks_main(["render", "case", "--dir", str(directory), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert expected in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists(), "nothing is written for a bad stack"

    rc = stacks_main(["preflight", "case", "--dir", str(directory)])
    err_preflight = capsys.readouterr().err
    assert rc == 2, err_preflight
    assert expected in err_preflight, err_preflight
    assert "Traceback" not in err_preflight


def test_type_errors_do_not_hide_cross_key_errors(tmp_path, capsys):
    body = mutate((f"{POOL}[1].gpuLimit", "eight"), (f"{BENCH}.targets", ["gemma-fp8", "nope"]),
                  (f"{SRV}[0].maxModelLen", "8k"), ("aws:regoin", "x"))
    rc = stacks_main(["render", "case", "--dir", str(_write(tmp_path, body)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2
    for key in ("vllm-poc:gpuPools[1].gpuLimit", "vllm-poc:bench.targets[1]", "vllm-poc:servers[0].maxModelLen",
                "aws:regoin"):
        assert key in err, err
    assert "(4 problems)" in err


def test_problems_carry_the_line_they_are_written_on(tmp_path, capsys):
    body = "config:\n  aws:region: ap-northeast-2\n  vllm-poc:cluster:\n    kubernetesVersion: 1.30\n"
    stacks_main(["render", "case", "--dir", str(_write(tmp_path, body)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert 'line 4: vllm-poc:cluster.kubernetesVersion: expected text, but YAML reads the unquoted 1.30 as a number; ' \
           'quote it: kubernetesVersion: "1.30"' in err


def test_did_you_mean_and_where_the_reference_lives(tmp_path, capsys):
    body = mutate((f"{CL}.kubernetesVerison", "1.36"), ("vllm_poc:bench", {}), ("aws:regoin", "us-east-1"))
    stacks_main(["render", "case", "--dir", str(_write(tmp_path, body)), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert "did you mean 'kubernetesVersion'?" in err
    assert "did you mean 'vllm-poc:bench'?" in err
    assert "did you mean 'aws:region'?" in err
    assert "docs/configuration.md" in err and "Pulumi.yaml" not in err


def test_teardown_needs_only_the_cluster_settings(tmp_path, capsys):
    """A serving setting that no longer validates must not block pre-destroy or teardown-check."""
    body = mutate((f"{SRV}[0].model", "retired-model"))
    rc = stacks_main(["pre-destroy", "case", "--dir", str(_write(tmp_path, body)), "--dry-run"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "vllm-poc-dev" in out.out
    # ...but a broken stack file (structure, cluster keys) is still refused
    _write(tmp_path, mutate((f"{CL}.name", "bad_name")))
    assert stacks_main(["pre-destroy", "case", "--dir", str(tmp_path), "--dry-run"]) == 2
    assert "vllm-poc:cluster.name" in capsys.readouterr().err


@pytest.mark.parametrize("case_id", ["yaml-tab", "top-level-list", "secure-nested", "misspelt-namespace",
                                     "k8s-version-float"])
def test_bad_stack_file_in_a_real_process(case_id, tmp_path):
    body, expected = next((b, e) for c, b, e in CASES if c == case_id)
    directory = _write(tmp_path, body)
    for argv in (["render", "case", "--dir", str(directory), "--out", str(tmp_path / "out")],
                 ["preflight", "case", "--dir", str(directory)],
                 ["teardown-check", "case", "--dir", str(directory)]):
        proc = subprocess.run([sys.executable, "-m", "stacks", *argv], cwd=REPO, capture_output=True, text=True,
                              timeout=120)
        assert proc.returncode == 2, (argv, proc.stderr)
        assert expected in proc.stderr and "Traceback" not in proc.stderr, (argv, proc.stderr)


def test_out_pointing_at_a_file_is_refused(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    with pytest.raises(SystemExit) as stop:  # refused while the arguments are parsed, as every --out
        stacks_main(["render", "dev", "--out", str(target)])
    assert stop.value.code == 2
    assert "is a file; this takes a folder" in capsys.readouterr().err


def test_missing_stack_names_the_known_ones(capsys):
    assert stacks_main(["render", "devv", "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err
    assert "Pulumi.devv.yaml" in err and "did you mean 'dev'?" in err


def test_the_pulumi_program_applies_the_same_checks():
    """`pulumi up` hands the program its config itself; the program refuses what the commands refuse."""
    from pulumi.runtime import config as runtime_config

    from stacks import program
    from stacks.ops import mocks

    runtime_config.set_all_config({"aws:region": "ap-northeast-2", "vllm_poc:bench": "{}",
                                   "vllm-poc:tags": '{"Owner": "me"}'}, secret_keys=["vllm-poc:tags"])
    try:
        with pytest.raises(Exception) as caught:
            mocks.run(program.run, stack="program-check")
    finally:
        runtime_config.set_all_config({}, secret_keys=[])
    message = str(caught.value)
    assert "vllm_poc:bench: unknown namespace" in message and "vllm-poc:tags: a secret" in message, message
    assert "Traceback" not in message


def test_a_secret_is_taken_where_a_setting_is_secret_and_refused_elsewhere():
    from stacks import loader

    config = yaml.safe_load(mutate(("vllm-poc:hfToken", {"secure": "v1:abcd"})))["config"]
    settings = loader.settings_from_values(config, stack="case")
    assert settings.hf_token is not None
    config["vllm-poc:tags"] = {"Owner": {"secure": "v1:abcd"}}
    with pytest.raises(loader.StackFileError) as caught:
        loader.settings_from_values(config, stack="case")
    assert ("vllm-poc:tags.Owner: a secret (`secure:`) value, but only vllm-poc:alertWebhookUrl, vllm-poc:hfToken "
            "may be secret") in str(caught.value)
