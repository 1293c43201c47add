"""Running a sweep against a server: `bench sweep` (sweep: the grid loop and the command; grid: the
runs and their command lines; runner: the run machinery; server: health and probes), the extra
runs, the bench client, telemetry, seeds, hardware and prices, the S3 reach check, `bench fetch`,
`bench mix-check` and the GPU release (`python -m bench.run.release`: scale a server to 0 once
its Jobs have ended, and back up for a new sweep). Imports analysis/ (the rules runs are judged by) and common/."""
