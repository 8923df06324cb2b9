"""Options shared by many commands."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_DATA_DIR = Path(os.environ.get("POOLWISE_DATA_DIR", ".poolwise"))

DataDir = Annotated[
    Path,
    typer.Option("--data-dir", help="Where poolwise keeps its state and finds a running system.",
                 envvar="POOLWISE_DATA_DIR"),
]
TreeName = Annotated[str, typer.Option("--tree", help="Pool tree.")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
