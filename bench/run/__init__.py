"""Running a sweep against a server: `bench sweep` (sweep: the grid loop and the command; grid: the
runs and their command lines; runner: the run machinery; server: health and probes), the extra
runs, the bench client, telemetry, seeds, hardware and prices, the S3 reach check, `bench fetch`
and `bench mix-check`. Imports analysis/ (the rules runs are judged by) and common/."""
