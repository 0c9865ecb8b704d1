"""One draw of every row's next token, as a decode step makes it: the Triton kernel a GPU takes
(alignment/kernels/sampling.py) beside torch's kernels (decoding.choose_tokens_in_torch: the float32
log-softmax, its exp, the block sums that pick each row's token), at temperature 1 with no nucleus, with the bytes
of memory traffic a logit each comes to at the measured copy bandwidth.

    uv run python bench/sampling.py --json               # 256 rows x 151,936 words, bfloat16 on a GPU
    uv run python bench/sampling.py --tiny --json        # 16 rows x 4,096 words on the CPU: torch's kernels alone
"""

from functools import partial

import torch
import typer

from alignment.rollout.decoding import choose_tokens, choose_tokens_in_torch, sampling_kernel_serves
from alignment.rollout.interface import SamplingConfig
from bench.decode_bound import Figures, device_name, measured_bandwidth, timed


def main(
    rows: int = typer.Option(256, help="Rows drawn at once (the decode batch)."),
    vocab: int = typer.Option(151936, help="Vocabulary size."),
    repeats: int = typer.Option(20, help="Timed draws per path; the best is reported."),
    device: str | None = typer.Option(None, help="Device (default: cuda:0 when present, else cpu)."),
    tiny: bool = typer.Option(False, help="16 rows x 4,096 words."),
    json_lines: bool = typer.Option(False, "--json", help="Print only JSON lines on stdout, one per figure."),
) -> None:
    if tiny:
        rows, vocab = 16, 4096
    dev = torch.device(device or ("cuda:0" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32  # the model's logits, as each device decodes
    generator = torch.Generator(device=dev).manual_seed(0)
    logits = (torch.randn(rows, vocab, device=dev, generator=generator) * 3).to(dtype)
    keys = torch.arange(rows, device=dev)
    sampling = SamplingConfig(max_tokens=1)
    figures = Figures("sampling", json_lines, device=device_name(dev), rows=rows, vocab=vocab)
    bandwidth = measured_bandwidth(dev)
    figures.emit("copy_bandwidth", bandwidth / 1e9, "GB/s")
    paths = {"torch": choose_tokens_in_torch}
    if dev.type == "cuda" and sampling_kernel_serves(logits):  # checked against torch's draw at its first use
        paths["triton"] = choose_tokens

    def draw(choose) -> int:
        choose(logits, sampling, keys, 3)
        return rows

    for name, choose in paths.items():
        draw(choose)  # warm-up (Triton compiles its kernel here)
        seconds = min(timed(partial(draw, choose), dev)[0] for _ in range(repeats))
        figures.emit("draw_ms", 1e3 * seconds, "ms", path=name, dtype=str(dtype).removeprefix("torch."))
        figures.emit("bytes_per_logit", seconds * bandwidth / (rows * vocab), "bytes", path=name)


if __name__ == "__main__":
    typer.run(main)
