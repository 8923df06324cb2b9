"""`InputError`: bad input from a person (an option, a file, a value), raised anywhere below the
CLI (the launcher, the replicas setting, ...): the CLI prints it as one line and exits 2, never
a traceback. Here so that no module below the CLI imports the CLI."""

from __future__ import annotations


class InputError(Exception):
    """Bad input from a person: printed as one line, exit code 2, never a traceback."""
