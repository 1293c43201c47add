"""Guardrails for the vllm-poc stacks, enforced by `pulumi preview/up --policy-pack policy`.

Every rule is a plain function over plain data, wrapped in a pulumi-policy object:

  resource rules   check_<rule>(resource_type, props, config) -> list[str]   (one message per finding)
  stack rules      check_<rule>(resources: list[StackResource]) -> list[(message, urn)]

One module per concern, each importing its siblings relatively (the Pulumi CLI runs the pack with
policy/ first on sys.path, so this package is `policies` there and `policy.policies` in the tests):

  values      unknown values and plain data, what every rule reads props through
  workloads   Kubernetes workloads, their containers and the `vllm serve` words they run
  serving     vLLM servers: FP8 checkpoints keep an FP8 KV cache, --max-num-seqs admits the bench
  images      container images pinned (a tag other than latest, or a digest; advisory: a digest)
  nodes       Karpenter: IMDSv2 hop limit 1 on EC2NodeClasses, the GPU taint on GPU NodePools
  stack       StackResource and the lookups the stack rules share
  storage     S3 buckets: a full public-access block and a TLS-only bucket policy
  iam         no wildcard actions on workload roles
  pack        the policy objects (POLICIES) and `check_resources()`, which runs them over
              (type, name, props) tuples as the engine would: how the tests run the pack over the
              stack's offline render

The pack imports nothing but the standard library and pulumi_policy: it runs in its own virtualenv
(policy/venv) that has nothing else.

Unknown values. During `pulumi preview` a value computed from another resource's output (a bucket
name, an ARN, a policy document built in an `apply`) is unknown. The engine's property proxy raises
on reading one; `plain()` turns them into the `UNKNOWN` marker instead, and every rule treats a
finding that depends on an unknown value as "cannot tell yet" and reports nothing. Resource rules run
again during `pulumi up` with the values resolved, before the resource is created; stack rules run
again at the end of `pulumi up`.

Scope and decisions:
- Workloads: Deployments, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs and Pods declared as
  Pulumi resources (also the children of yaml/v2 ConfigGroups and helm/v4 Charts, which the engine
  sees). Values of a helm/v3 Release are not inspected: the chart renders them inside the provider.
- A container runs vLLM when its words contain `vllm serve` (exec form, or an `sh -c` script split
  with shlex), or when it has no command and a vLLM image (whose entrypoint is `vllm serve`).
  Flags set only through `--config <file>` are not seen.
- --max-num-seqs absent: vLLM picks 256, or 1024 on >= 70 GiB GPUs; the rule counts on 256, so it
  passes for the bench's 64 and fails only if benchMaxConcurrency is raised above 256. It applies to
  every vLLM server, benchmarked or not.
- Every EC2NodeClass is checked for IMDSv2/hop limit 1 (see check_ec2nodeclass_imds).
- S3: a bucket is protected by companions whose `bucket` input equals its name, id, logical name or
  URN, or whose `bucket` input depends on it (engine property dependencies). An account-wide public
  access block with all four flags also counts.
- IAM: workload role = trusted by pods.eks.amazonaws.com or tagged vllm-poc/workload=true. Wildcard
  actions in Allow statements (and Allow + NotAction) are violations; `*` in Resource is not.
  AWS-managed policy ARNs attached to roles are not inspected (their documents are not in the stack).
"""

from .iam import (IAM_POLICY, POD_IDENTITY_PRINCIPAL, POLICY_ATTACHMENT, ROLE, ROLE_POLICY, ROLE_POLICY_ATTACHMENT,
                  WORKLOAD_TAG, check_iam_wildcard_actions, is_workload_role, wildcard_actions)
from .images import check_image_digests, check_image_tags, image_problem
from .nodes import GPU_TAINT_KEY, check_ec2nodeclass_imds, check_gpu_nodepool_taint, is_gpu_nodepool
from .pack import (EC2NODECLASS_IMDS, FP8_KV_CACHE, GPU_NODEPOOL_TAINT, IAM_WILDCARD_ACTIONS, IMAGE_DIGESTS, IMAGE_TAGS,
                   MAX_NUM_SEQS, PACK_NAME, POLICIES, S3_BUCKET_PROTECTION, Violation, check_resources)
from .serving import (DEFAULT_BENCH_MAX_CONCURRENCY, FP8_KV_CACHE_DTYPES, VARIANT_LABEL, VLLM_DEFAULT_MAX_NUM_SEQS,
                      check_fp8_kv_cache, check_max_num_seqs)
from .stack import StackResource
from .storage import (ACCOUNT_PUBLIC_ACCESS_BLOCK, BUCKET_POLICY, BUCKET_TYPES, PUBLIC_ACCESS_BLOCK, PUBLIC_ACCESS_FLAGS,
                      check_s3_bucket_protection, is_tls_only_policy)
from .values import UNKNOWN, is_unknown, plain
from .workloads import (CRON_JOB, DAEMON_SET, DEPLOYMENT, EC2_NODE_CLASS, JOB, NODE_POOL, POD, REPLICA_SET, STATEFUL_SET,
                        ServeArgs, containers, serve_args, vllm_servers)
