"""The label every Kubernetes object of the stack carries; `pre-destroy` selects on it."""

PART_OF = {"app.kubernetes.io/part-of": "vllm-poc"}
PART_OF_SELECTOR = ",".join(f"{key}={value}" for key, value in PART_OF.items())
