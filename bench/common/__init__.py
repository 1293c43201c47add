"""What every wing of the bench (and weights/) shares: S3 and s3:// folders (s3, locations),
progress, Ctrl-C and SIGTERM (interrupts), the in-cluster API reads (kube), the Prometheus text
format (prometheus), a command run on its own (cli), the GPU instance table (instances, read by
stacks/catalog.py too) and the scenario definitions (workloads, scenarios). Imports nothing else
of the bench."""
