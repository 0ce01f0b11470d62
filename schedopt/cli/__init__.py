"""The ``schedopt`` command line: one thin module per command group.

:mod:`schedopt.cli.app` holds the typer app and registers every command; each command module
(``simulate``, ``optimize``, ``emit``, ``measure``, ``calibrate``, ``instances``, ``sweep``)
parses options and calls into a stage, importing that stage only when the command runs.
"""

from schedopt.cli.app import main as main
from schedopt.cli.app import run as run
