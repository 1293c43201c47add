"""The suite: `make test` runs all of it, `make test-fast` what needs no vLLM process.

One flat folder on purpose: pytest finds a test by its file name, `pytest tests/test_bench_*` or
`-k` picks a room, and many files test across rooms (a render test reads what stacks/ composed from
components/; an end-to-end sweep drives bench/ against a server the stack would run), so a tree by
package would file them arbitrarily. The names say the room instead; this is the index.

  the program and its stacks     test_settings, test_bad_stacks, test_stacks, test_serving,
                                 test_variants, test_vllm_flags, test_vllm_cli_args, test_first_up,
                                 test_api_access, test_s3_ranges, test_render, test_render_stable,
                                 test_zones, test_time_budget
  the components, as rendered    test_network, test_cluster, test_karpenter, test_gpu_capacity,
                                 test_weight_store, test_weight_sync, test_vllm_server,
                                 test_compile_cache_render, test_workload_identity, test_pod_identity,
                                 test_network_policy, test_pod_security, test_exposure,
                                 test_job_lifetimes, test_bench_job, test_report_job, test_bench_rounds,
                                 test_gpu_release,
                                 test_bench_hardware_render, test_startup_render, test_prompt_set
  outside judges of the renders  test_k8s_schemas, test_schema_source, test_scanners, test_policies,
                                 test_policies_workloads, test_image_provenance, test_placement (every pod
                                 has a node it may run on)
  operator commands              test_preflight, test_preflight_offline, test_teardown, test_staging,
                                 test_stacks_diff, test_life_of_ups, test_operator_friction, test_interrupts,
                                 test_workflows, test_cli_advice (both CLIs' advice and --out)
                                 test_cli_vocabulary (one name, form and default per meaning; help length)
  weights                        test_weight_sync (the Job), test_compile_cache, test_model_loading_s3
  bench: running a sweep         test_bench_sweep, test_bench_e2e, test_bench_extra_runs,
                                 test_bench_seeds, test_bench_telemetry, test_bench_telemetry_vllm,
                                 test_bench_kube, test_bench_s3, test_bench_s3_folders,
                                 test_bench_mixcheck, test_workloads, test_workloads_sweep,
                                 test_workloads_vllm, test_bench_client,
                                 test_bench_sizing (runs sized by time from a burst; the window held)
  bench: analysis                test_bench_verdict, test_bench_capacity, test_bench_capacity_calibration,
                                 test_bench_search (the search to a target width, repeats, the band),
                                 test_bench_capacity_e2e,
                                 test_bench_report, test_bench_report_checks, test_bench_report_rehearsal,
                                 test_bench_report_repeats (a side's sweeps from fresh servers pooled),
                                 test_bench_compare, test_bench_compare_lead (winners beyond the noise),
                                 test_bench_plan, test_bench_answer, test_bench_pages, test_bench_run_settings,
                                 test_bench_pages_browser, test_bench_pages_figures, test_bench_publish,
                                 test_bench_one_figure (one capacity, ratio and fleet everywhere)
  bench: start-up                test_bench_startup, test_startup_collect, test_startup_timeline,
                                 test_startup_timeline_vllm, test_startup_compile_cache,
                                 test_bench_streamer, test_netlimits, test_pod_security_vllm
  bench: the demo                test_bench_demo, test_bench_demo_vllm
  bench: one GPU                 test_gpu_check, test_gpu_check_vllm, test_full_model, test_gpu_check_full,
                                 test_gpu_experiment_record (an experiment's commands and record),
                                 test_gpu_experiment_page (what its page says), test_gpu_mixed,
                                 test_leftovers (a server never outlives its command)
  the fleet                      test_fleet_plan, test_fleet_render, test_fleet_prometheus,
                                 test_fleet_prometheus_vllm, test_fleet_router, test_fleet_router_pools
                                 (a router per pool, on its rendered arguments), test_fleet_router_vllm,
                                 test_fleet_rehearsal, test_fleet_alerts (the SLO alerts' receiver)
  the house                      test_package_graph, test_bench_wings, test_layout, test_docs,
                                 test_locks (the set-up: locks/ and the Makefile), test_suite_grouping
                                 (the vLLM tests on one worker)

Shared set-up is in tests/fixtures/, one module per concern (moto, the vLLM environments, the fake
Pod Identity agent, renders, the browser), and the offline Kubernetes validator in its package
tests/fixtures/k8s/; tests/benchmarks/ prints figures and asserts
none; tests/proof_compile_cache.py is a longer experiment outside the suite.
"""
