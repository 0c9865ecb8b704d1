"""Rollout engines: prompts in, group_size samples per prompt out, with token ids and log-probs.

interface.py       the interface every engine implements (SamplingConfig, Rollout, RolloutEngine); it
                   depends on no backend
backends.py        choosing (--backend auto) and building a backend; which vLLM build is installed
hf_engine.py       transformers models: batched KV-cache sampling, stop strings, min_tokens, exact log-probs
vllm_engine.py     vLLM (CUDA or CPU build) in this process; weight reloads; sleeping on a shared GPU
lm_engine.py       our own TransformerLM (--backend transformer_lm) ...
lm_sampler.py      ... and its KV-cache sampler
decoding.py        what the in-process engines share: the decoding loop, stop strings, in-place weight loads
reserved_cache.py  a transformers KV cache that writes new tokens into reserved room
forward_tape.py    the sampler's forward kept for the learner to replay (--reuse-rollout-forward)
streaming.py       streaming generation: work and weights fed to an engine while it samples, groups out as they
                   finish, in-flight weight loads, per-token versions (the async Ray strategy)
sharded.py         under torchrun: each rank samples and grades its share, every rank gets all
"""
