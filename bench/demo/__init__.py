"""`python -m bench demo` (command): the whole benchmark on this machine, on vLLM's CPU build
(cpu_vllm) and a tiny random model (tiny_model). Imports every wing; runs its sweeps as processes."""
