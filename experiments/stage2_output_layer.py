"""Where does a converted network's extra uncertainty help? The output layer's variance, measured at conversion.

    python -m experiments.stage2_output_layer --dataset yacht,bostonHousing,energy,concrete --splits 2 \
        --data-dir ../shared/data --networks docs/results/uci_long/networks --out docs/results/stage2/output_layer.jsonl

For each (dataset, published split) the UCI benchmark's saved twin network (``experiments.uci`` with
``--budget converged-long`` writes them) is converted and scored on the test part, before any stage-2 step, in
four states chosen on the benchmark's 10 % validation part (no retraining, so a cell takes seconds to minutes):

* ``nn_ts`` — the network with the validation MSE as noise (temperature scaling);
* ``fixed_noise`` — each layer's kernel variance by :func:`activated_dgp.conversion.select_kernel_variances`
  at that fixed noise (the UCI protocol v3);
* ``joint_noise`` — the same, with the output layer's v and the noise searched jointly (``noise_factors``,
  protocol v4);
* ``joint_noise_optimal_q`` — as ``joint_noise``, but at every (v, σ²) of the output layer's grid its q(u)
  covariance is the ELBO-optimal one for the fixed mean (:func:`activated_dgp.conversion.set_optimal_output_covariance`)
  instead of the converter's 1e-5·I: the GP's posterior uncertainty about the output weights.

One JSON line per cell (resumable). docs/results/stage2.md, "Joint noise", reads the records.
"""

from __future__ import annotations

import os
import time
import types
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from experiments.records import ResultStore  # noqa: E402

KEY_FIELDS = ("dataset", "split")


def _scores(dgp, X, y, samples: int = 32):
    from activated_dgp import predictive_log_density
    from experiments.uci_methods import dgp_mixture

    means, _ = dgp_mixture(dgp, X, samples, seed=0)
    nlpd = -float(np.mean(predictive_log_density(dgp, X, y, num_samples=samples, seed=0)))
    return {"nlpd": nlpd, "rmse": float(np.sqrt(np.mean((means.mean(0) - y[:, 0]) ** 2)))}


def _state(dgp):
    return {
        "kernel_variances": [float(layer.kernel.kernel.variance.numpy()) for layer in dgp.f_layers],
        "noise_variance": float(dgp.likelihood_layer.likelihood.variance.numpy()),
    }


def run_cell(name: str, dataset, split: int, budget: str = "converged-long", candidates=None, noise_factors=None) -> dict:
    """One cell's record. ``candidates`` (kernel variances) and ``noise_factors`` narrow the searches' grids
    (default: :func:`select_kernel_variances`' extending grid and :data:`NOISE_FACTORS`; the optimal-q(u) grid
    over the output layer's v is 10^(−6, −5.5, …, 0.5) unless ``candidates`` is given)."""
    from activated_dgp import dgp_from_keras, predictive_log_density
    from activated_dgp.metrics import regression_metrics
    from activated_dgp.conversion import NOISE_FACTORS, rescale_kernel_variance, select_kernel_variances, set_optimal_output_covariance
    from experiments import uci_methods
    from experiments.uci import prepare_split

    data = prepare_split(dataset, split, types.SimpleNamespace(fixed_splits=False, random_splits=False, seed=0))
    network, _ = uci_methods._fit_network("twin", data, uci_methods.BUDGETS[budget], data.seed)
    (X, y), (X_val, y_val) = data.validation_split()
    val_mse = float(np.mean((network(X_val).numpy() - y_val) ** 2))
    record = {"dataset": name, "split": split, "num_validation": len(X_val), "validation_mse": val_mse}
    def network_scores(X_part, y_part):  # N(f(x), validation MSE): temperature scaling
        mean = network(X_part).numpy().T
        return regression_metrics(y_part, mean, np.full_like(mean, val_mse))

    test = network_scores(data.X_test, data.y_test)
    record["nn_ts"] = {"validation_nlpd": network_scores(X_val, y_val)["nlpd"], "nlpd": test["nlpd"], "rmse": test["rmse"]}
    noise_factors = NOISE_FACTORS if noise_factors is None else tuple(noise_factors)
    for variant, factors in (("fixed_noise", None), ("joint_noise", noise_factors)):
        dgp = dgp_from_keras(network, len(X), X=X[:2048], noise_variance=val_mse).dgp
        selection = select_kernel_variances(dgp, X_val, y_val, objective="validation", seed=data.seed, noise_factors=factors, candidates=candidates)
        record[variant] = {"validation_nlpd": -selection.elbo, **_state(dgp), **_scores(dgp, data.X_test, data.y_test)}
    # joint_noise_optimal_q: from the joint_noise state, the output layer's (v, σ²) grid with the optimal q(u)
    layer, likelihood = dgp.f_layers[-1], dgp.likelihood_layer.likelihood
    best = None  # the joint_noise state is a candidate too; below v = 1e-6 the output layer adds nothing measurable
    grid = list(10.0 ** np.arange(-6.0, 0.51, 0.5)) if candidates is None else list(candidates)
    for v in [record["joint_noise"]["kernel_variances"][-1]] + grid:
        rescale_kernel_variance(layer, float(v))
        for factor in noise_factors:
            if best is None:  # first: exactly the joint_noise state's noise
                factor = record["joint_noise"]["noise_variance"] / val_mse
            likelihood.variance.assign(val_mse * factor)
            set_optimal_output_covariance(dgp, X)
            score = -float(np.mean(predictive_log_density(dgp, X_val, y_val, num_samples=16, seed=data.seed)))
            if best is None or score < best[0]:
                best = (score, float(v), float(val_mse * factor))
    rescale_kernel_variance(layer, best[1])
    likelihood.variance.assign(best[2])
    set_optimal_output_covariance(dgp, X)
    record["joint_noise_optimal_q"] = {"validation_nlpd": best[0], **_state(dgp), **_scores(dgp, data.X_test, data.y_test)}
    return record


VARIANTS = ("nn_ts", "fixed_noise", "joint_noise", "joint_noise_optimal_q")


def report(records) -> str:
    """Markdown table: per cell the test NLPD of each state, and the joint search's output-layer v and σ² factor."""
    lines = [
        "| set, split (validation rows) | NN+TS | v at fixed σ² (v3) | v and σ² jointly (v4) | v4 + optimal q(u) | v4's output v, σ² / validation MSE |",
        "|---|---|---|---|---|---|",
    ]
    for r in records:
        joint = r["joint_noise"]
        cells = " | ".join(f"{r[k]['nlpd']:.3f}" for k in VARIANTS)
        lines.append(
            f"| {r['dataset']} {r['split']} ({r['num_validation']}) | {cells} | "
            f"{joint['kernel_variances'][-1]:.1e}, {joint['noise_variance'] / r['validation_mse']:.2f} |"
        )
    return "\n".join(lines)


def main(argv=None) -> None:
    from activated_dgp.data import load_regression_dataset
    from experiments import uci_methods
    from experiments.uci import canonical_datasets

    from experiments.harness.cli import make_parser, shared_option

    parser = make_parser("python -m experiments.stage2_output_layer", __doc__)
    parser.add_argument("--dataset", default="yacht", help="comma list of UCI sets")
    parser.add_argument("--splits", type=int, default=2, help="published splits 0 … K−1 per set")
    shared_option(parser, "--data-dir", help="directory holding uci/<folder> (default $ADGP_DATA_DIR)")
    parser.add_argument("--networks", default="docs/results/uci_long/networks", help="the UCI benchmark's saved networks")
    parser.add_argument("--out", default="docs/results/stage2/output_layer.jsonl")
    parser.add_argument("--budget", default="converged-long", choices=sorted(uci_methods.BUDGETS),
                        help="the UCI runner's budget whose saved networks are read (default converged-long)")
    shared_option(parser, "--report-only", help="print the Markdown table of the records")
    args = parser.parse_args(argv)
    if args.report_only:
        print(report(ResultStore(Path(args.out), KEY_FIELDS).records()))
        return
    uci_methods.NETWORK_DIR = Path(args.networks)
    uci_methods.SAVED_NETWORKS_ONLY = True  # never trains: a missing network is an error, not a silent refit
    store = ResultStore(Path(args.out), KEY_FIELDS)
    names = canonical_datasets(args.dataset.split(","))
    for name in names:
        dataset = load_regression_dataset(name, data_dir=args.data_dir)
        for split in range(args.splits):
            if store.done(dataset=name, split=split):
                continue
            start = time.perf_counter()
            try:
                record = run_cell(name, dataset, split, args.budget)
            except uci_methods.NetworkMissing as error:
                print(f"{name} split {split}: skipped, {error}", flush=True)
                continue
            record["seconds"] = time.perf_counter() - start
            store.append(record)
            print(
                f"{name} split {split}: test NLPD nn_ts {record['nn_ts']['nlpd']:.3f}, fixed {record['fixed_noise']['nlpd']:.3f}, "
                f"joint {record['joint_noise']['nlpd']:.3f}, joint+optimal q {record['joint_noise_optimal_q']['nlpd']:.3f} "
                f"({record['seconds']:.0f} s)", flush=True,
            )


if __name__ == "__main__":
    main()
