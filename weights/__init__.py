"""Model weights into the weights bucket: the S3 side shared with `stage-weights` (store) and the Hub sync (hub).

Plain Python with boto3 and huggingface_hub, no Pulumi: the weight-sync Job runs it from a ConfigMap.
"""
