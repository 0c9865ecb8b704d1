"""Policies: loading them, adapting them, and writing them back as standard model folders.

loading.py         the packaged SmolLM2-135M-Instruct, a local HF folder or a hub id (LoRA applied at load)
lora.py            LoRA through peft: settings, adapters, adapter-only optimizer and sync, the KL reference as
                   the base with adapters off, merged weights for engines and policy/
transformer_lm.py  our own from-scratch TransformerLM (RMSNorm, RoPE, GQA, SwiGLU, KV cache)
lm_checkpoint.py   its checkpoint folder, and loading HF Llama folders into it
a1_checkpoint.py   a student's CS336 A1 TransformerLM (A1 naming and conventions) as ours
bpe_tokenizer.py   A1's byte-level BPE tokenizer (vocab.json, merges.txt) as a transformers tokenizer
gqa_attention.py   CPU grouped-query attention without copying keys and values to every head
packed_rows.py     a microbatch's rows packed without padding, each attending to itself (sdpa_packed attention)
chunked_head.py    label log-probs and entropy fused with the LM head, a chunk of tokens at a time
policy_folder.py   the trained policy as a standard model folder, and back into a live model or engine
teacher.py         on-policy distillation's teacher: loaded frozen, its tokenizer checked against the student's
decode_attention.py  one new token's attention over a fixed-length cache, grouped heads folded (the static decode path)
synthetic_tokenizer.py  a word-level tokenizer built in memory, for benches and checks without a download
"""
