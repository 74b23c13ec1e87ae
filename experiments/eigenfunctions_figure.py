"""NeuralEF's top eigenfunctions against Nyström's (Deng et al., 2022, Fig. 2 and §4.1).

    python -m experiments.eigenfunctions_figure [--out docs/figures] [--steps 2000]

Two kernels on 1-D inputs, as in §4.1: the polynomial kernel κ(x, x') = (x x' + 1.5)^4 with
x ~ U[−1, 1] and the RBF kernel κ(x, x') = exp(−|x − x'|²/2) with x ~ U[−2, 2]. For N = 64 and
N = 2048 training points, NeuralEF (k = 10 MLPs of width 32, sin/cos units, Adam 1e-3, batch
min(N, 256), cosine annealing, 2000 steps) and Nyström on the same points (NeuralEF eq. 8) are
evaluated on a grid; the top 3 eigenfunctions are overlaid (signs aligned to Nyström's). Writes
``neuralef_vs_nystrom.png`` and prints the eigenvalues and the RMS differences of the curves.

The kernels come from :mod:`experiments.harness.setups`, shared with ``benchmarks/neuralef_vs_nystrom.py``.
"""

from __future__ import annotations

from pathlib import Path
import time
import warnings

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from activated_dgp.eigen import NeuralEF, Nystrom
from experiments.harness.cli import make_parser, shared_option
from experiments.harness.setups import CLASSIC_KERNELS as KERNELS, classic_kernel  # noqa: F401
SIZES = (64, 2048)
SHOWN = 3
DPI = 120


def aligned_rms(psi: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """min over s = ±1 of sqrt(mean_n (ψ_j(x_n) − s ψ_j^ref(x_n))²), per column j: [k]."""
    plus = np.sqrt(np.mean((psi - reference) ** 2, axis=0))
    minus = np.sqrt(np.mean((psi + reference) ** 2, axis=0))
    return np.minimum(plus, minus)


def main(argv=None) -> None:
    parser = make_parser("python -m experiments.eigenfunctions_figure", __doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("docs/figures"), help="output directory")
    parser.add_argument("--steps", type=int, default=2000, help="NeuralEF training steps")
    shared_option(parser, "--seed")
    args = parser.parse_args(argv)


    args.out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(KERNELS), len(SIZES), figsize=(5.2 * len(SIZES), 3.8 * len(KERNELS)), squeeze=False)
    colours = ["tab:blue", "tab:orange", "tab:green"]
    for row, name in enumerate(KERNELS):
        kernel, half_width = classic_kernel(name)
        grid = np.linspace(-half_width, half_width, 400)[:, None]
        rng = np.random.default_rng(args.seed)
        X_all = rng.uniform(-half_width, half_width, (max(SIZES), 1))
        for column, size in enumerate(SIZES):
            X = X_all[:size]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # the polynomial kernel has rank 5 in 1-D
                nystrom = Nystrom(10).fit(X, kernel)
            start = time.perf_counter()
            neuralef = NeuralEF(10, kernel=kernel, input_dim=1, width=32, oversampling=0, seed=args.seed)  # the paper's networks
            neuralef.fit(X, num_steps=args.steps, schedule="cosine")
            seconds = time.perf_counter() - start
            reference, psi = nystrom(grid).numpy(), neuralef(grid).numpy()
            rms = aligned_rms(psi, reference)
            print(
                f"{name:10s} N={size:5d}  NeuralEF {seconds:5.1f} s  eigenvalues NeuralEF "
                f"{np.round(neuralef.eigenvalues.numpy()[:SHOWN], 4)}  Nyström {np.round(nystrom.eigenvalues.numpy()[:SHOWN], 4)}  "
                f"RMS of top-{SHOWN} curves {np.round(rms[:SHOWN], 3)}",
                flush=True,
            )
            ax = axes[row, column]
            for j in range(SHOWN):
                sign = 1.0 if np.sum(psi[:, j] * reference[:, j]) >= 0 else -1.0
                ax.plot(grid[:, 0], reference[:, j], color=colours[j], lw=2.2, alpha=0.6, label=f"Nyström ψ_{j + 1}")
                ax.plot(grid[:, 0], sign * psi[:, j], color=colours[j], lw=1.4, ls="--", label=f"NeuralEF ψ_{j + 1}")
            ax.plot(X[:, 0], np.full(size, ax.get_ylim()[0]), "|", color="grey", ms=6, alpha=0.5)
            formula = "(x x' + 1.5)^4, x ~ U[-1, 1]" if name == "polynomial" else "exp(-|x - x'|^2 / 2), x ~ U[-2, 2]"
            ax.set_title(f"{formula}\nN = {size} points, {args.steps} steps", fontsize=9)
            ax.set_xlabel("x")
            ax.grid(alpha=0.3)
            if row == 0 and column == 0:
                ax.legend(fontsize=7, ncol=2)
    fig.suptitle("Top-3 eigenfunctions: Nyström (solid) vs NeuralEF (dashed, k = 10, MLP width 32)", fontsize=10)
    fig.tight_layout()
    path = args.out / "neuralef_vs_nystrom.png"
    fig.savefig(path, dpi=DPI)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
