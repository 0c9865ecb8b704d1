"""Build a keyword-inclusion dataset: prompts from templates x keywords, answers sampled from a model and
kept only when they use every keyword, split 80/20.

    uv run scripts/build_keyword_dataset.py --model smollm2-135m --keyword-counts 1 --keyword-counts 2

Writes OUTPUT_DIR/train.jsonl and OUTPUT_DIR/validation.jsonl (fields prompt, answer, keywords) and
OUTPUT_DIR/build_settings.json; the same flags give byte-identical files. Prompts are wrapped in the
model's chat template for sampling; the files hold the bare instruction.
"""

import json
from dataclasses import dataclass
from pathlib import Path

import typer

from alignment.config import cli
from alignment.config.settings import OutputSettings, override, setting, to_json
from alignment.data.keyword_dataset import (
    build_keyword_dataset,
    dataset_prompts,
    existing_dataset_files,
    write_keyword_dataset,
)
from alignment.data.keywords import UW_KEYWORDS, load_keywords
from alignment.models.loading import load_tokenizer
from alignment.prompts import chat_template
from alignment.rollout.backends import make_rollout_engine, resolve_backend
from alignment.rollout.interface import Backend, SamplingConfig
from alignment.utils.atomic import atomic_write_json


@dataclass
class KeywordDatasetConfig(OutputSettings):
    model: str = setting(
        "smollm2-135m",
        "Model that writes the answers: a local HF folder (a run's policy/ too), one of our TransformerLM folders, a "
        "hub id, or `smollm2-135m`.",
    )
    output_dir: Path = override(OutputSettings, "output_dir", Path("outputs/keyword_dataset"))
    keywords_file: Path | None = setting(
        None,
        "One keyword per line (letters only); default: data/keywords/uw_cse599o.txt, the UW handout's 6,262 nouns "
        "from TinyStories (data/keywords/stand_in.txt: the project's 98).",
    )
    keyword_counts: list[int] = setting(
        [1, 2, 3], "Keywords per prompt (repeatable): 1 for single-word prompts, more for several."
    )
    prompts_per_count: int = setting(
        128, "Distinct prompts for each keyword count (fewer if fewer template x keyword combinations exist)."
    )
    samples_per_prompt: int = setting(4, "Responses sampled per prompt; the first that uses every keyword is kept.")
    temperature: float = setting(0.8, "Sampling temperature (0 = greedy).")
    top_p: float = setting(1.0, "Nucleus sampling mass.")
    max_tokens: int = setting(60, "Maximum new tokens per response.")
    backend: Backend = setting(
        "auto",
        "Generation backend; auto: vllm where its installed build runs on the device, else hf; transformer_lm: our "
        "own model.",
    )
    device: str | None = setting(None, "Device for generation, e.g. cuda:0 or cpu (default: cuda:0 if present).")


def run(config: KeywordDatasetConfig) -> dict:
    """Check every flag, then load the model, sample, filter, split and write."""
    try:
        words = load_keywords(config.keywords_file or UW_KEYWORDS)
    except (OSError, ValueError) as err:
        raise cli.bad_flag("--keywords-file", str(err)) from None
    bad_counts = [k for k in config.keyword_counts if not 1 <= k <= len(words)]
    if bad_counts or not config.keyword_counts:
        message = f"each must be in [1, {len(words)}] (words in --keywords-file); got {config.keyword_counts}"
        raise cli.bad_flag("--keyword-counts", message)
    for flag, value in (
        ("--prompts-per-count", config.prompts_per_count),
        ("--samples-per-prompt", config.samples_per_prompt),
    ):
        if value < 1:
            raise cli.bad_flag(flag, f"must be >= 1, got {value}")
    try:
        sampling = SamplingConfig(
            temperature=config.temperature, top_p=config.top_p, max_tokens=config.max_tokens, stop=(), seed=config.seed
        )
        backend = resolve_backend(config.backend)  # type: ignore[arg-type]
    except ValueError as err:
        raise typer.BadParameter(str(err)) from None
    existing = existing_dataset_files(config.output_dir)
    if existing and not config.overwrite:  # checked before the model loads; write_keyword_dataset checks again
        message = f"{config.output_dir} already holds {', '.join(existing)}; pass --overwrite to replace them"
        raise cli.bad_flag("--output-dir", message)
    template = chat_template(load_tokenizer(config.model))
    device = {"device": config.device} if config.device else {}
    engine = make_rollout_engine(config.model, backend, **device, seed=config.seed)
    train, validation = build_keyword_dataset(
        engine,
        template,
        words,
        config.keyword_counts,
        config.prompts_per_count,
        config.samples_per_prompt,
        sampling,
        config.seed,
    )
    write_keyword_dataset(config.output_dir, train, validation, config.overwrite)
    settings = {k: v for k, v in to_json(config).items() if k not in ("overwrite", "output_dir")}
    atomic_write_json(config.output_dir / "build_settings.json", settings | {"backend": backend, "template": template})
    prompts = len(
        dataset_prompts(words, config.keyword_counts, config.prompts_per_count, config.seed)
    )  # cheap, same draws
    kept = len(train) + len(validation)
    summary = {
        "prompts": prompts,
        "kept": kept,
        "train": len(train),
        "validation": len(validation),
        "output_dir": str(config.output_dir),
    }
    typer.echo(json.dumps(summary, indent=2))
    return summary


app = cli.config_command(
    KeywordDatasetConfig, run, "Sample answers to keyword prompts, keep the rewarded ones, split them 80/20."
)

if __name__ == "__main__":
    app()
