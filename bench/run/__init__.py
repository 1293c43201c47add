"""Running a sweep against a server: the grid, the extra runs, the client, telemetry, hardware."""
