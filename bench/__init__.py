"""Benchmark of a served model: sweep, report, startup phases, fetch.

Plain Python (stdlib; boto3 only for s3:// locations, matplotlib only for report charts), no Pulumi:
it runs inside the vllm/vllm-openai image as `python3 -m bench ...` and on a laptop.

    python -m bench sweep   --base-url URL --model NAME --tokenizer DIR|s3://... --out DIR [--resume] [--upload s3://...]
    python -m bench report  DIR [--baseline DIR --price-per-hour X --baseline-price-per-hour Y] --out DIR
    python -m bench startup SERVER.LOG [--json]
    python -m bench fetch   s3://bucket/prefix DIR

`python -m bench <command> --help` describes each command. Result files are read by one module,
`bench.results`, whose validity rules the sweep, `--resume` and the report share.
"""
