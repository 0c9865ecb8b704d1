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
policy_folder.py   the trained policy as a standard model folder, and back into a live model or engine
"""
