"""``python -m schedopt``."""

from schedopt.cli.app import main

main()
