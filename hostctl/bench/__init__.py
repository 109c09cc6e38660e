"""`hostctl bench`: vLLM-MoET bench suites (suites.py) run by hostctl's probes (probes.py, with
`vllm bench serve` for throughput at concurrency in vllm_bench.py) against the running service
(runner.py), written as one hostctl.bench/v1 result; the qualify verdict (qualify.py); command.py is
the command itself (progress, the result printed, the exit code)."""
