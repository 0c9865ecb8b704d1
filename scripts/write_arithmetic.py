"""Write a generated arithmetic task's splits as jsonl, to read or to train on as files.

    uv run scripts/write_arithmetic.py 'arithmetic?ops=1-2&max=20&test=64' outputs/arithmetic

Writes OUT/train.jsonl and OUT/test.jsonl (GSM8K-shaped: question, answer = worked solution then `#### N`); the
folder is a dataset every loader reads (`--dataset OUT`), with the same problems as the source name itself.
"""

from pathlib import Path

import typer

from alignment.data.arithmetic import write_jsonl

app = typer.Typer(add_completion=False)


@app.command()
def main(
    source: str = typer.Argument(..., help="An arithmetic source: arithmetic or arithmetic?ops=1-3&max=50&seed=1&..."),
    out: Path = typer.Argument(..., help="Folder for train.jsonl and test.jsonl."),
) -> None:
    try:
        paths = write_jsonl(source, out)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="SOURCE") from None
    for path in paths:
        typer.echo(f"{path}: {sum(1 for _ in path.open())} problems")


if __name__ == "__main__":
    app()
