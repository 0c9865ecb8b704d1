"""The machinery around a training run: setting it up, its files, its memory.

setup.py               shared by GRPO, Ray, SFT and EI: tasks, devices, dtype, the torchrun group, the
                       policy (sharded when launched), engine, grader, memory check; PromptOrder, PhaseTimer
training_settings.py   TrainingSettings: the fields every training script shares, defined once
checkpoint.py          atomic checkpoints without pickle, refused when incomplete, damaged or foreign
metrics_log.py         metrics.jsonl (and its reader), rollouts.jsonl, wandb (named, grouped, resumed, on grpo /
                       optimizer steps)
time_budget.py         a run's wall clock and --time-budget: whether another step and the final validation fit
divergence.py          the Diverged error (NaN, inf, a loss past its bound) and the diverged.json it leaves
memory_plan.py         GPU memory planned from config.json before anything loads
precision.py           --precision: float32 master weights and the loss scaler in the optimizer, dtypes per mode
cpu_allocator.py       glibc settings that keep freed memory on CPU runs
threads.py             torch's thread count: --torch-threads, OMP_NUM_THREADS, else the cores idle at the start
generation.py          settings and set-up of the generation scripts (eval_zero_shot, best_of_n)
warm_start.py          the SFT warm start's settings and checks, which GRPOConfig mixes in (the SFT run it is:
                       `warm_start` in alignment/sft_run.py)
"""
