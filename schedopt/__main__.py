"""``python -m schedopt``."""

from .cli import main

main()
