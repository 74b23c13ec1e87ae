"""Regenerate the spectral figures of Dutordoir et al. (2021), section 4.3 and appendix C.

    python -m experiments.figures [--out docs/figures]

Writes three PNGs:

* ``fig3_truncated_activations.png`` (Fig. 3): ReLU and Softplus against their truncated zonal
  series σ̃(t) = Σ_(n<Ñ) σ_n N_n^d Ĉ_n(t) for a few Ñ and d.
* ``fig4_rkhs_norm.png`` (Fig. 4, bottom): ‖g̃‖_H of a unit-norm truncated inducing function under
  the ZonalArcCosine kernel, computed through ``gpflow.covariances.Kuu``, against Ñ.
* ``figC2_spectra.png`` (Fig. C.2): |λ_n| of the arc-cosine and zonal Matérn-5/2 kernels and |σ_n|
  of the ReLU and Softplus activations per level n, with zero levels marked.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DPI = 120
DIMENSIONS = (3, 9)
ACTIVATION_LABELS = {"relu": "ReLU  max(0, t)", "softplus": "Softplus  log(1 + exp(3t))"}

# Fig. C.2: levels whose coefficient (computed with threshold 0) is below this fraction of the
# series' largest coefficient are treated as zero. The closed forms (ReLU, arc-cosine) give exact
# zeros; the quadrature (Softplus, Matérn) leaves round-off of at most ~4e-16 relative.
ZERO_RELATIVE = 1e-12
SPECTRUM_LEVELS = 20  # n = 0..19



def _save(fig, path: Path, title: str, fontsize: int) -> Path:
    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path

def _activation_values(name: str, t: np.ndarray) -> np.ndarray:
    from activated_dgp.spectra import resolve_activation

    return resolve_activation(name).function(t)


def truncated_activation(name: str, dimension: int, truncation_level: int, t: np.ndarray) -> np.ndarray:
    """σ̃(t) = Σ_(n<Ñ) σ_n N_n^d Ĉ_n(t) with the library's coefficients (default threshold)."""
    from activated_dgp.zonal import activation_coefficients, num_harmonics
    from activated_dgp.spherical import gegenbauer_alpha, normalised_gegenbauer_polynomials

    sigma = activation_coefficients(name, dimension=dimension, truncation_level=truncation_level)
    weights = sigma * num_harmonics(np.arange(truncation_level), dimension)
    return normalised_gegenbauer_polynomials(t, truncation_level, gegenbauer_alpha(dimension)) @ weights


def figure3(out: Path, truncation_levels=(3, 5, 10, 20)) -> Path:
    t = np.linspace(-1.0, 1.0, 801)
    colours = plt.cm.viridis(np.linspace(0.0, 0.85, len(truncation_levels)))
    fig, axes = plt.subplots(2, len(DIMENSIONS), figsize=(11, 8), sharex=True)
    for row, name in enumerate(ACTIVATION_LABELS):
        exact = _activation_values(name, t)
        for col, d in enumerate(DIMENSIONS):
            ax = axes[row, col]
            ax.plot(t, exact, color="black", lw=3.0, alpha=0.35, label=f"{name} (exact)")
            for colour, level in zip(colours, truncation_levels):
                approx = truncated_activation(name, d, level, t)
                ax.plot(t, approx, color=colour, lw=1.6, label=f"Ñ = {level}")
            ax.set_title(f"{ACTIVATION_LABELS[name]},  d = {d}", fontsize=12)
            ax.grid(alpha=0.3)
            if row == len(ACTIVATION_LABELS) - 1:
                ax.set_xlabel("t = cos θ", fontsize=11)
            if col == 0:
                ax.set_ylabel("σ(t) and σ̃(t)", fontsize=11)
            ax.legend(fontsize=9, loc="upper left")
    return _save(
        fig,
        out / "fig3_truncated_activations.png",
        "Fig. 3: activations and their truncated zonal series  σ̃(t) = Σ$_{n<Ñ}$ σ$_n$ N$_n^d$ Ĉ$_n$(t)",
        fontsize=13,
    )


def rkhs_norm(name: str, dimension: int, truncation_level: int, threshold: float) -> float:
    """‖g̃‖_H for a unit direction w (kernel variance 1): sqrt(Kuu[0, 0]) through gpflow.covariances.Kuu."""
    import gpflow
    import tensorflow as tf

    from activated_dgp import ActivationFeature, ZonalArcCosine

    tf.get_logger().setLevel("ERROR")  # one Kuu per (Ñ, threshold) retraces the Clenshaw tf.function

    W = np.zeros((1, dimension))
    W[0, -1] = 1.0
    feature = ActivationFeature(W, activation=name, truncation_level=truncation_level, threshold=threshold)
    kernel = ZonalArcCosine(input_dim=dimension - 1, truncation_level=truncation_level, threshold=threshold)
    Kmm = gpflow.covariances.Kuu(feature, kernel).numpy()
    return float(np.sqrt(Kmm[0, 0]))


def figure4(out: Path, truncation_levels=tuple(range(2, 41))) -> Path:
    levels = np.asarray(truncation_levels)
    colours = {"relu": "tab:orange", "softplus": "tab:blue"}
    fig, axes = plt.subplots(1, len(DIMENSIONS), figsize=(11, 4.6), sharey=False)
    for ax, d in zip(axes, DIMENSIONS):
        for name in ACTIVATION_LABELS:
            norms = [rkhs_norm(name, d, int(n), threshold=1e-9) for n in levels]
            ax.plot(levels, norms, "o-", ms=3, lw=1.8, color=colours[name], label=name)
        ax.set_yscale("log")
        ax.set_xlabel("truncation level Ñ", fontsize=11)
        ax.set_ylabel("‖g̃‖$_\\mathcal{H}$", fontsize=11)
        ax.set_title(f"d = {d}", fontsize=12)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=9, loc="upper left")
    return _save(
        fig,
        out / "fig4_rkhs_norm.png",
        "Fig. 4 (bottom): RKHS norm of a unit-norm truncated inducing function under ZonalArcCosine\n"
        "(library defaults: levels with |coefficient|·N$_n^d$ < 1e-9 dropped)",
        fontsize=12,
    )


def spectra(dimension: int, truncation_level: int = SPECTRUM_LEVELS) -> dict[str, np.ndarray]:
    """|λ_n| (arc-cosine, Matérn-5/2) and |σ_n| (ReLU, Softplus), all with threshold 0."""
    from activated_dgp import ZonalArcCosine
    from activated_dgp.zonal import ZonalKernel, activation_coefficients, zonal_matern52_shape

    kwargs = dict(input_dim=dimension - 1, truncation_level=truncation_level, threshold=0.0)
    return {
        "Arc Cosine λ$_n$": ZonalArcCosine(**kwargs).eigenvalues,
        "Matérn-5/2 λ$_n$": ZonalKernel(zonal_matern52_shape, **kwargs).eigenvalues,
        "ReLU σ$_n$": activation_coefficients("relu", dimension, truncation_level, threshold=0.0),
        "Softplus σ$_n$": activation_coefficients("softplus", dimension, truncation_level, threshold=0.0),
    }


def figureC2(out: Path) -> Path:
    styles = [
        ("#08306b", "o", -0.24),  # arc cosine: dark blue
        ("#6baed6", "s", -0.08),  # Matérn: light blue
        ("#a63603", "^", 0.08),  # ReLU: dark orange
        ("#fdae6b", "D", 0.24),  # Softplus: light orange
    ]
    fig, axes = plt.subplots(1, len(DIMENSIONS), figsize=(12, 5))
    for ax, d in zip(axes, DIMENSIONS):
        series = spectra(d)
        magnitudes = {label: np.abs(values) for label, values in series.items()}
        nonzero_min = min(m[m > ZERO_RELATIVE * m.max()].min() for m in magnitudes.values())
        bottom = 10 ** (np.floor(np.log10(nonzero_min)) - 2)
        zero_row = 10 ** (np.log10(bottom) + 0.6)
        for (label, mag), (colour, marker, shift) in zip(magnitudes.items(), styles):
            n = np.arange(mag.size)
            zero = mag <= ZERO_RELATIVE * mag.max()
            ax.plot(n[~zero] + shift, mag[~zero], marker, ls="none", ms=6, color=colour, mec="black", mew=0.5,
                    label=label)
            ax.plot(n[zero] + shift, np.full(zero.sum(), zero_row), "x", ms=7, mew=2, color=colour)
        ax.axhline(zero_row * 3, color="grey", lw=0.8, ls=":")
        ax.plot([], [], "x", ms=7, mew=2, color="grey", label="zero level (below dotted line)")
        ax.set_yscale("log")
        ax.set_ylim(bottom, 3.0)
        ax.set_xticks(np.arange(0, SPECTRUM_LEVELS, 2))
        ax.set_xlabel("level n", fontsize=11)
        ax.set_ylabel("|coefficient|", fontsize=11)
        ax.set_title(f"d = {d}", fontsize=12)
        ax.grid(alpha=0.3, which="major")
        ax.legend(fontsize=9, loc="lower left", bbox_to_anchor=(0.0, 0.1))
    return _save(
        fig,
        out / "figC2_spectra.png",
        "Fig. C.2: spectra of the kernels (blue) and activations (orange); computed with threshold 0,\n"
        f"levels below {ZERO_RELATIVE:g}× the largest coefficient (closed-form zeros, quadrature round-off) shown as ×",
        fontsize=12,
    )


def main(argv=None) -> None:
    from experiments.harness.cli import make_parser

    parser = make_parser("python -m experiments.figures", __doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(__file__).resolve().parents[1] / "docs" / "figures",
        help="output folder (default: docs/figures of the repository)",
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for title, make in (
        ("Fig. 3 (truncated activations)", figure3),
        ("Fig. 4 (RKHS norm vs truncation level)", figure4),
        ("Fig. C.2 (spectra)", figureC2),
    ):
        start = time.perf_counter()
        print(f"{title} ...", flush=True)
        path = make(args.out)
        print(f"  wrote {path} ({time.perf_counter() - start:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
