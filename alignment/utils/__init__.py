"""Two helpers every layer may use.

atomic.py  result files written atomically (no truncated file under the final name)
faults.py  ALIGNMENT_FAULT=<point>[:n][@rank]: kill -9 at a named point, for fault tests
"""
