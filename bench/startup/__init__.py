"""A server's start-up: `bench startup` (phases: a vLLM log's phases), `bench timeline` (collect:
pod timelines read in the cluster; timeline), the start-up model and the report's start-up section
(model, report), `bench streamer`, network limits, sleep/wake. Imports common/ only."""
