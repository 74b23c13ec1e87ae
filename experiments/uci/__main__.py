"""``python -m experiments.uci …``: the UCI study's command line (the same as ``python -m experiments uci …``)."""

from experiments.uci import main

main()
