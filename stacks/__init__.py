"""The Pulumi program: a stack's config, validated once, composed into components.

Data flows one way: Pulumi config -> settings/ (typed, validated) -> the composition below ->
components/ (one ComponentResource per concern) -> resources. The operator commands (`python -m
stacks <command>`) are in ops/; the program imports nothing from there.

  program          entry point (the root __main__.py runs it): config -> settings -> environment
  loader           reads a stack file, or the program's config, into settings; every problem at once
  settings/        the settings models, one per config namespace, and the checks between keys
  serving/         what a vLLM server runs: model profiles, ServerSettings, the `vllm serve` spec
  variants         one server in config, several that each change one setting
  catalog          instance types and EKS versions the stack accepts
  vllm_flags       extraArgs against the serving image's `vllm serve` flags (vllm_flags.json)
  versions         the pins in pyproject.toml

  environment/     the composition (__init__): network, cluster, Karpenter, GPU pools, storage, servers,
                   bench Jobs; and the parts it calls: weights (the weight syncs and GPU node checks that
                   come before the servers), startup (the per-pool streamer Jobs and image cache), bench
                   (each benchmarked server's start-up record and sweep Job, and the hash that names its
                   results), report (the report Job and the stack output `report`), release (the GPU
                   release), fleet (the autoscaled pools and the SLO's rules), reach (the NetworkPolicies)
  job_code         the project's Python as the Jobs and pods mount it
  s3_ranges        the S3 ranges the NetworkPolicy allows, and telling when they went stale
  waivers          security/waivers.toml as checkov's own skip annotations on the objects

  account_checks   the stack against the account at preview (invokes), with identity, zones and
                   api_path: the caller's role, the VPC's zones, the way to the Kubernetes API
"""
