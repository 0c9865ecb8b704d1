"""notebooks/plot_runs.ipynb executed by a real Jupyter kernel on fixture runs (metrics.jsonl files, a wandb panel
export, a best_of_n summary.json), started once from the repository's root and once from notebooks/ as Jupyter
starts it: the same paths, relative to the root, give the same tables and figures."""

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.test_plot import write_run

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "plot_runs.ipynb"


def executed(parameters: str, kernel_dir: Path) -> list:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    [cell] = [cell for cell in notebook.cells if "parameters" in cell.metadata.get("tags", [])]
    cell.source = parameters
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(kernel_dir)}}
    ).execute()
    return [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]


@pytest.mark.slow  # 5-14 s of a kernel executing the notebook twice; its front end is checked by default below
def test_notebook_draws_the_same_figures_from_the_root_and_from_notebooks(tmp_path):
    write_run(tmp_path / "runs" / "clip", [0.125, 0.25, 0.5])
    write_run(tmp_path / "runs" / "no_clip", [0.125, 0.25, 0.375])
    (tmp_path / "wandb.csv").write_text(
        "Step,wandb_run - eval_reward,wandb_run - eval_reward__MIN\n0,0.2,0.2\n4,0.7,0.6\n"
    )
    (tmp_path / "best_of_n").mkdir()
    summary = {"num_problems": 8, "n_max": 4, "pass_at": {"1": 0.25, "2": 0.375, "4": 0.5}, "best_at": {"1": 0.25}}
    (tmp_path / "best_of_n" / "summary.json").write_text(json.dumps(summary))
    here = os.path.relpath(tmp_path, ROOT)  # as a user writes them: from the repository's root
    parameters = (
        f"METRICS = [{json.dumps(f'{here}/runs/*/metrics.jsonl')}]\n"
        f"WANDB_CSVS = [{json.dumps(f'{here}/wandb.csv')}]\n"
        f"BEST_OF_N = [{json.dumps(f'{here}/best_*/summary.json')}]\n"
        f"FIGURES = {json.dumps(f'{here}/figures')}\n"
    )

    from_root = executed(parameters, ROOT)
    assert not [o for o in from_root if o.output_type == "error"]
    text = "".join(o.get("text", "") + o.get("data", {}).get("text/markdown", "") for o in from_root)
    assert "3 runs from 3 files: clip, no_clip, wandb_run" in text  # the panel export's run name is the label
    assert "| clip | 2 | 0.500 | 0.500 | 21 |" in text and "| no_clip | 2 | 0.375 | 0.375 | 21 |" in text
    assert "| wandb_run | 4 | 0.700 | 0.700 | nan |" in text
    assert "1 best-of-N evaluations: best_of_n" in text
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
        "time_breakdown.png",
        "kl_and_validation.png",
        "pass_at_n.png",
    } <= figures
    images = [o.data["image/png"] for o in from_root if "image/png" in o.get("data", {})]
    assert len(images) == len(figures)  # every figure drawn is shown inline

    from_notebooks = executed(parameters, ROOT / "notebooks")  # where Jupyter starts the notebook's kernel
    assert [o.get("text") for o in from_notebooks] == [o.get("text") for o in from_root]
    assert [o.get("data") for o in from_notebooks] == [o.get("data") for o in from_root]  # the same PNGs, bit for bit


@pytest.mark.slow  # starts jupyter, 4-7 s: the environment, not the library
def test_the_dev_environment_has_a_jupyter_front_end():
    """`uv run jupyter lab` opens the notebook: jupyterlab is in the dev dependency group uv installs by default."""
    jupyter = Path(sys.prefix) / "bin" / "jupyter"
    version = subprocess.run([str(jupyter), "lab", "--version"], capture_output=True, text=True, check=True).stdout
    assert tuple(int(part) for part in version.split(".")[:2]) >= (4, 4)
