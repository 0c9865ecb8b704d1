"""Expert iteration (CS336 A5 §5): sample G answers to Db questions, keep the correct ones, SFT on them, repeat.

    uv run scripts/expert_iteration.py --config configs/ei_gsm8k_demo.toml          # 2 steps after the SFT demo
    uv run scripts/expert_iteration.py --model outputs/sft/policy --dataset math --questions-per-step 1024
    uv run scripts/expert_iteration.py --resume outputs/expert_iteration             # continue a stopped run
    uv run torchrun --nproc-per-node 2 scripts/expert_iteration.py --config ...      # one policy sharded over 2
    processes

Every field of alignment.supervised.config.EIConfig is a flag; --model takes any HF folder, including the policy/ folder
written by scripts/train_sft.py. Writes metrics.jsonl (one row per EI step: kept fraction, loss, entropy; and
the held-out summaries), rollouts.jsonl, checkpoint/, policy/ and plots/ to --output-dir. Under torchrun each
process samples its share of the questions with the hf backend and trains its shard of one policy; rank 0 writes.
"""

from alignment.expert_iteration import expert_iteration
from alignment.supervised.config import EIConfig
from scripts.train_sft import make_app

app = make_app(EIConfig, expert_iteration, "Expert iteration with held-out evaluation (see the module docstring).")

if __name__ == "__main__":
    app()
