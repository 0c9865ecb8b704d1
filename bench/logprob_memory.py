"""Memory that one forward and backward of get_response_log_probs (with entropy) adds on the CPU, before and now.

    uv run python bench/logprob_memory.py            # 2 x 1,536 tokens, a 151,936-word vocabulary
    uv run python bench/logprob_memory.py --json     # one JSON line per figure on stdout

The model is a 2-layer Qwen2 of hidden size 64 with random weights and Qwen2.5-Math's vocabulary (151,936 words,
tied embeddings), float32, so that the vocabulary-wide tensors are nearly all there is: one float32 copy of the
(2 x 1,536, 151,936) logits is 1.74 GiB. Two calls, each scored two ways:

- `all`: every position scored, no response mask (the handouts' call: tests/adapters.py);
- `response`: the learner's call, with a response mask on the last --response-tokens positions of each row.

`before` is the path the library took until now, rebuilt from its own functions: the model's whole logits, then
log_probs_of_labels with compute_entropy under no_grad (`all`), or the head on the response positions and
label_log_probs_and_entropy (`response`). `now` is get_response_log_probs: the head fused with the log-softmax in
chunks (alignment/models/chunked_head.py) and the rows packed (alignment/models/packed_rows.py). Each of the four runs
in a fresh interpreter that builds the model and the batch, reads its resident set (VmRSS), runs one forward and
backward (the sum of the response log-probs), and reports its peak resident set (ru_maxrss) less that: the
memory the call added at its peak, weight gradients included. Peak RSS, not a tensor tracker: it counts what the
allocator really took from the system.
"""

import argparse
import json
import platform
import resource
import subprocess
import sys

GiB = 2**30


def resident_bytes() -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def child(path: str, call: str, args: argparse.Namespace) -> None:
    """One forward and backward in this process; prints the peak growth in bytes."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from alignment.grpo.synthetic import TINY
    from alignment.logprobs import (
        compute_entropy,
        get_response_log_probs,
        label_log_probs_and_entropy,
        log_probs_of_labels,
    )

    torch.manual_seed(0)
    config = Qwen2Config(**(TINY | dict(vocab_size=args.vocab)))
    model = Qwen2ForCausalLM(config).train()
    ids = torch.randint(0, args.vocab, (args.rows, args.tokens))
    labels = torch.roll(ids, -1, dims=1)
    mask = torch.zeros_like(ids, dtype=torch.bool)
    mask[:, args.tokens - 1 - args.response_tokens : args.tokens - 1] = True
    before = resident_bytes()
    if path == "now":
        out = get_response_log_probs(model, ids, labels, True, response_mask=mask if call == "response" else None)
        log_probs = out["log_probs"]
    elif call == "all":
        logits = model(input_ids=ids).logits
        log_probs = log_probs_of_labels(logits, labels)
        with torch.no_grad():
            compute_entropy(logits.float())
    else:
        hidden = model.base_model(input_ids=ids).last_hidden_state
        log_probs = torch.zeros(ids.shape).masked_scatter(
            mask, label_log_probs_and_entropy(model.lm_head(hidden[mask]), labels[mask])[0]
        )
    log_probs[mask].sum().backward()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(peak - before)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=1536, help="tokens a row")
    parser.add_argument("--response-tokens", type=int, default=1024, help="scored tokens a row in the `response` call")
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--json", action="store_true", help="stdout: only JSON lines, one per figure")
    parser.add_argument("--child", nargs=2, metavar=("PATH", "CALL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(*args.child, args)
        return
    logits_gib = args.rows * args.tokens * args.vocab * 4 / GiB
    context = {"rows": args.rows, "tokens": args.tokens, "vocab": args.vocab, "device": "cpu"}
    context |= {"machine": platform.node(), "memory": "peak RSS growth"}
    shared = ["--rows", str(args.rows), "--tokens", str(args.tokens), "--vocab", str(args.vocab)]
    shared += ["--response-tokens", str(args.response_tokens)]
    log = sys.stderr if args.json else sys.stdout
    print(f"one float32 copy of the (tokens x vocab) logits: {logits_gib:.2f} GiB", file=log)
    for call in ("all", "response"):
        for path in ("before", "now"):
            run = subprocess.run(
                [sys.executable, __file__, "--child", path, call, *shared], capture_output=True, text=True, check=True
            )
            grown = int(run.stdout.split()[-1]) / GiB
            figure = {"figure": f"logprob_memory.{call}.{path}", "value": round(grown, 3), "unit": "GiB"}
            figure |= context | {"call": call, "path": path, "logits_copies": round(grown / logits_gib, 2)}
            if args.json:
                print(json.dumps(figure), flush=True)
            else:
                print(f"{call:>8} {path:>6}: +{grown:.2f} GiB ({grown / logits_gib:.2f} logits copies)", flush=True)


if __name__ == "__main__":
    main()
