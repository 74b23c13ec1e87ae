"""``python -m experiments.ika_patches …``: the IKA-patches study's command line (the same as ``python -m experiments
ika_patches …``)."""

from experiments.ika_patches import main

main()
