"""SFT and expert iteration beyond the handouts' primitives: the parts alignment/sft_run.py and
alignment/expert_iteration.py compose.

    config.py   settings of scripts/train_sft.py and scripts/expert_iteration.py, and their checks
    trainer.py  SFTTrainer: one optimizer step of per-token NLL over prompt/response examples (each rank its
                microbatches when sharded)
    session.py  what both runs share: the policy, engine, grader, metrics log and checkpoint of a run, held-out
                evaluation (log_generations), optimizer steps over examples in seeded order
"""
