"""How much latent variance does each LLA give the rotated-MNIST CNN's logits, against the prior's?

The NeuralEF LLA (eq. 22 of Deng et al. 2022) builds its posterior covariance from the top-k eigenfunctions of the
training NTK alone. The exact LLA's latent covariance at x is J(x) (Σ_i J_iᵀ Λ_i J_i + δ I)⁻¹ J(x)ᵀ: in every
parameter direction the training Jacobians leave out it keeps the prior's 1/δ, and rotated digits move J(x) into
such directions. Eq. 22 has no term for them. This diagnosis measures, on the study's MAP CNN of one seed (loaded from
the study's artifacts, with the NeuralEF fits resumed from their checkpoints), the mean over test digits of the
trace of each LLA's latent covariance tr Σ(x) [C × C], and of the prior's, tr J(x) J(x)ᵀ / δ at the same method's
δ, at several rotations; and the same for the covariance of the logits' differences, tr(P Σ P) with P = I − 11ᵀ/C,
the part a softmax sees. The prior's trace is the most variance an LLA with that δ can give; the exact LLA gives
close to it wherever J(x) leaves the training Jacobians' span.

Run:  python -m experiments.lla_rotated_mnist.variance_diagnosis --data-dir $ADGP_DATA_DIR
      (reuses .cache/experiments/lla_rotated_mnist: run the study's cells of the seed first, or it trains them;
      writes docs/results/lla_rotated_mnist_variance.json and the block of its .md page;
      ``--report-only`` rewrites the block from the record)
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Dict, List

import numpy as np

from activated_dgp.eigen import jacobian_function
from experiments.harness.artifacts import ArtifactCache, atomic_write_text
from experiments.harness.blocks import write_block_from_record
from experiments.lla_rotated_mnist.cells import LABELS, Config, laplace, map_network, prepare_data

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_NAME, PAGE_NAME = "docs/results/lla_rotated_mnist_variance.json", "docs/results/lla_rotated_mnist_variance.md"
OUTPUT, PAGE = ROOT / OUTPUT_NAME, ROOT / PAGE_NAME
BLOCK = "lla_rotated_mnist_variance"
REPORT_COMMAND = "python -m experiments.lla_rotated_mnist.variance_diagnosis --report-only"
REPORT_BLOCKS = [(PAGE_NAME, BLOCK)]
METHODS = ("last_layer", "kron", "diagonal", "neuralef_10", "neuralef_20", "neuralef_50")
ANGLES = (0, 45, 90, 180)
#: test digits per angle (the study's first ones) and the batch of the prior's Jacobians [B, C, P]
DIGITS, JACOBIAN_BATCH = 200, 25


def centred_traces(covariances: np.ndarray) -> np.ndarray:
    """tr(P Σ P) [N] for covariances Σ [N, C, C], P = I − 11ᵀ/C: the variance of the logits' differences, the part a
    softmax sees (a shift of every logit by the same amount leaves the class probabilities unchanged)."""
    C = covariances.shape[-1]
    return np.trace(covariances, axis1=1, axis2=2) - covariances.sum(axis=(1, 2)) / C


def prior_traces(network, X: np.ndarray) -> tuple:
    """(tr J(x) J(x)ᵀ, tr P J(x) J(x)ᵀ P) [N] each, J over all the network's weights (per-example Jacobians, in
    batches; P as in :func:`centred_traces`)."""
    jacobian = jacobian_function(lambda x: network(x, training=False), network.trainable_variables)
    full, centred = [], []
    for i in range(0, len(X), JACOBIAN_BATCH):
        J = np.asarray(jacobian(X[i:i + JACOBIAN_BATCH]))
        full.append(np.sum(J**2, axis=(1, 2)))
        centred.append(np.sum((J - J.mean(axis=1, keepdims=True)) ** 2, axis=(1, 2)))
    return np.concatenate(full), np.concatenate(centred)


def _table(record: Dict, key: str, what: str) -> List[str]:
    angles = record["angles"]
    lines = ["| method | δ | " + " | ".join(f"{a}°" for a in angles) + " |", "|---|---|" + "---|" * len(angles)]
    prior = {a: np.mean(record[f"prior_{key}"][str(a)]) for a in angles}
    for method, values in record["methods"].items():
        delta = values["prior_precision"]
        cells = [f"{np.mean(values[key][str(a)]):.3g} ({np.mean(values[key][str(a)]) / (prior[a] / delta):.2g})" for a in angles]
        lines.append(f"| {LABELS[method]} | {delta:.3g} | " + " | ".join(cells) + " |")
    return lines + [f"| prior, {what} (δ = 1) | 1 | " + " | ".join(f"{prior[a]:.3g}" for a in angles) + " |"]


def markdown(record: Dict) -> str:
    """Per method: δ, and per angle the mean tr Σ(x) and its share of the prior's tr J Jᵀ / δ; then the same for the
    centred traces (the variance of the logits' differences, :func:`centred_traces`)."""
    lines = [f"Seed {record['seed']}, the first {record['digits']} test digits per angle. Record: `{OUTPUT_NAME}`.", "",
             "**The variance of the logits' differences**, the part a softmax sees: mean over digits of tr(P Σ(x) P), "
             "P = I − 11ᵀ/C, and in brackets its share of the prior's tr(P J(x) J(x)ᵀ P) / δ at the same δ.", ""]
    lines += _table(record, "centred_trace", "tr(P J Jᵀ P)")
    lines += ["", "**The whole latent variance**: mean tr Σ(x), and its share of the prior's tr J(x) J(x)ᵀ / δ.", ""]
    lines += _table(record, "trace", "tr J Jᵀ")
    return "\n".join(lines) + "\n"


def report_from_records(record=None) -> str:
    """Rewrite the page's block from the committed record (or ``record``; ``python -m experiments report``); nothing
    without one."""
    return write_block_from_record(PAGE, BLOCK, markdown, OUTPUT if record is None else record, REPORT_COMMAND)


def main(argv=None) -> Dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--artifacts", default=".cache/experiments/lla_rotated_mnist", help="the study's artifacts (its MAP CNNs, NeuralEF checkpoints)")
    parser.add_argument("--methods", nargs="+", choices=METHODS, default=list(METHODS))
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--report-only", action="store_true", help="rewrite the page's block from the record, fit nothing")
    options = parser.parse_args(argv)
    output = Path(options.output)
    if options.report_only:
        if not report_from_records(output):
            parser.error(f"no record at {output}")
        return json.loads(output.read_text())
    if options.data_dir is None:
        parser.error("--data-dir is needed to fit (or use --report-only)")
    config, seed = Config(), options.seed
    context = SimpleNamespace(artifacts=ArtifactCache(options.artifacts), progress=lambda text: print(text, flush=True))
    data = prepare_data(config, options.data_dir, seed)
    network = map_network(context, config, data, seed)
    tests = {a: data.rotated[config.angles.index(a)][:DIGITS].reshape(DIGITS, -1).astype(np.float64) / 255.0 for a in ANGLES}
    record = json.loads(output.read_text()) if output.is_file() else {}
    if record.get("seed") != seed or record.get("config") != config.digest():
        record = {"seed": seed, "config": config.digest(), "digits": DIGITS, "angles": list(ANGLES), "methods": {}}
    if "prior_centred_trace" not in record:
        priors = {str(a): prior_traces(network, X) for a, X in tests.items()}
        record["prior_trace"] = {a: full.tolist() for a, (full, _) in priors.items()}
        record["prior_centred_trace"] = {a: centred.tolist() for a, (_, centred) in priors.items()}
        atomic_write_text(output, json.dumps(record, indent=1) + "\n")
    for method in options.methods:
        if method in record["methods"]:
            continue
        start = time.process_time()
        checkpoints = context.artifacts.checkpoint_dir("neuralef", [config.digest(), seed, method]) if method.startswith("neuralef_") else None
        la = laplace(method, network, config, seed).fit(data.x_train, data.y_train, checkpoint_dir=checkpoints)
        covariances = {str(a): np.asarray(la.predict_f(X, full_output_cov=True)[1]) for a, X in tests.items()}
        record["methods"][method] = {"prior_precision": float(la.prior_precision), "cpu_seconds": time.process_time() - start,
                                     "trace": {a: np.trace(S, axis1=1, axis2=2).tolist() for a, S in covariances.items()},
                                     "centred_trace": {a: centred_traces(S).tolist() for a, S in covariances.items()}}
        print(f"{method}: δ = {float(la.prior_precision):.3g}, mean tr PΣP at 90° {np.mean(record['methods'][method]['centred_trace']['90']):.3g}", flush=True)
        atomic_write_text(output, json.dumps(record, indent=1) + "\n")  # each finished method is kept
    report_from_records(output)
    return record


if __name__ == "__main__":
    main()
