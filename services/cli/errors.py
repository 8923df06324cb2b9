"""One line and exit code 2 for bad input; never a traceback (set POOLWISE_DEBUG=1 to see one)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import typer

from services.cli.args import InputError
from services.cli.client import ServiceError

T = TypeVar("T")


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def run_async(fn: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine function for a command, turning refusals into one-line errors."""
    try:
        return anyio.run(fn)
    except InputError as exc:
        raise fail(str(exc)) from None
    except ServiceError as exc:
        raise fail(f"{exc} [{exc.rule}]") from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None


def guarded(main: Callable[[], None]) -> None:
    """Run the CLI; an unexpected exception prints one line (exit 1) unless POOLWISE_DEBUG is set."""
    try:
        main()
    except (InputError, ServiceError) as exc:
        typer.echo(f"error: {exc}", err=True)
        sys.exit(2)
    except Exception as exc:  # the last line of defence: a person never sees a traceback
        if os.environ.get("POOLWISE_DEBUG"):
            traceback.print_exc()
        typer.echo(f"internal error: {exc.__class__.__name__}: {exc}", err=True)
        sys.exit(1)
