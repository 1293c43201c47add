"""`python -m bench demo`: the whole benchmark on this machine, on vLLM's CPU build and a tiny model."""
