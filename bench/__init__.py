"""Benchmark of a served model: sweep, report, plan, startup phases and timelines, streamer grid, demo.

Plain Python (stdlib; boto3 only for s3:// locations, numpy for the capacity statistics,
prometheus_client for /metrics, matplotlib only for charts, the Run:ai streamer only for
`streamer`), no Pulumi: it runs inside the vllm/vllm-openai image as `python3 -m bench ...` and on
a laptop. `python -m bench <command> --help` describes each command.

    python -m bench sweep    --base-url URL --model NAME --tokenizer DIR|s3://... --out DIR [--resume] [--upload s3://...]
    python -m bench report   DIR [--baseline DIR --price-per-hour X --baseline-price-per-hour Y] --out DIR
    python -m bench plan     CANDIDATE_DIR... --baseline DIR --current-replicas N --out DIR
    python -m bench compare  DIR... --out DIR
    python -m bench publish  --candidate s3://... --baseline s3://... --out s3://...   (the report Job)
    python -m bench open     REPORT [--out DIR]
    python -m bench mix-check --plan DIR|s3://... --base-url URL --model NAME --tokenizer ... --out DIR
    python -m bench startup  SERVER.LOG|RECORD.json [--json] [--instance-type T]
    python -m bench timeline --namespace NS --selector LABELS --out DIR   (in the cluster)
    python -m bench streamer s3://weights/models/ORG/NAME/ [--concurrencies 8,16,32,64] --out DIR
    python -m bench fetch    s3://bucket/prefix DIR
    python -m bench demo     (make demo: the whole benchmark on this machine, on vLLM's CPU build)
    python -m bench gpu-check --out DIR   (the serving configuration checked on one GPU in ~10 minutes)

The package has four wings and the pieces they share; each wing imports only the ones below it:

    run/       running a sweep against a server: the grid and its command (sweep, grid, runner,
               server), the extra runs, the bench client, telemetry, seeds, hardware and prices, the
               S3 reach check, fetch, the mixed-traffic check. May import analysis/ (the sweep judges
               each run by the analysis' rules as it goes: result validity, the capacity search's
               statistics, the capacity it records) and common/.
    analysis/  reading sweeps: the result-file contract (results.py, with the rules a run and its
               telemetry are judged by), the loaded side, capacity statistics and the verdict,
               checks, report, summary, compare, plan and fleet sizing, the autoscaled fleet's targets
               and the autoscaler's rule (fleet.py), charts, pages, publish, open.
               May import startup/ (the report's start-up section) and common/; never run/.
    startup/   a server's start-up: log phases (`startup`), pod timelines (`timeline`, collect.py),
               the start-up model and report section, the streamer grid, network limits, sleep/wake.
               May import common/ only.
    demo/      `python -m bench demo`, the CPU build of vLLM and the tiny model it serves, and
               `python -m bench gpu-check` (one GPU). May import every wing; it runs its sweeps as
               `python -m bench sweep` processes.
    common/    what every wing (and weights/) shares: S3 and s3:// folders, progress, Ctrl-C and
               SIGTERM, the in-cluster API reads, the Prometheus text format, the fleet's Prometheus
               rules, dashboard and autoscaler queries (which the stack renders), the GPU instance table
               (which stacks/catalog.py reads too) and the scenario definitions (which the stack's
               settings read). Imports nothing else of the bench.
    data/      the Korean marketplace prompt set that common/workloads.py reads.

So the arrows between wings run one way: run -> analysis -> startup -> common. Result files are
read by one module, `bench.analysis.results`, whose validity rules the sweep, `--resume` and the
report share. The Jobs mount the package as this same tree (components/code_volume.py).
"""
