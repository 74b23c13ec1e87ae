"""``python -m experiments.lla_rotated_mnist …``: the rotated-MNIST LLA study's command line (the same as
``python -m experiments lla_rotated_mnist …``)."""

from experiments.lla_rotated_mnist import main

main()
