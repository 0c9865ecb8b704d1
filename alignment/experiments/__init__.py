"""The handouts' experiments as sweeps, and the figures and tables of runs.

sweep.py      presets: arms x seeds as runs (with --set overrides, or an earlier sweep's best arm as the base),
              which are finished, diverged or to resume; the results table, the best arm, sweep.json
run_table.py  runs as metric rows from metrics.jsonl or wandb CSV exports; final-reward tables
plotting.py   PNG figures of one or more runs: curves, time per phase, KL with validation, pass@N
"""
