"""``python -m experiments.rotated_mnist …``: the rotated-MNIST study's command line (the same as
``python -m experiments rotated_mnist …``)."""

from experiments.rotated_mnist import main

main()
