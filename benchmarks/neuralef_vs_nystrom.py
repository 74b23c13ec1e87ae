"""NeuralEF against Nyström: training time and eigenpair accuracy as the sample size N grows (issue 4).

Set-up of the NeuralEF paper, §4.1: the polynomial kernel (x x' + 1.5)^4 with x ~ U[−1, 1] and the
RBF kernel exp(−|x − x'|²/2) with x ~ U[−2, 2], k = 10. For each N in 1k, 2k, 4k, 8k:

* ``Nystrom(10).fit(X)``: Gram matrix and its full eigendecomposition, O(N³);
* ``NeuralEF(10, width 32)`` on the same X with a fixed budget of 2000 steps of batch 256 (Adam 1e-3,
  cosine annealing), O(steps · B²) whatever N.

Ground truth, independent of both: the operator (Kψ)(x) = (1/2a) ∫_(−a)^a κ(x, y) ψ(y) dy discretised
with Gauss–Legendre quadrature (200 nodes): the symmetric matrix W^½ K W^½ / (2a) (W the quadrature
weights) has the operator's eigenvalues to machine precision for these analytic kernels, and its
eigenvectors give the eigenfunctions at any x through ψ(x) = Σ_m w_m κ(x, y_m) ψ(y_m) / (2a μ).

Reported: wall-clock time of ``fit`` (NeuralEF including the tracing of its step), the largest relative
eigenvalue error and the largest eigenfunction RMS error (sign-aligned, on 1000 grid points; ψ has
unit RMS) over the top 3 pairs, and how many of the 10 pairs are within 10 % of the true eigenvalue
(only pairs with a true eigenvalue above 1e-8 count: the polynomial kernel has rank 5 in 1-D).

Run:  python -m benchmarks.neuralef_vs_nystrom      (writes the "neuralef" section of docs/benchmarks.md
      and docs/figures/neuralef_benchmark.png; about 6 minutes on 2 cores)
"""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from experiments.eigenfunctions_figure import KERNELS, aligned_rms, classic_kernel  # noqa: E402

SIZES = (1000, 2000, 4000, 8000)
NUM_EIGENPAIRS, TOP, STEPS, QUADRATURE_NODES = 10, 3, 2000, 200
FIGURE = Path(__file__).resolve().parents[1] / "docs" / "figures" / "neuralef_benchmark.png"


def quadrature_truth(kernel, half_width: float, num_nodes: int = QUADRATURE_NODES):
    """(μ [k], ψ: x [M, 1] → [M, k]) of the operator under U[−a, a] by Gauss–Legendre quadrature."""
    nodes, weights = np.polynomial.legendre.leggauss(num_nodes)
    nodes, weights = half_width * nodes[:, None], half_width * weights
    density = 1.0 / (2.0 * half_width)
    K = kernel(nodes).numpy()
    root = np.sqrt(weights * density)
    values, vectors = np.linalg.eigh(root[:, None] * K * root[None, :])
    order = np.argsort(values)[::-1][:NUM_EIGENPAIRS]
    mu, vectors = values[order], vectors[:, order]
    at_nodes = vectors / root[:, None]  # ψ(y_m), normalised: Σ_m w_m ρ ψ_i ψ_j = δ_ij

    def eigenfunctions(x):
        safe = np.where(mu > 1e-12 * mu[0], mu, np.inf)
        return kernel(x, nodes).numpy() @ (weights[:, None] * density * at_nodes) / safe[None, :]

    return mu, eigenfunctions


def _errors(mu, psi, true_mu, true_psi):
    relative = np.abs(mu - true_mu) / np.abs(true_mu)
    meaningful = true_mu > 1e-8 * true_mu[0]
    return {
        "eigenvalue": float(relative[:TOP].max()),
        "eigenfunction": float(aligned_rms(psi[:, :TOP], true_psi[:, :TOP]).max()),
        "within": f"{int(np.sum((relative < 0.1) & meaningful))}/{int(meaningful.sum())}",
        "relative_errors": [round(float(e), 4) for e in relative[meaningful]],
    }


def run(sizes=SIZES, steps: int = STEPS, seed: int = 0):
    from activated_dgp.eigen import NeuralEF, Nystrom

    results = []
    for name in KERNELS:
        kernel, half_width = classic_kernel(name)
        true_mu, true_eigenfunctions = quadrature_truth(kernel, half_width)
        grid = np.linspace(-half_width, half_width, 1000)[:, None]
        true_psi = true_eigenfunctions(grid)
        X_all = np.random.default_rng(seed).uniform(-half_width, half_width, (max(sizes), 1))
        print(f"{name}: true eigenvalues {np.array2string(true_mu[:6], precision=4)}", flush=True)
        for size in sizes:
            X = X_all[:size]
            start = time.perf_counter()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # rank-5 polynomial kernel: zero eigenvalues
                nystrom = Nystrom(NUM_EIGENPAIRS).fit(X, kernel)
            seconds = time.perf_counter() - start
            row = dict(kernel=name, N=size, method="Nyström", seconds=seconds)
            row.update(_errors(nystrom.eigenvalues.numpy(), nystrom(grid).numpy(), true_mu, true_psi))
            results.append(row)
            print(f"  {row}", flush=True)
            start = time.perf_counter()
            neuralef = NeuralEF(NUM_EIGENPAIRS, kernel=kernel, input_dim=1, width=32, seed=seed)
            neuralef.fit(X, num_steps=steps, schedule="cosine")
            seconds = time.perf_counter() - start
            row = dict(kernel=name, N=size, method="NeuralEF", seconds=seconds)
            row.update(_errors(neuralef.eigenvalues.numpy(), neuralef(grid).numpy(), true_mu, true_psi))
            results.append(row)
            print(f"  {row}", flush=True)
    return results


def _figure(results, path: Path, steps: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for name, marker in zip(KERNELS, ("o", "s")):
        for method, colour in (("Nyström", "tab:orange"), ("NeuralEF", "tab:blue")):
            rows = [r for r in results if r["kernel"] == name and r["method"] == method]
            N = [r["N"] for r in rows]
            for ax, key in zip(axes, ("seconds", "eigenvalue", "eigenfunction")):
                ax.loglog(N, [r[key] for r in rows], marker=marker, color=colour, label=f"{method}, {name}")
    axes[0].set_ylabel("fit time (s)")
    axes[1].set_ylabel(f"max rel. eigenvalue error, top {TOP}")
    axes[2].set_ylabel(f"max eigenfunction RMS error, top {TOP}")
    for ax in axes:
        ax.set_xlabel("N (training points)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"NeuralEF ({steps} steps, batch 256) vs Nyström (full eigh), k = {NUM_EIGENPAIRS}; truth: Gauss–Legendre quadrature", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def report(results, sizes, steps: int) -> str:
    """The Markdown section from the result rows of :func:`run`."""
    rows = [
        f"| {r['kernel']} | {r['N']:,} | {r['method']} | {r['seconds']:.2f} | {r['eigenvalue']:.2e} | {r['eigenfunction']:.3f} | {r['within']} |"
        for r in results
    ]

    def seconds(name, method, size):
        return next(r["seconds"] for r in results if r["kernel"] == name and r["method"] == method and r["N"] == size)

    largest, smallest = max(sizes), min(sizes)
    growth = {name: seconds(name, "Nyström", largest) / seconds(name, "Nyström", smallest) for name in KERNELS}
    ratio = {name: seconds(name, "Nyström", largest) / seconds(name, "NeuralEF", largest) for name in KERNELS}
    # the smallest N is left out of the spreads when there are several (its sampling error dominates)
    spread_from = sorted(sizes)[1] if len(sizes) > 1 else smallest

    def spread(method, key):
        values = [r[key] for r in results if r["method"] == method and r["N"] >= spread_from]
        return min(values), max(values)

    nys_lo, nys_hi = spread("Nyström", "eigenvalue")
    nef_lo, nef_hi = spread("NeuralEF", "eigenvalue")
    fun_lo, fun_hi = spread("NeuralEF", "eigenfunction")
    nfun_lo, nfun_hi = spread("Nyström", "eigenfunction")
    return f"""## NeuralEF against Nyström (issue 4)

Command: `python -m benchmarks.neuralef_vs_nystrom` (NeuralEF paper §4.1 set-up: (x x' + 1.5)^4 on U[−1, 1] and
exp(−|x − x'|²/2) on U[−2, 2], k = {NUM_EIGENPAIRS}; Nyström = full eigendecomposition of the N × N Gram matrix; NeuralEF =
{steps} steps of batch 256, MLPs of width 32, Adam 1e-3 with cosine annealing; truth = Gauss–Legendre quadrature of the
operator with {QUADRATURE_NODES} nodes; errors over the top {TOP} pairs, eigenfunctions on 1000 grid points, sign-aligned; float64, 2 CPU cores).

| kernel | N | method | fit time (s) | max rel. eigenvalue error (top {TOP}) | max eigenfunction RMS error (top {TOP}) | pairs within 10 % |
|---|---|---|---|---|---|---|
{chr(10).join(rows)}

![NeuralEF benchmark](figures/neuralef_benchmark.png)

- Nyström's fit time grows {growth['polynomial']:.0f}× (polynomial) and {growth['rbf']:.0f}× (RBF) from N = {smallest:,} to {largest:,}
  (O(N³) eigendecomposition; {largest // smallest}³ = {(largest // smallest) ** 3}); NeuralEF's is flat at a fixed number of steps. At
  N = {largest:,} Nyström takes {ratio['polynomial']:.1f}× (polynomial) and {ratio['rbf']:.1f}× (RBF) NeuralEF's time.
- Both methods fit the eigenpairs of the *empirical* operator of their N points, so both carry its sampling error (about
  1/√N, one sample per N here, so not monotone): at N = {smallest:,} their eigenfunction errors are alike. Nyström's top-{TOP}
  eigenvalue errors at N ≥ {spread_from:,} are {nys_lo:.1%}–{nys_hi:.1%}; NeuralEF's stay at {nef_lo:.1%}–{nef_hi:.1%}, set by its
  optimisation budget rather than by N, and its eigenfunction errors at N ≥ {spread_from:,} are {fun_lo:.3f}–{fun_hi:.3f} (Nyström
  {nfun_lo:.3f}–{nfun_hi:.3f}). Beyond the top 3 NeuralEF's pairs converge slowly (eq. 18's pull towards orthogonality on ψ_j is
  of order μ_j), hence the last column.
- "pairs within 10 %" counts eigenvalues within 10 % of the truth among those with a non-zero true eigenvalue
  (the polynomial kernel has rank 5 in 1-D).
"""


def main(sizes, steps: int, write: bool) -> str:
    from benchmarks._report import write_section

    results = run(sizes, steps)
    doc = report(results, sizes, steps)
    if write:
        _figure(results, FIGURE, steps)
        write_section("neuralef", doc)
    return doc


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--no-write", action="store_true", help="print the table without touching docs/")
    args = parser.parse_args()
    print(main(tuple(args.sizes), args.steps, write=not args.no_write))
