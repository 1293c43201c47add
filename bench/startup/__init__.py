"""A server's start-up: log phases, pod timelines, the start-up model, the streamer grid, sleep/wake."""
