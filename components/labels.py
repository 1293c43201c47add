"""The label every Kubernetes object of the stack carries; `pre-destroy` selects on it."""

PART_OF = {"app.kubernetes.io/part-of": "vllm-poc"}
PART_OF_SELECTOR = ",".join(f"{key}={value}" for key, value in PART_OF.items())
# A server pod's traffic class (interactive, batch): its fleet pool, and the router that fronts it.
TRAFFIC_CLASS_LABEL = "vllm-poc/traffic-class"
