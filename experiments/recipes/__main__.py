"""``python -m experiments.recipes …``: the recipe screen's command line (the same as ``python -m experiments
recipes …``)."""

from experiments.recipes import main

main()
