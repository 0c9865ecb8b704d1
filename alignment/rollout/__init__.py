"""Rollout engines: prompts in, group_size samples per prompt out, with token ids and log-probs.

interface.py       the interface every engine implements (SamplingConfig, Rollout, RolloutEngine); it
                   depends on no backend
backends.py        choosing (--backend auto) and building a backend; which vLLM build is installed
hf_engine.py       transformers models: batched KV-cache sampling, stop strings, min_tokens, exact log-probs
vllm_engine.py     vLLM (CUDA or CPU build) in this process; weight reloads; sleeping on a shared GPU
lm_engine.py       our own TransformerLM (--backend transformer_lm) ...
lm_sampler.py      ... and its KV-cache sampler
decoding.py        what the in-process engines share: the eager decoding loop, stop strings, in-place weight loads
decode_choice.py   --decode: which path (static or eager) a batch of the in-process engines takes, and why
static_decoding.py the static path: fixed-shape steps over slot buffers, CUDA graphs per batch-size bucket, host
                   syncs every few steps
hf_static.py       the hf backend's step on the static path (a transformers Cache over the slots)
row_streams.py     each sampled row's own random numbers (SplitMix64 of its key and the step)
reserved_cache.py  a transformers KV cache that writes new tokens into reserved room
forward_tape.py    the sampler's forward kept for the learner to replay (--reuse-rollout-forward)
streaming.py       streaming generation: work and weights fed to an engine while it samples, groups out as they
                   finish, in-flight weight loads, per-token versions (the async Ray strategy)
sharded.py         under torchrun: each rank samples and grades its share, every rank gets all
"""
