"""``python -m scaleacross_opt …``: the ``scaleacross-opt`` command, for environments without its script."""

from .cli import main

main(prog_name="scaleacross-opt")
