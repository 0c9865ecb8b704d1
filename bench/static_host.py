"""The host's share of the static decode path (alignment/rollout/static_decoding.py): what it does with each window.

At every sync the host appends the window's tokens and log-probs to the rows still running and ends rows as the eager
loop would, step by step: at their first EOS, at a stop string (the tokenizer decodes each row's tail at every step)
or at max_tokens. It does so while the GPU runs the next window, so that work stays hidden as long as it takes less
than a window's decode. Here the same host code runs on windows of real text (this repository's concept pages,
tokenized) with no EOS, so that every row is checked at every step until the text holds the stop string.

    uv run python bench/static_host.py --json                 # 256 rows x 16 steps, stop string </answer>
    uv run python bench/static_host.py --tiny --json          # 16 rows
"""

import time
from pathlib import Path

import torch
import typer

from alignment.models.loading import SMOLLM2, load_tokenizer
from alignment.rollout.decode_choice import SYNC_EVERY
from alignment.rollout.decoding import stop_tail
from alignment.rollout.interface import SamplingConfig
from alignment.rollout.static_decoding import StaticDecoder, Window
from bench.decode_bound import Figures

ROOT = Path(__file__).resolve().parents[1]


def main(
    rows: int = typer.Option(256, help="Rows in the batch."),
    sync_every: int = typer.Option(SYNC_EVERY, help="Steps a window holds."),
    windows: int = typer.Option(16, help="Windows timed (the rows' tails grow from one to the next)."),
    stop: str = typer.Option("</answer>", help="The stop string checked at every step."),
    tokenizer_name: str = typer.Option(SMOLLM2, "--tokenizer", help="Tokenizer (a name the loader knows, or a path)."),
    tiny: bool = typer.Option(False, help="16 rows, 4 windows."),
    json_lines: bool = typer.Option(False, "--json", help="Print only JSON lines on stdout, one per figure."),
) -> None:
    if tiny:
        rows, windows = 16, 4
    tokenizer = load_tokenizer(tokenizer_name)
    text = "\n".join(p.read_text() for p in sorted((ROOT / "docs" / "concepts").glob("*.md")))
    ids = tokenizer(text)["input_ids"]
    steps = windows * sync_every
    if len(ids) < steps + rows:
        raise ValueError(f"the docs hold {len(ids)} tokens, fewer than --windows x --sync-every + --rows")
    starts = torch.randint(0, len(ids) - steps, (rows,), generator=torch.Generator().manual_seed(0)).tolist()
    sampling = SamplingConfig(max_tokens=steps + 1, stop=(stop,))
    tokens: list[list[int]] = [[] for _ in range(rows)]
    logprobs: list[list[float]] = [[] for _ in range(rows)]
    running = set(range(rows))
    seconds = []
    for window in range(windows):
        start, end = window * sync_every, (window + 1) * sync_every
        drawn = torch.tensor([ids[a + start : a + end] for a in starts])
        never = torch.full((rows,), steps + 1)  # no EOS: every row runs through every step
        read = Window(start, end, drawn, torch.zeros(rows, sync_every), never, None)
        began = time.perf_counter()
        StaticDecoder.end_rows(read, tokens, logprobs, running, tokenizer, sampling, stop_tail(sampling.stop))
        seconds.append(time.perf_counter() - began)
    figures = Figures("static_host", json_lines, rows=rows, sync_every=sync_every, stop=stop)
    figures.emit("window_ms", 1e3 * sorted(seconds)[len(seconds) // 2], "ms", statistic="median", windows=windows)
    figures.emit("rows_ended", rows - len(running), "rows")


if __name__ == "__main__":
    typer.run(main)
