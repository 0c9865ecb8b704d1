"""Memory-plan figures for the documentation, computed when it is built from alignment/run/memory_plan.py, for a
preset and a machine as `scripts/train_grpo.py --config PRESET --plan-memory GPUSxGIB [FLAGS]` plans them: the
script's own command line reads the preset and the flags, and the plan is the one its --plan-memory prints.

A request is the preset, the machine and any flags, e.g. `configs/grpo_handout_starter.toml 1x80
--gradient-checkpointing` (`--plan-processes N` included), and a figure of its plan:

    peak            every GPU's peak of its usable memory: "78.5 of 79.0" (several GPUs: each named)
    peak N          the N-th GPU's (1-based)
    fits            "yes", or "no: it would with ..." (the plan's remedies)
    share           vLLM's share of its GPU (gpu_memory_utilization), "(planned)" when the plan sized it; "-" without
    generating      one GPU shared with vLLM: the phase while vLLM generates, GiB
    training        the same GPU while the policy trains and vLLM sleeps, GiB
    part NAME       one part of the plan in GiB (weights, master weights, gradients, optimizer, activations, ...)
    parameters      the policy's parameter count

`constant(NAME)` gives one of the planner's own assumptions (CUDA_CONTEXT_BYTES: "1 GiB", OWN_GPU_SHARE: "0.85").
Nothing here imports Sphinx (docs/_ext/site_directives.py renders the figures).
"""

import functools
import re
from dataclasses import dataclass
from pathlib import Path

from alignment.run import memory_plan
from alignment.run.memory_plan import GiB, Machine, MemoryPlan, ModelShape, Workload

ROOT = Path(__file__).resolve().parents[2]
MACHINE = re.compile(r"\d+x\d+(\.\d+)?")
PHASES = re.compile(r"generating: (?P<generating>[\d.]+) GiB .*; training: (?P<training>[\d.]+) GiB")


@dataclass(frozen=True)
class Planned:
    command: str  # the command line that prints this plan
    result: MemoryPlan
    work: Workload
    shape: ModelShape
    machine: Machine
    text: str  # what the command prints


def split_request(words: list[str]) -> tuple[str, str, list[str]]:
    """(preset, machine, flags) of `PRESET GPUSxGIB [FLAGS]`, the machine anywhere after the preset."""
    preset, rest = words[0], words[1:]
    machines = [w for w in rest if MACHINE.fullmatch(w)]
    if len(machines) != 1:
        raise ValueError(f"{' '.join(words)!r}: give a preset, then one machine GPUSxGIB (e.g. 1x80), then flags")
    return preset, machines[0], [w for w in rest if w != machines[0]]


@functools.cache
def planned(request: str) -> Planned:
    """The plan `scripts/train_grpo.py --config PRESET --plan-memory MACHINE FLAGS` prints."""
    from typer.main import get_command

    from alignment.config.cli import run_settings
    from alignment.grpo.config import GRPOConfig, validate
    from alignment.run.memory_plan import grpo_workload, model_shape, report
    from alignment.run.setup import check_sharded
    from scripts.train_grpo import app

    preset, machine_text, flags = split_request(request.split())
    if not (ROOT / preset).is_file():
        raise ValueError(f"{request!r}: no such preset {preset}")
    args = ["--config", str(ROOT / preset), "--plan-memory", machine_text, *flags]
    ctx = get_command(app).make_context("train_grpo.py", list(args))
    params = dict(ctx.params)
    config_file, processes = params.pop("config"), params.pop("plan_processes")
    for name in ("resume", "plan_memory", "verbose"):
        params.pop(name)
    config = GRPOConfig(**run_settings(ctx, GRPOConfig, config_file, None, params))
    validate(config)
    if processes > 1:
        check_sharded(config)
    machine, shape = Machine.parse(machine_text), model_shape(config.model)
    work = grpo_workload(config, shape, processes=processes)
    result, text = report(shape, work, machine)
    command = " ".join(["uv run scripts/train_grpo.py --config", preset, "--plan-memory", machine_text, *flags])
    return Planned(command, result, work, shape, machine, text)


def gib(size: float) -> str:
    return f"{size / GiB:.1f}"


def figure(request: str, field: str, unit: bool = True) -> str:
    """One figure of the plan of `request` (see the module docstring); `unit` appends GiB where it applies."""
    plan = planned(request)
    devices = plan.result.devices
    suffix = " GiB" if unit else ""
    field = field.strip()
    if field == "peak":
        if len(devices) == 1:
            return f"{gib(devices[0].peak)} of {gib(devices[0].capacity)}{suffix}"
        return ", ".join(f"{d.name} {gib(d.peak)} of {gib(d.capacity)}{suffix}" for d in devices)
    if re.fullmatch(r"peak \d+", field):
        index = int(field.split()[1]) - 1
        if not 0 <= index < len(devices):
            raise ValueError(f"{request!r}: the plan has {len(devices)} GPU(s), no {field!r}")
        return f"{gib(devices[index].peak)} of {gib(devices[index].capacity)}{suffix}"
    if field == "fits":
        return "yes" if plan.result.fits else "no: " + plan.text.splitlines()[-1].removeprefix("does not fit; ")
    if field == "share":
        share = plan.result.vllm_share
        if share is None:
            return "-"
        planned_note = any(note.startswith("vLLM's share planned") for note in plan.result.notes)
        return f"{share:.2f}" + (" (planned)" if planned_note else "")
    if field in ("generating", "training"):
        phases = next((m for note in plan.result.notes if (m := PHASES.search(note))), None)
        if phases is None:
            raise ValueError(f"{request!r}: {field} is a phase of one GPU shared with vLLM; this plan has none")
        return phases.group(field) + suffix
    if field.startswith("part "):
        name = field.removeprefix("part ").strip()
        sizes = [d.parts[name] for d in devices if name in d.parts]
        if not sizes:
            known = sorted({n for d in devices for n in d.parts})
            raise ValueError(f"{request!r}: no part {name!r} in the plan (it has {', '.join(known)})")
        return f"{sizes[0] / GiB:.2f}{suffix}"
    if field == "parameters":
        return f"{plan.shape.parameters():,}"
    raise ValueError(f"{field!r} is not a plan figure: peak, peak N, fits, share, generating, training, part NAME")


def constant(name: str) -> str:
    """A module constant of alignment/run/memory_plan.py: bytes in GiB, other numbers as they are."""
    value = getattr(memory_plan, name.strip(), None)
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise ValueError(f"{name!r} is not a number of alignment/run/memory_plan.py")
    return f"{value / GiB:g} GiB" if name.strip().endswith("_BYTES") else f"{value:g}"
