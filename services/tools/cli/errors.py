"""One line and exit code 2 for bad input; never a traceback (set POOLWISE_DEBUG=1 to see one)."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import typer

from services.tools.cli.args import InputError, ServiceError

T = TypeVar("T")


def one_line(message: object) -> str:
    """A message as one line (a database's error may span several)."""
    return " ".join(str(message).split())


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {one_line(message)}", err=True)
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


def leaves(exc: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups, in order; the exception itself otherwise."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in leaves(inner)]
    return [exc]


def _usage_error(exc: BaseException) -> bool:
    """A command-line parsing error of typer/click (bad option value, unknown option, missing argument)."""
    return hasattr(exc, "format_message") and isinstance(getattr(exc, "exit_code", None), int)


def guarded(main: Callable[..., object]) -> None:
    """Run the CLI; an unexpected exception prints one line (exit 1) unless POOLWISE_DEBUG is set.
    A typer app runs in non-standalone mode, so that its usage errors (an option value that does
    not parse, an unknown option) are one line too, not a usage panel. Errors raised inside task
    groups (`poolwise up`) arrive in exception groups: the first bad-input error inside is reported
    as if raised alone."""
    try:
        code = main(standalone_mode=False) if isinstance(main, typer.Typer) else main()
    except (InputError, ServiceError, ConnectionError) as exc:  # ConnectionError: NATS out of reach
        typer.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(2)
    except Exception as exc:  # the last line of defence: a person never sees a traceback
        if _usage_error(exc):
            if type(exc).__name__ == "NoArgsIsHelpError":  # a bare group: its help, as typer shows it
                exc.show()  # type: ignore[attr-defined]
            else:
                message = one_line(exc.format_message())  # type: ignore[attr-defined]
                typer.echo(f"error: {message}", err=True)
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        if os.environ.get("POOLWISE_DEBUG"):
            traceback.print_exc()
        found = leaves(exc)
        bad_input = [e for e in found if isinstance(e, InputError | ServiceError | ConnectionError)]
        if bad_input:
            typer.echo(f"error: {one_line(bad_input[0])}", err=True)
            sys.exit(2)
        first = found[0]
        typer.echo(f"internal error: {first.__class__.__name__}: {one_line(first)}", err=True)
        sys.exit(1)
    if isinstance(code, int) and code:
        sys.exit(code)
