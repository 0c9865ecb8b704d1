"""Expert iteration (CS336 A5 §5): sample G answers to Db questions, keep the correct ones, SFT on them, repeat.

    uv run scripts/expert_iteration.py --config configs/ei_gsm8k_demo.toml       # CPU demo: after the SFT demo
    uv run scripts/expert_iteration.py --dataset math --questions-per-step 1024  # the handout's: the base model
    uv run scripts/expert_iteration.py --resume outputs/expert_iteration          # continue a stopped run
    uv run torchrun --nproc-per-node 2 scripts/expert_iteration.py --config ...   # one policy sharded over 2
    processes

Every field of alignment.supervised.config.EIConfig is a flag. --model is where it starts: by default the handout's
base model (Qwen/Qwen2.5-Math-1.5B); any HF folder too, such as the policy/ folder of scripts/train_sft.py, which the
CPU demo starts from because SmolLM2-135M zero-shot gets almost no answer right. Writes metrics.jsonl (one row per
EI step: kept fraction, loss, entropy; and the held-out summaries), rollouts.jsonl, checkpoint/, policy/ and plots/
to --output-dir. Under torchrun each process samples its share of the questions with the hf backend and trains its
shard of one policy; rank 0 writes.
"""

from alignment.config.cli import script_help
from alignment.expert_iteration import expert_iteration
from alignment.supervised.config import EIConfig
from scripts.train_sft import make_app

SUMMARY = script_help(__doc__, "scripts/expert_iteration.py")
app = make_app(EIConfig, expert_iteration, SUMMARY)

if __name__ == "__main__":
    app()
