"""GPU kernels the learner and the samplers share, and what decides whether they run.

sampling.py   one Triton program per row draws its next token from the logits (the samplers' draw, no nucleus)
head.py       the chunked LM head's elementwise work in Triton: each chunk's stats forward, its logit gradient backward
probe.py      the trivial kernel launched first, to learn whether Triton builds and runs on a device at all
support.py    whether a device takes Triton's kernels: the probe, then each kernel checked once against its torch
              path, every launch under its tensors' device
"""
