"""``python -m experiments.sgd_trajectory …``: the SGD-trajectory study's command line (the same as
``python -m experiments sgd_trajectory …``)."""

from experiments.sgd_trajectory import main

main()
