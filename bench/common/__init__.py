"""What every wing of the bench (and the weights package) shares: S3 and s3:// folders, progress,
Ctrl-C and SIGTERM, the in-cluster API reads, and the scenario definitions."""
