"""`hostctl tune`: the recipe's tuning block. plan.py plans trials and boots (pure), runner.py runs
them through `up`'s lifecycle and bench's probes, chart.py draws the objective per trial."""
