"""`python -m carb.cli`: the same as the `carb` command."""

from carb.cli import main

main()
