"""alignment: post-training language models with reinforcement learning on verified rewards.

Submodules are imported where used (torch is heavy; the grader's worker process imports none of it).
"""

__version__ = "0.1.0"
