"""The handouts' experiments as sweeps, and the figures and tables of runs.

sweep.py      presets: arms x seeds as runs, which are finished or to resume, the results table
run_table.py  runs as metric rows from metrics.jsonl or wandb CSV exports; final-reward tables
plotting.py   PNG figures of one or more runs
"""
