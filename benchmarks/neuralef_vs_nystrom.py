"""NeuralEF against Nyström: fit time, eigenvalue errors and eigenfunction overlaps of all 10 pairs as N grows.

Set-up of the NeuralEF paper, §4.1: the polynomial kernel (x x' + 1.5)^4 with x ~ U[−1, 1] and the
RBF kernel exp(−|x − x'|²/2) with x ~ U[−2, 2], k = 10. For each N (default 2k, 5k, 10k, 20k):

* ``Nystrom(10, solver="eigh").fit(X)``: Gram matrix and its full eigendecomposition, O(N³) time and
  O(N²) memory; skipped above ``--nystrom-max`` (default 10,000), where only its O(N³) extrapolation is given;
* ``Nystrom(10, solver="lanczos").fit(X)``: the same Gram matrix, top 10 eigenpairs only (ARPACK),
  O(N² k) per restart, at every N;
* ``NeuralEF(10, oversampling=10)``: 20 MLPs of width 32 (sin/cos), Adam 1e-3 with cosine annealing,
  batch 256, ``--steps`` steps (default 4000), then the Rayleigh–Ritz step over all N points in blocks
  (O(N²) kernel evaluations, no N × N matrix stored).

Ground truth, independent of both: the operator (Kψ)(x) = (1/2a) ∫_(−a)^a κ(x, y) ψ(y) dy discretised
with Gauss–Legendre quadrature (200 nodes): the symmetric matrix W^½ K W^½ / (2a) (W the quadrature
weights) has the operator's eigenvalues to machine precision for these analytic kernels, and its
eigenvectors give the eigenfunctions at any x through ψ(x) = Σ_m w_m κ(x, y_m) ψ(y_m) / (2a μ).

Reported per method and N: wall-clock fit time (NeuralEF: training including tracing, and the Ritz step),
for each of the 10 pairs the relative eigenvalue error and the overlap |⟨ψ̂_j, ψ_j⟩| / (‖ψ̂_j‖ ‖ψ_j‖) in
L²(q) (on 4001 grid points); only pairs with a true eigenvalue above 1e-8 μ_1 count (the polynomial
kernel has rank 5 in 1-D). Rows are appended to ``--cache`` (JSON lines) as they finish; a rerun skips
the rows already there (resumable).

Run:  nice -n 15 python -m benchmarks.neuralef_vs_nystrom      (writes the "neuralef" section of
      docs/benchmarks*.md and docs/figures/neuralef_benchmark.png)
"""

from __future__ import annotations

import os
from pathlib import Path
import time
import warnings

import matplotlib
import matplotlib.pyplot as plt
import numpy as np

from activated_dgp.eigen import NeuralEF, Nystrom
from benchmarks._report import write_section
from experiments.harness.blocks import write_block
from experiments.harness.setups import CLASSIC_KERNELS as KERNELS, classic_kernel
from experiments.harness.store import ResultStore

SIZES = (2000, 5000, 10000, 20000)
NUM_EIGENPAIRS, OVERSAMPLING, STEPS, QUADRATURE_NODES, NYSTROM_MAX = 10, 10, 4000, 200, 10000
CONTROL_STEPS = 50  # nearly untrained networks + the Ritz step: how much does the training add?
ROOT = Path(__file__).resolve().parents[1]
FIGURE = ROOT / "docs" / "figures" / "neuralef_benchmark.png"
CACHE = ROOT / "docs" / "figures" / "neuralef_benchmark.jsonl"
LANCZOS = "Nyström, Lanczos"  # the same Nyström estimate, top k only (Nystrom(solver="lanczos"))
# The quiet same-run check at N = 20,000 (``--quiet-check``): its own record and its own block of docs/benchmarks*.md
QUIET_CACHE = ROOT / "docs" / "figures" / "neuralef_quiet.jsonl"
QUIET_SIZE, QUIET_COMMAND = 20000, "python -m benchmarks.neuralef_vs_nystrom --quiet-check"


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


def pair_errors(mu, psi, true_mu, true_psi) -> dict:
    """Relative eigenvalue errors and L²(q) overlaps (grid average) of the pairs with μ_j > 1e-8 μ_1."""
    meaningful = true_mu > 1e-8 * true_mu[0]
    relative = np.abs(mu - true_mu) / np.abs(true_mu)
    norms = np.sqrt(np.mean(psi**2, 0) * np.mean(true_psi**2, 0))
    overlaps = np.abs(np.mean(psi * true_psi, 0)) / np.where(norms > 0, norms, np.inf)
    return {
        "relative_errors": [float(e) for e in relative[meaningful]],
        "overlaps": [float(o) for o in overlaps[meaningful]],
    }


ROW_DEFAULTS = {"oversampling": OVERSAMPLING, "estimator": "paper"}  # rows written before these settings existed


def _store(cache: Path):
    """The rows of ``cache`` as a :class:`experiments.harness.store.ResultStore` (one JSON line per finished row)."""
    return ResultStore(cache, ("kernel", "N", "method", "steps", "oversampling", "estimator"),
                       upgrade=lambda row: {**ROW_DEFAULTS, **row})


def run(sizes=SIZES, steps: int = STEPS, nystrom_max: int = NYSTROM_MAX, cache: Path = CACHE, seed: int = 0,
        oversampling: int = OVERSAMPLING, estimator: str = "paper"):
    store = _store(cache)
    done = store.records()
    key = lambda r: (r["kernel"], r["N"], r["method"], r["steps"], r.get("oversampling", OVERSAMPLING), r.get("estimator", "paper"))  # noqa: E731
    setting = (oversampling, estimator)
    finished = {key(r) for r in done}
    results = [r for r in done if r["N"] in sizes and r["steps"] in (steps, CONTROL_STEPS, 0) and key(r)[4:] in (setting, (OVERSAMPLING, "paper"))
               and (r["method"] == "Nyström" or key(r)[4:] == setting)]

    def record(row):
        row["load_average"] = os.getloadavg()[0]  # 1-minute load when the row finished: how quiet the machine was
        results.append(row)
        store.append({**ROW_DEFAULTS, **row})  # one line, flushed and fsynced: an interrupted run loses no finished row
        print(f"  {row['method']:8s} N={row['N']:6d} {row['seconds']:8.1f} s  within 10 %: "
              f"{sum(e < 0.1 for e in row['relative_errors'])}/{len(row['relative_errors'])}  "
              f"overlaps ≥ 0.95: {sum(o >= 0.95 for o in row['overlaps'])}/{len(row['overlaps'])}", flush=True)

    for name in KERNELS:
        kernel, half_width = classic_kernel(name)
        true_mu, true_eigenfunctions = quadrature_truth(kernel, half_width)
        grid = np.linspace(-half_width, half_width, 4001)[:, None]
        true_psi = true_eigenfunctions(grid)
        X_all = np.random.default_rng(seed).uniform(-half_width, half_width, (max(sizes), 1))
        print(f"{name}: true eigenvalues {np.array2string(true_mu, precision=3)}", flush=True)
        for size in sizes:
            X = X_all[:size]
            for method, solver in (("Nyström", "eigh"), (LANCZOS, "lanczos")):
                if (solver == "eigh" and size > nystrom_max) or any(f[:4] == (name, size, method, 0) for f in finished):
                    continue
                start = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # rank-5 polynomial kernel: zero eigenvalues
                    nystrom = Nystrom(NUM_EIGENPAIRS, solver=solver).fit(X, kernel)
                row = dict(kernel=name, N=size, method=method, steps=0, seconds=time.perf_counter() - start)
                row.update(pair_errors(nystrom.eigenvalues.numpy(), nystrom(grid).numpy(), true_mu, true_psi))
                del nystrom
                record(row)
            for budget in (steps, CONTROL_STEPS):
                if (name, size, "NeuralEF", budget) + setting in finished:
                    continue
                start = time.perf_counter()
                neuralef = NeuralEF(NUM_EIGENPAIRS, kernel=kernel, input_dim=1, oversampling=oversampling, estimator=estimator, seed=seed)
                neuralef.fit(X, num_steps=budget, schedule="cosine", rayleigh_ritz=False)
                training = time.perf_counter() - start
                minibatch = pair_errors(neuralef.eigenvalues.numpy(), neuralef(grid).numpy(), true_mu, true_psi)
                neuralef.rayleigh_ritz(X)
                row = dict(kernel=name, N=size, method="NeuralEF", steps=budget, seconds=time.perf_counter() - start,
                           training_seconds=training, minibatch=minibatch, oversampling=oversampling, estimator=estimator)
                row.update(pair_errors(neuralef.eigenvalues.numpy(), neuralef(grid).numpy(), true_mu, true_psi))
                record(row)
    return results


def _figure(results, path: Path, steps: int) -> None:
    matplotlib.use("Agg")

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for name, marker in zip(KERNELS, ("o", "s")):
        for method, colour in (("Nyström", "tab:orange"), ("NeuralEF", "tab:blue")):
            rows = sorted((r for r in results if r["kernel"] == name and r["method"] == method), key=lambda r: r["N"])
            N = [r["N"] for r in rows]
            axes[0].loglog(N, [r["seconds"] for r in rows], marker=marker, color=colour, label=f"{method}, {name}")
            axes[1].semilogx(N, [max(r["relative_errors"]) for r in rows], marker=marker, color=colour)
            axes[2].semilogx(N, [min(r["overlaps"]) for r in rows], marker=marker, color=colour)
    axes[0].set_ylabel("fit time (s)")
    axes[1].set_ylabel("max relative eigenvalue error, all pairs")
    axes[1].axhline(0.1, color="grey", lw=0.8, ls="--")
    axes[2].set_ylabel("min overlap |<ψ̂_j, ψ_j>|, all pairs")
    axes[2].axhline(0.95, color="grey", lw=0.8, ls="--")
    for ax in axes:
        ax.set_xlabel("N (training points)")
        ax.grid(alpha=0.3, which="both")
    axes[0].legend(fontsize=8)
    fig.suptitle(f"NeuralEF (10 + {OVERSAMPLING} networks, {steps} steps, Rayleigh–Ritz) vs Nyström (full eigh), k = {NUM_EIGENPAIRS}; truth: quadrature", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _count(values, test) -> str:
    return f"{sum(test(v) for v in values)}/{len(values)}"


def _load_note(results) -> str:
    loads = [r["load_average"] for r in results if "load_average" in r]
    if len(loads) < len(results):
        return ("rows without a recorded load were taken with other jobs running (load 8–14), so their times are inflated "
                "and noisy; compare ratios within one run" + (f"; the others at load {min(loads):.1f}–{max(loads):.1f}" if loads else ""))
    return f"1-minute load average {min(loads):.1f}–{max(loads):.1f} when the rows finished"


def _label(row) -> str:
    return row["method"] if row["method"] != "NeuralEF" else f"NeuralEF, {row['steps']} steps"


def report(results, sizes, steps: int, nystrom_max: int) -> str:
    """The Markdown section from the result rows of :func:`run`."""
    rows = []
    for r in sorted(results, key=lambda r: (KERNELS.index(r["kernel"]), r["N"], r["method"] != "Nyström", r["method"] != LANCZOS, -r["steps"])):
        label = _label(r)
        ritz = f" (Ritz {r['seconds'] - r['training_seconds']:.1f})" if "training_seconds" in r else ""
        before = ""
        if "minibatch" in r:
            m = r["minibatch"]
            before = f"{_count(m['relative_errors'], lambda e: e < 0.1)}, {_count(m['overlaps'], lambda o: o >= 0.95)}"
        rows.append(
            f"| {r['kernel']} | {r['N']:,} | {label} | {r['seconds']:.1f}{ritz} | {max(r['relative_errors']):.3f} | "
            f"{_count(r['relative_errors'], lambda e: e < 0.1)} | {min(r['overlaps']):.3f} | {_count(r['overlaps'], lambda o: o >= 0.95)} | {before} |"
        )

    def per_pair(name, size):
        lines = []
        for r in results:
            if r["kernel"] == name and r["N"] == size:
                label = _label(r)
                lines.append(f"| {label} | relative error | " + " | ".join(f"{e:.3f}" for e in r["relative_errors"]) + " |")
                lines.append(f"| {label} | overlap | " + " | ".join(f"{o:.3f}" for o in r["overlaps"]) + " |")
                if "minibatch" in r:
                    m = r["minibatch"]
                    lines.append(f"| {label}, minibatch estimates (no Ritz) | relative error | " + " | ".join(f"{e:.3f}" for e in m["relative_errors"]) + " |")
                    lines.append(f"| {label}, networks sorted (no Ritz) | overlap | " + " | ".join(f"{o:.3f}" for o in m["overlaps"]) + " |")
        return lines

    smallest = min(sizes)
    pairs = []
    for name in KERNELS:
        if not any(r["kernel"] == name and r["N"] == smallest for r in results):
            continue
        count = len(next(r for r in results if r["kernel"] == name)["overlaps"])
        pairs += [f"\n{name}, N = {smallest:,}:\n", "| method | quantity | " + " | ".join(f"{j + 1}" for j in range(count)) + " |",
                  "|---|---|" + "---|" * count] + per_pair(name, smallest)

    def seconds(name, method, size):
        return next((r["seconds"] for r in results if r["kernel"] == name and r["method"] == method and r["N"] == size and r["steps"] in (0, steps)), None)

    notes = []
    measured = sorted({r["N"] for r in results if r["method"] == "Nyström"})
    if measured:
        top = measured[-1]
        for size in sorted(sizes):
            if size > top:
                for name in KERNELS:
                    base, nef = seconds(name, "Nyström", top), seconds(name, "NeuralEF", size)
                    if base is not None and nef is not None:
                        estimate = base * (size / top) ** 3
                        notes.append(f"- {name}, N = {size:,}: Nyström not run (> --nystrom-max {nystrom_max:,}); its O(N³) extrapolation "
                                     f"from N = {top:,} is ≈ {estimate:,.0f} s, so NeuralEF's {nef:.0f} s is ≈ {nef / estimate:.2g}× of it.")
        for size in measured:
            for name in KERNELS:
                base, nef = seconds(name, "Nyström", size), seconds(name, "NeuralEF", size)
                if base is not None and nef is not None:
                    notes.append(f"- {name}, N = {size:,}: NeuralEF / Nyström (full eigh) time = {nef / base:.2f}.")
    for size in sorted({r["N"] for r in results if r["method"] == LANCZOS}):
        for name in KERNELS:
            base, nef = seconds(name, LANCZOS, size), seconds(name, "NeuralEF", size)
            if base is not None and nef is not None:
                notes.append(f"- {name}, N = {size:,}: NeuralEF / Nyström (Lanczos, top {NUM_EIGENPAIRS}) time = {nef / base:.2f}.")
    return f"""## NeuralEF against Nyström

Command: `nice -n 15 python -m benchmarks.neuralef_vs_nystrom --sizes {' '.join(map(str, sizes))} --steps {steps} --nystrom-max {nystrom_max}`
(NeuralEF paper §4.1 set-up: (x x' + 1.5)^4 on U[−1, 1] and exp(−|x − x'|²/2) on U[−2, 2], k = {NUM_EIGENPAIRS}.
Nyström = full eigendecomposition of the N × N Gram matrix (LAPACK eigh); "Nyström, Lanczos" = the same estimate with only
the top k eigenpairs by ARPACK (`Nystrom(k, solver="lanczos")`, the default from N = 3,000). NeuralEF = {NUM_EIGENPAIRS} + {OVERSAMPLING} MLPs of width 32 (sin/cos), batch 256,
Adam 1e-3 with cosine annealing over {steps} steps, the paper's estimator (eq. 15), then the Rayleigh–Ritz step over all N points.
Truth = Gauss–Legendre quadrature of the operator ({QUADRATURE_NODES} nodes); overlaps |⟨ψ̂_j, ψ_j⟩| on 4001 grid points. Only pairs with
μ_j > 1e-8 μ_1 count: the polynomial kernel has rank 5 in 1-D. float64 on 2 CPU cores; {_load_note(results)})

| kernel | N | method | fit time (s) | max rel. eigenvalue error | eigenvalues within 10 % | min overlap | overlaps ≥ 0.95 | NeuralEF without the Ritz step: within 10 %, overlaps ≥ 0.95 |
|---|---|---|---|---|---|---|---|---|
{chr(10).join(rows)}

![NeuralEF benchmark](figures/neuralef_benchmark.png)

Per pair:
{chr(10).join(pairs)}

{chr(10).join(notes)}
- The {CONTROL_STEPS}-step control rows (the same networks barely trained, then the Ritz step) reach the same accuracy as the long runs:
  on these 1-D kernels the span of {NUM_EIGENPAIRS + OVERSAMPLING} near-initial sin/cos networks already contains the top-{NUM_EIGENPAIRS} eigenfunctions,
  and the Rayleigh–Ritz step, not the eq. 17 training, does the work (see docs/eigen.md). Without the Ritz step (last column)
  the trained networks get at most half of the pairs.
- At large N the Ritz step's O(N² p) kernel evaluations dominate; `NeuralEF.rayleigh_ritz(X_sample)` on a subsample trades
  that against sampling error.
- The NeuralEF eigenvalues reported are the Ritz values; "minibatch estimates" are the EMA of the eq. 17 terms u_j, which the
  Ritz step replaces (kept as `minibatch_eigenvalues`). The Ritz step costs O(N²) kernel evaluations (its time is in brackets).
- Both methods fit the *empirical* operator of their N points, so both carry its sampling error (≈ 1 % on the top pairs at
  N = 2,000, visible in the Nyström rows).
"""


def quiet_report(results, steps: int = STEPS, size: int = QUIET_SIZE, cache: Path = QUIET_CACHE) -> str:
    """The "neuralef_quiet" block: at N = ``size``, per kernel, the Lanczos Nyström and NeuralEF's two budgets from
    the rows of ``cache``, with each time as a multiple of the Lanczos Nyström's of the same run."""
    rows = [r for r in results if r["N"] == size and r["steps"] in (steps, CONTROL_STEPS, 0) and r["method"] in (LANCZOS, "NeuralEF")]
    record = cache.relative_to(ROOT) if cache.is_relative_to(ROOT) else cache.name
    if not rows:
        return (f"**No record yet** (`{record}`). Run on an otherwise idle machine: "
                f"`{QUIET_COMMAND}` (it appends the rows to that file and rewrites this block).\n")
    lines = [f"Record: `{record}` (one JSON line per row, with the 1-minute load when it finished); "
             f"command: `{QUIET_COMMAND}`; {_load_note(rows)}.", "",
             "| kernel | method | fit time (s) | within 10 % | overlaps ≥ 0.95 | / Nyström (Lanczos) time |", "|---|---|---|---|---|---|"]
    for name in KERNELS:
        ordered = sorted((r for r in rows if r["kernel"] == name), key=lambda r: (r["method"] != LANCZOS, -r["steps"]))
        base = next((r["seconds"] for r in ordered if r["method"] == LANCZOS), None)
        for r in ordered:
            ritz = f" (Ritz {r['seconds'] - r['training_seconds']:.1f})" if "training_seconds" in r else ""
            ratio = "" if base is None else f"{r['seconds'] / base:.2f}"
            lines.append(f"| {name} | {_label(r)} | {r['seconds']:.1f}{ritz} | {_count(r['relative_errors'], lambda e: e < 0.1)} | "
                         f"{_count(r['overlaps'], lambda o: o >= 0.95)} | {ratio} |")
    return "\n".join(lines) + "\n"


def quiet_check(report_only: bool = False, write: bool = True, cache: Path = QUIET_CACHE) -> str:
    """``--quiet-check``: the N = 20,000 rows (Lanczos Nyström, NeuralEF at 4,000 and 50 steps) into their own record
    ``cache``, and the "neuralef_quiet" block of docs/benchmarks*.md from that record."""
    results = _store(cache).records() if report_only else run((QUIET_SIZE,), STEPS, nystrom_max=0, cache=cache)
    doc = quiet_report(results, cache=cache)
    if write:
        write_section("neuralef_quiet", doc, QUIET_COMMAND + " --report-only")
    return doc


def main(sizes, steps: int, nystrom_max: int, write: bool, cache: Path = CACHE, oversampling: int = OVERSAMPLING, estimator: str = "paper",
         report_only: bool = False) -> str:
    if report_only:  # the rows finished so far (e.g. while a long run is still going)
        rows = _store(cache).records()
        results = [r for r in rows if r["N"] in sizes and r["steps"] in (steps, CONTROL_STEPS, 0)]
    else:
        results = run(sizes, steps, nystrom_max, cache, oversampling=oversampling, estimator=estimator)
    doc = report(results, sizes, steps, nystrom_max)
    if write:
        write_oversampling_block()
        _figure(results, FIGURE, steps)
        write_section("neuralef", doc, report_command(sizes, steps, nystrom_max, cache))
    return doc


def report_command(sizes, steps: int, nystrom_max: int, cache: Path = CACHE) -> str:
    """The command that rewrites the "neuralef" block from its record, with the run's non-default settings."""
    options = [("--sizes", " ".join(map(str, sizes)), tuple(sizes) != SIZES), ("--steps", steps, steps != STEPS),
               ("--nystrom-max", nystrom_max, nystrom_max != NYSTROM_MAX),
               ("--cache", Path(cache).as_posix(), Path(cache) != CACHE)]
    return "python -m benchmarks.neuralef_vs_nystrom --report-only" + "".join(f" {flag} {value}" for flag, value, given in options if given)


#: The settings of the committed record's run (its page's Command line)
RECORDED_NYSTROM_MAX = 5000
REPORT_BLOCKS = [("docs/benchmarks_neuralef.md", "neuralef"), ("docs/benchmarks_neuralef.md", "neuralef_quiet"), ("docs/eigen.md", "neuralef_oversampling")]


#: The records of NeuralEF's default number of networks (docs/eigen.md, block "neuralef_oversampling"): the paper's
#: set-up at N = 2,000 and 2,000 steps with 0 and 10 extra networks, one cache each
OVERSAMPLING_RECORDS = {p: ROOT / "docs" / "figures" / f"neuralef_oversampling_{p}.jsonl" for p in (0, 10)}
OVERSAMPLING_COMMAND = ("nice -n 15 python -m benchmarks.neuralef_vs_nystrom --sizes 2000 --steps 2000 --oversampling P --no-write "
                        "--cache docs/figures/neuralef_oversampling_P.jsonl   (P = 0, 10)")


def oversampling_block() -> str:
    """The "neuralef_oversampling" block of docs/eigen.md: NeuralEF at 2,000 steps with 0 and 10 extra networks."""
    lines = [f"Records: `docs/figures/neuralef_oversampling_P.jsonl`, made by `{OVERSAMPLING_COMMAND}`; N = 2,000, "
             "Adam 1e-3 with the cosine schedule, then the Rayleigh–Ritz step; the truth by quadrature (as in the benchmark).", "",
             "| kernel | extra networks | eigenvalues within 10 % | overlaps ≥ 0.95 | max relative eigenvalue error | training (s, shared machine) |",
             "|---|---|---|---|---|---|"]
    for kernel in KERNELS:
        for extra, path in OVERSAMPLING_RECORDS.items():
            rows = [r for r in _store(path).records() if r["method"] == "NeuralEF" and r["steps"] == 2000 and r["kernel"] == kernel]
            for r in rows:
                errors, overlaps = np.asarray(r["relative_errors"]), np.asarray(r["overlaps"])
                lines.append(f"| {kernel} | {extra} | {int(np.sum(errors <= 0.1))}/{errors.size} | {int(np.sum(overlaps >= 0.95))}/{overlaps.size} "
                             f"| {errors.max():.3f} | {r['training_seconds']:.0f} |")
    return "\n".join(lines)


def report_from_records() -> None:
    """The "neuralef" and "neuralef_quiet" blocks of docs/benchmarks*.md (and the figure), and the
    "neuralef_oversampling" block of docs/eigen.md, from their records."""
    main(SIZES, STEPS, RECORDED_NYSTROM_MAX, write=True, report_only=True)
    quiet_check(report_only=True)


def write_oversampling_block() -> None:
    """Rewrite the "neuralef_oversampling" block of docs/eigen.md from its records (when both exist)."""
    if all(path.exists() for path in OVERSAMPLING_RECORDS.values()):
        write_block(ROOT / "docs" / "eigen.md", "neuralef_oversampling", oversampling_block(), "python -m benchmarks.neuralef_vs_nystrom --report-only")


if __name__ == "__main__":
    from experiments.harness.cli import make_parser, shared_option

    parser = make_parser("python -m benchmarks.neuralef_vs_nystrom", __doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--nystrom-max", type=int, default=NYSTROM_MAX)
    parser.add_argument("--cache", type=Path, default=CACHE, help="JSON lines of finished rows (resumable)")
    parser.add_argument("--oversampling", type=int, default=OVERSAMPLING, help="extra NeuralEF networks (docs/eigen.md's development table)")
    parser.add_argument("--estimator", default="paper", choices=("paper", "unbiased"))
    parser.add_argument("--no-write", action="store_true", help="print the table without touching docs/")
    parser.add_argument("--quiet-check", action="store_true",
                        help=f"only the quiet same-run check at N = {QUIET_SIZE:,} (its record: --cache, default {QUIET_CACHE.relative_to(ROOT)})")
    shared_option(parser, "--report-only", help="write the section from the rows in --cache, run nothing")
    args = parser.parse_args()
    if args.quiet_check:
        print(quiet_check(args.report_only, write=not args.no_write, cache=QUIET_CACHE if args.cache == CACHE else args.cache))
        raise SystemExit(0)
    if args.cache == CACHE and (args.oversampling, args.estimator) != (OVERSAMPLING, "paper"):
        parser.error("other NeuralEF settings than the documented ones need their own --cache (and --no-write)")
    print(main(tuple(args.sizes), args.steps, args.nystrom_max, write=not args.no_write, cache=args.cache,
               oversampling=args.oversampling, estimator=args.estimator, report_only=args.report_only))
