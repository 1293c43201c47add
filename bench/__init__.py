"""Benchmark of a served model: sweep, report, startup phases and timelines, streamer grid, fetch.

Plain Python (stdlib; boto3 only for s3:// locations, matplotlib only for report charts, the Run:ai
streamer only for `streamer`), no Pulumi:
it runs inside the vllm/vllm-openai image as `python3 -m bench ...` and on a laptop.

    python -m bench sweep   --base-url URL --model NAME --tokenizer DIR|s3://... --out DIR [--resume] [--upload s3://...]
    python -m bench report  DIR [--baseline DIR --price-per-hour X --baseline-price-per-hour Y] --out DIR
    python -m bench startup SERVER.LOG|RECORD.json [--json] [--instance-type T]
    python -m bench streamer s3://weights/models/ORG/NAME/ [--concurrency 8,16,32,64] [--memory-limit-gib 8,24] --out DIR
    python -m bench timeline --namespace NS --selector LABELS --out DIR   (in the cluster)
    python -m bench fetch   s3://bucket/prefix DIR

`python -m bench <command> --help` describes each command. Result files are read by one module,
`bench.results`, whose validity rules the sweep, `--resume` and the report share.
"""
