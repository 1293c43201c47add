"""One ComponentResource per concern, each in the file named after it, taking typed Args and reading
no config (stacks/ builds the Args from validated settings).

One flat folder on purpose: each file is one concern that a reviewer finds by its name (the names
stacks/ imports), the components import each other in one direction only (a Job takes the cluster
and the server it talks to; nothing imports a Job; tests/test_package_graph.py holds it), and a
folder per layer would add a level without removing any of those imports. This list is the index,
in the order stacks/environment/ composes them:

  network, cluster, iam, karpenter                 the VPC, EKS, its IAM pieces, Karpenter
  gpu_capacity, gpu_node_check, gpu_telemetry,      GPU NodePools and EC2NodeClasses, a node check per
  image_cache                                       pool, the DCGM exporter, the image-cache volume
  weight_store, weight_sync, compile_cache          S3 buckets and their layout, the weight sync Job,
                                                    a server's compile cache through S3
  workload_identity                                 one IAM role per service account (Pod Identity)
  vllm_server                                       a vLLM server from its serve spec
  network_policy, pod_security, labels              who reaches whom, pod security, the stack's label
  bench_job, bench_pod, startup_job, streamer_job,  the Jobs that run the bench package: sweeps,
  report_job, mix_check_job                         start-up timelines, the streamer, the report, the
                                                    mixed-traffic check
  monitoring, autoscaling, router                   a fleet: Prometheus with the SLO's rules and the
                                                    dashboard, KEDA and a ScaledObject per server,
                                                    the router in front of the pools
"""
