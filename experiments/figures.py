"""Regenerate the spectral figures of Dutordoir et al. (2021), section 4.3 and appendix C, and the record of the
numbers docs/figures.md states about them.

    python -m experiments figures [--figures docs/figures] [--out docs/results/figures] [--doc docs/figures.md]

One cell per figure; each draws its PNG into ``--figures`` and returns, as its record, the quantities the page
states, computed from the same arrays the figure is drawn from (records in ``<out>/records.jsonl``; a figure with a
record is not redrawn: delete its record to redo it):

* ``fig3`` -> ``fig3_truncated_activations.png`` (Fig. 3): ReLU and Softplus against their truncated zonal
  series σ̃(t) = Σ_(n<Ñ) σ_n N_n^d Ĉ_n(t) for a few Ñ and d; record: the maximum errors on [−1, 1] and inside
  |t| ≤ INTERIOR, and σ̃(±1).
* ``fig4`` -> ``fig4_rkhs_norm.png`` (Fig. 4, bottom): ‖g̃‖_H of a unit-norm truncated inducing function under
  the ZonalArcCosine kernel, computed through ``gpflow.covariances.Kuu``, against Ñ; record: every plotted norm.
* ``figC2`` -> ``figC2_spectra.png`` (Fig. C.2): |λ_n| of the arc-cosine and zonal Matérn-5/2 kernels and |σ_n|
  of the ReLU and Softplus activations per level n, with zero levels marked; record: every plotted coefficient.

The report writes three generated blocks of ``--doc`` (tables made from the records alone).
"""

from __future__ import annotations

from pathlib import Path
import sys
import time

import matplotlib

matplotlib.use("Agg")
import gpflow
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

from activated_dgp import ActivationFeature, ZonalArcCosine
from activated_dgp.zonal import ZonalKernel, activation_coefficients, num_harmonics, zonal_matern52_shape
from activated_dgp.zonal.spectra import resolve_activation
from activated_dgp.zonal.spherical import gegenbauer_alpha, normalised_gegenbauer_polynomials
from experiments.harness import cli
from experiments.harness.blocks import write_block
from experiments.harness.protocol import Protocol, relabel

DPI = 120
DIMENSIONS = (3, 9)
ACTIVATION_LABELS = {"relu": "ReLU  max(0, t)", "softplus": "Softplus  log(1 + exp(3t))"}
TRUNCATION_LEVELS_FIG3 = (3, 5, 10, 20)
TRUNCATION_LEVELS_FIG4 = tuple(range(2, 41))
INTERIOR = 0.9  # Fig. 3's record: the maximum error also on |t| ≤ INTERIOR, away from the poles t = ±1
THRESHOLD = 1e-9  # the library's default: a level whose term |coefficient|·N_n^d is below THRESHOLD × the terms' sum is dropped
LEVELLED_OFF = 0.01  # Fig. 4's table: the Ñ from which the norm stays within this fraction of its value at the last Ñ

# Fig. C.2: levels whose coefficient (computed with threshold 0) is below this fraction of the
# series' largest coefficient are treated as zero. The closed forms (ReLU, arc-cosine) give exact
# zeros; the quadrature (Softplus, Matérn) leaves round-off far below it (the record's zero-level ratios).
ZERO_RELATIVE = 1e-12
SPECTRUM_LEVELS = 20  # n = 0..19
DECAY_LEVEL = 18  # Fig. C.2's table: |coefficient| at this level shows how fast each series decays
SERIES = {"arc_cosine": "Arc Cosine λ$_n$", "matern52": "Matérn-5/2 λ$_n$", "relu": "ReLU σ$_n$",
          "softplus": "Softplus σ$_n$"}
SERIES_NAMES = {"arc_cosine": "arc-cosine λ_n", "matern52": "Matérn-5/2 λ_n", "relu": "ReLU σ_n",
                "softplus": "Softplus σ_n"}


def _number(value: float, digits: int = 2) -> str:
    """``value`` to ``digits`` significant digits, exponents without padding (8.3e-9, not 8.3e-09)."""
    text = f"{value:.{digits}g}"
    if "e" in text:
        mantissa, exponent = text.split("e")
        text = f"{mantissa}e{int(exponent)}"
    return text


def _save(fig, path: Path, title: str, fontsize: int) -> Path:
    fig.suptitle(title, fontsize=fontsize)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path

def _activation_values(name: str, t: np.ndarray) -> np.ndarray:
    return resolve_activation(name).function(t)


def truncated_activation(name: str, dimension: int, truncation_level: int, t: np.ndarray) -> np.ndarray:
    """σ̃(t) = Σ_(n<Ñ) σ_n N_n^d Ĉ_n(t) with the library's coefficients (default threshold)."""
    sigma = activation_coefficients(name, dimension=dimension, truncation_level=truncation_level)
    weights = sigma * num_harmonics(np.arange(truncation_level), dimension)
    return normalised_gegenbauer_polynomials(t, truncation_level, gegenbauer_alpha(dimension)) @ weights


def figure3(out: Path, truncation_levels=TRUNCATION_LEVELS_FIG3) -> tuple[Path, dict]:
    """The figure, and per (activation, d, Ñ) the drawn series' maximum error on [−1, 1] and on |t| ≤ INTERIOR
    and its values at t = ±1 (the grid's end points)."""
    t = np.linspace(-1.0, 1.0, 801)
    interior = np.abs(t) <= INTERIOR
    colours = plt.cm.viridis(np.linspace(0.0, 0.85, len(truncation_levels)))
    rows = []
    fig, axes = plt.subplots(2, len(DIMENSIONS), figsize=(11, 8), sharex=True)
    for row, name in enumerate(ACTIVATION_LABELS):
        exact = _activation_values(name, t)
        for col, d in enumerate(DIMENSIONS):
            ax = axes[row, col]
            ax.plot(t, exact, color="black", lw=3.0, alpha=0.35, label=f"{name} (exact)")
            for colour, level in zip(colours, truncation_levels):
                approx = truncated_activation(name, d, level, t)
                ax.plot(t, approx, color=colour, lw=1.6, label=f"Ñ = {level}")
                error = np.abs(approx - exact)
                rows.append(dict(activation=name, dimension=d, truncation_level=level, max_error=float(error.max()),
                                 max_error_interior=float(error[interior].max()), series_at_minus1=float(approx[0]),
                                 exact_at_minus1=float(exact[0]), series_at_plus1=float(approx[-1]),
                                 exact_at_plus1=float(exact[-1])))
            ax.set_title(f"{ACTIVATION_LABELS[name]},  d = {d}", fontsize=12)
            ax.grid(alpha=0.3)
            if row == len(ACTIVATION_LABELS) - 1:
                ax.set_xlabel("t = cos θ", fontsize=11)
            if col == 0:
                ax.set_ylabel("σ(t) and σ̃(t)", fontsize=11)
            ax.legend(fontsize=9, loc="upper left")
    path = _save(
        fig,
        out / "fig3_truncated_activations.png",
        "Fig. 3: activations and their truncated zonal series  σ̃(t) = Σ$_{n<Ñ}$ σ$_n$ N$_n^d$ Ĉ$_n$(t)",
        fontsize=13,
    )
    return path, dict(grid_points=t.size, interior=INTERIOR, rows=rows)


def rkhs_norm(name: str, dimension: int, truncation_level: int, threshold: float) -> float:
    """‖g̃‖_H for a unit direction w (kernel variance 1): sqrt(Kuu[0, 0]) through gpflow.covariances.Kuu."""

    tf.get_logger().setLevel("ERROR")  # one Kuu per (Ñ, threshold) retraces the Clenshaw tf.function

    W = np.zeros((1, dimension))
    W[0, -1] = 1.0
    feature = ActivationFeature(W, activation=name, truncation_level=truncation_level, threshold=threshold)
    kernel = ZonalArcCosine(input_dim=dimension - 1, truncation_level=truncation_level, threshold=threshold)
    Kmm = gpflow.covariances.Kuu(feature, kernel).numpy()
    return float(np.sqrt(Kmm[0, 0]))


def figure4(out: Path, truncation_levels=TRUNCATION_LEVELS_FIG4) -> tuple[Path, dict]:
    """The figure, and every plotted norm: per (activation, d) the norms at ``truncation_levels``."""
    levels = np.asarray(truncation_levels)
    colours = {"relu": "tab:orange", "softplus": "tab:blue"}
    curves = []
    fig, axes = plt.subplots(1, len(DIMENSIONS), figsize=(11, 4.6), sharey=False)
    for ax, d in zip(axes, DIMENSIONS):
        for name in ACTIVATION_LABELS:
            norms = [rkhs_norm(name, d, int(n), threshold=THRESHOLD) for n in levels]
            curves.append(dict(activation=name, dimension=d, norms=norms))
            ax.plot(levels, norms, "o-", ms=3, lw=1.8, color=colours[name], label=name)
        ax.set_yscale("log")
        ax.set_xlabel("truncation level Ñ", fontsize=11)
        ax.set_ylabel("‖g̃‖$_\\mathcal{H}$", fontsize=11)
        ax.set_title(f"d = {d}", fontsize=12)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=9, loc="upper left")
    path = _save(
        fig,
        out / "fig4_rkhs_norm.png",
        "Fig. 4 (bottom): RKHS norm of a unit-norm truncated inducing function under ZonalArcCosine\n"
        f"(library defaults: levels with |coefficient|·N$_n^d$ < {_number(THRESHOLD)} dropped)",
        fontsize=12,
    )
    return path, dict(threshold=THRESHOLD, truncation_levels=[int(n) for n in levels], curves=curves)


def spectra(dimension: int, truncation_level: int = SPECTRUM_LEVELS) -> dict[str, np.ndarray]:
    """λ_n (arc-cosine, Matérn-5/2) and σ_n (ReLU, Softplus), all with threshold 0, by the keys of :data:`SERIES`."""
    kwargs = dict(input_dim=dimension - 1, truncation_level=truncation_level, threshold=0.0)
    return {
        "arc_cosine": ZonalArcCosine(**kwargs).eigenvalues,
        "matern52": ZonalKernel(zonal_matern52_shape, **kwargs).eigenvalues,
        "relu": activation_coefficients("relu", dimension, truncation_level, threshold=0.0),
        "softplus": activation_coefficients("softplus", dimension, truncation_level, threshold=0.0),
    }


def zero_levels(magnitudes: np.ndarray) -> np.ndarray:
    """Mask of the levels drawn as zero: |coefficient| ≤ ZERO_RELATIVE × the series' largest."""
    return magnitudes <= ZERO_RELATIVE * magnitudes.max()


def figureC2(out: Path) -> tuple[Path, dict]:
    """The figure, and every plotted coefficient (signed, threshold 0) per (series, d)."""
    styles = [
        ("#08306b", "o", -0.24),  # arc cosine: dark blue
        ("#6baed6", "s", -0.08),  # Matérn: light blue
        ("#a63603", "^", 0.08),  # ReLU: dark orange
        ("#fdae6b", "D", 0.24),  # Softplus: light orange
    ]
    recorded = []
    fig, axes = plt.subplots(1, len(DIMENSIONS), figsize=(12, 5))
    for ax, d in zip(axes, DIMENSIONS):
        series = spectra(d)
        recorded += [dict(series=key, dimension=d, coefficients=[float(c) for c in np.asarray(values)])
                     for key, values in series.items()]
        magnitudes = {key: np.abs(values) for key, values in series.items()}
        nonzero_min = min(m[~zero_levels(m)].min() for m in magnitudes.values())
        bottom = 10 ** (np.floor(np.log10(nonzero_min)) - 2)
        zero_row = 10 ** (np.log10(bottom) + 0.6)
        for (key, mag), (colour, marker, shift) in zip(magnitudes.items(), styles):
            n = np.arange(mag.size)
            zero = zero_levels(mag)
            ax.plot(n[~zero] + shift, mag[~zero], marker, ls="none", ms=6, color=colour, mec="black", mew=0.5,
                    label=SERIES[key])
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
    path = _save(
        fig,
        out / "figC2_spectra.png",
        "Fig. C.2: spectra of the kernels (blue) and activations (orange); computed with threshold 0,\n"
        f"levels below {ZERO_RELATIVE:g}× the largest coefficient (closed-form zeros, quadrature round-off) shown as ×",
        fontsize=12,
    )
    return path, dict(zero_relative=ZERO_RELATIVE, threshold=THRESHOLD, spectra=recorded)


# ---- the study: one cell per figure; its record holds the numbers the page states, from the arrays drawn.
KEY = ("figure",)
#: Change the version whenever a figure's computation changes (the figures take no option that changes a number).
PROTOCOL = Protocol("1")
FIGURES = {"fig3": figure3, "fig4": figure4, "figC2": figureC2}


def upgrade(record: dict) -> dict:
    """Records made before the figures declared a :class:`Protocol` carry the string "v1": version 1."""
    return relabel(record, PROTOCOL if record.get("protocol") == "v1" else None)


def add_options(parser) -> None:
    parser.add_argument("--figures", type=Path, default=Path("docs/figures"), help="folder of the PNGs (default %(default)s)")
    parser.add_argument("--doc", type=Path, default=Path("docs/figures.md"),
                        help="the page whose generated blocks the report writes (default %(default)s)")
    parser.add_argument("--only", nargs="+", choices=list(FIGURES), default=list(FIGURES), help="the figures to draw")


def cells(options) -> list:
    return [{"figure": name} for name in options.only]


def run_cell(cell, options, context) -> dict:
    start = time.perf_counter()
    Path(options.figures).mkdir(parents=True, exist_ok=True)
    path, quantities = FIGURES[cell["figure"]](Path(options.figures))
    context.progress(f"  wrote {path}")
    return {**quantities, "png": path.name, "seconds": time.perf_counter() - start, "command": options.command}


# ---- the report: tables made from the records alone


def _levels(levels) -> str:
    return ", ".join(str(n) for n in levels) if len(levels) else "none"


def fig3_table(record: dict) -> str:
    lines = [f"Per activation, dimension d and truncation level Ñ, on {record['grid_points']} evenly spaced t in [−1, 1]: "
             f"the largest |σ̃(t) − σ(t)| on the whole grid and inside |t| ≤ {record['interior']:g}, and the series at "
             "the poles t = −1 and t = 1 next to the activation's value there.", "",
             f"| activation | d | Ñ | max error on [−1, 1] | max error on \\|t\\| ≤ {record['interior']:g} | σ̃(−1) | σ(−1) | σ̃(1) | σ(1) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in record["rows"]:
        lines.append(f"| {r['activation']} | {r['dimension']} | {r['truncation_level']} | {_number(r['max_error'])} | "
                     f"{_number(r['max_error_interior'])} | {_number(r['series_at_minus1'], 3)} | "
                     f"{_number(r['exact_at_minus1'], 3)} | {_number(r['series_at_plus1'], 3)} | {_number(r['exact_at_plus1'], 3)} |")
    return "\n".join(lines)


def levelled_off_from(levels, norms, tolerance: float = LEVELLED_OFF) -> int:
    """The smallest Ñ from which every norm is within ``tolerance`` (relative) of the norm at the last Ñ."""
    norms = np.asarray(norms)
    outside = np.nonzero(np.abs(norms / norms[-1] - 1.0) > tolerance)[0]
    return int(levels[outside[-1] + 1]) if outside.size else int(levels[0])


def grows_at(levels, norms) -> str:
    """Which Ñ the norm grows at (relative growth above 1e-12): "odd only", "even only" or "odd and even"."""
    growth = np.nonzero(np.diff(norms) > 1e-12 * np.asarray(norms[1:]))[0] + 1
    parity = {int(levels[i]) % 2 for i in growth}
    return {frozenset({1}): "odd only", frozenset({0}): "even only"}.get(frozenset(parity), "odd and even" if parity else "never")


def fig4_table(record: dict) -> str:
    levels = record["truncation_levels"]
    shown = sorted({levels[0], 10, 20, levels[-1]} & set(levels))
    head = " | ".join(f"‖g̃‖ at Ñ = {n}" for n in shown)
    lines = [f"Every norm of the figure is in the record (Ñ = {levels[0]}..{levels[-1]}, threshold {_number(record['threshold'])}); "
             f"“levelled off from” is the smallest Ñ from which the norm stays within {LEVELLED_OFF:.0%} of its value "
             f"at Ñ = {levels[-1]}.", "",
             f"| activation | d | {head} | grows at Ñ | levelled off from Ñ |",
             "|---|---|" + "---|" * len(shown) + "---|---|"]
    for curve in record["curves"]:
        norms = curve["norms"]
        values = " | ".join(_number(norms[levels.index(n)], 3) for n in shown)
        lines.append(f"| {curve['activation']} | {curve['dimension']} | {values} | {grows_at(levels, norms)} | "
                     f"{levelled_off_from(levels, norms)} |")
    return "\n".join(lines)


def below_from(magnitudes: np.ndarray, threshold: float):
    """The smallest level n from which every nonzero level (:func:`zero_levels`) is below ``threshold``; None when
    the last nonzero level is not."""
    above = np.nonzero(~zero_levels(magnitudes) & (magnitudes >= threshold))[0]
    later = np.nonzero(~zero_levels(magnitudes))[0]
    later = later[later > above[-1]] if above.size else later
    return int(later[0]) if later.size else None


def term_shares(magnitudes: np.ndarray, dimension: int) -> np.ndarray:
    """Each level's term |coefficient|·N_n^d as a share of the sum of the recorded terms: the quantity the library's
    threshold applies to (``activated_dgp.zonal.funk_hecke.apply_threshold``)."""
    terms = magnitudes * num_harmonics(np.arange(magnitudes.size), dimension)
    return terms / terms.sum()


def figC2_table(record: dict) -> str:
    threshold = _number(record["threshold"])
    lines = [f"Every coefficient of the figure is in the record (n = 0..{SPECTRUM_LEVELS - 1}, threshold 0). Zero levels: "
             f"|coefficient| ≤ {_number(record['zero_relative'])} × the series' largest; “largest zero-level ratio” is the "
             f"largest |coefficient| / largest |coefficient| among them (0: exact zeros); “nonzero levels below "
             f"{threshold} from n” is the smallest n from which every nonzero level is below {threshold}, and “smallest "
             "term share there” the smallest term |coefficient|·N_n^d of those levels as a share of the sum of the "
             f"terms (what the library compares with its threshold {threshold}).", "",
             f"| series | d | zero levels n | largest zero-level ratio | \\|coefficient\\| at n = {DECAY_LEVEL} | "
             f"nonzero levels below {threshold} from n | smallest term share there |",
             "|---|---|---|---|---|---|---|"]
    for entry in record["spectra"]:
        magnitudes = np.abs(np.asarray(entry["coefficients"]))
        zero = zero_levels(magnitudes)
        ratio = magnitudes[zero].max() / magnitudes.max() if zero.any() else None
        below = below_from(magnitudes, record["threshold"])
        share = None if below is None else term_shares(magnitudes, entry["dimension"])[below:][~zero[below:]].min()
        lines.append(f"| {SERIES_NAMES[entry['series']]} | {entry['dimension']} | {_levels(np.nonzero(zero)[0])} | "
                     f"{'—' if ratio is None else _number(ratio)} | {_number(magnitudes[DECAY_LEVEL])} | "
                     f"{'—' if below is None else below} | {'—' if share is None else _number(share)} |")
    return "\n".join(lines)


TABLES = {"fig3": fig3_table, "fig4": fig4_table, "figC2": figC2_table}


def report(records, options) -> None:
    """One generated block per recorded figure on ``--doc``, named after the figure (``fig3``, ``fig4``, ``figC2``)."""
    by_figure = {record["figure"]: record for record in records}
    for name, table in TABLES.items():
        if name in by_figure:
            write_block(options.doc, name, table(by_figure[name]), options.report_command, create=True)


def main(argv=None) -> list:
    return cli.main("figures", sys.modules[__name__], argv)


if __name__ == "__main__":
    main()
