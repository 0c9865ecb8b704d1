"""notebooks/plot_runs.ipynb executed by a real Jupyter kernel on fixture runs: metrics.jsonl and a wandb export."""

import json
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from tests.test_plot import write_run

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "plot_runs.ipynb"


def test_notebook_draws_the_figures_from_runs_and_a_wandb_export(tmp_path):
    write_run(tmp_path / "runs" / "clip", [0.125, 0.25, 0.5])
    write_run(tmp_path / "runs" / "no_clip", [0.125, 0.25, 0.375])
    (tmp_path / "wandb.csv").write_text(
        "Step,wandb_run - eval_reward,wandb_run - eval_reward__MIN\n0,0.2,0.2\n4,0.7,0.6\n"
    )
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    parameters = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    assert len(parameters) == 1
    parameters[0].source = (
        f"METRICS = [{json.dumps(str(tmp_path / 'runs' / '*' / 'metrics.jsonl'))}]\n"
        f"WANDB_CSVS = [{json.dumps(str(tmp_path / 'wandb.csv'))}]\n"
        f"FIGURES = {json.dumps(str(tmp_path / 'figures'))}\n"
    )
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()

    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/markdown", "") for o in outputs)
    assert "3 runs from 3 files: clip, no_clip, wandb_run" in text
    assert "| clip | 2 | 0.500 | 0.500 | 21 |" in text and "| no_clip | 2 | 0.375 | 0.375 | 21 |" in text
    assert "| wandb_run | 4 | 0.700 | 0.700 | nan |" in text
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    figures = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {
        "eval_reward_vs_step.png",
        "eval_reward_vs_time.png",
        "token_entropy.png",
        "grad_norm.png",
        "response_length.png",
        "kl.png",
        "clip_fraction.png",
        "train_reward.png",
    } <= figures
    assert len(images) == len(figures)  # every figure drawn is shown inline
