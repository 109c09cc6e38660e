"""`hostctl tune`: the recipe's tuning block. plan.py plans trials and boots (pure), runner.py runs
them through `up`'s lifecycle and bench's probes, chart.py draws the objective per trial, restore.py
brings back the service that was up; command.py is the command itself (load, sweep, print)."""
