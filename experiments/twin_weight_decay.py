"""Does an L2 penalty on the twin network close its accuracy gap to the classic DGP? (issue 12)

Where the classic DGP's NLPD beats ADGP's, half or more of the margin is accuracy that the converted model
inherits from its twin network (docs/results/stage2.md, "Why ADGP trails the classic DGP"). The twin is
trained on plain MSE with early stopping, as the paper trains its networks. This study trains the same
seeded twin with a penalty λ Σ θ² on all its weights added to the minibatch MSE, for each λ in a grid,
under the UCI protocol's converged-long schedule (same fit/validation rows, same early stopping on the
validation MSE), chooses λ by the validation MSE, and reports the chosen network's test RMSE beside the
unpenalised twin's (λ = 0, the UCI benchmark's NN) and the classic DGP's from the UCI records.

    python -m experiments.twin_weight_decay --dataset yacht,bostonHousing,wine-quality-red,concrete --splits 2 \\
        --data-dir ../shared/data --out docs/results/stage2/twin_weight_decay.jsonl
    python -m experiments.twin_weight_decay --report-only --out docs/results/stage2/twin_weight_decay.jsonl

One record per (dataset, split, λ); the run is resumable.
"""

from __future__ import annotations

import time
import types
from pathlib import Path

import numpy as np

from experiments.records import ResultStore

KEY_FIELDS = ("dataset", "split", "weight_decay")
WEIGHT_DECAYS = (0.0, 1e-5, 1e-4, 1e-3)


def fit_penalised_twin(data, weight_decay: float, budget):
    """The UCI benchmark's twin (same seed, fit part and, for a converged budget, early stopping on the
    validation MSE) trained on MSE + ``weight_decay`` · Σ θ² over all its trainable weights. Returns
    (network, training history)."""
    import tensorflow as tf

    from activated_dgp.training import train_network
    from experiments import uci_methods

    if not (np.isfinite(weight_decay) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a finite number ≥ 0, got {weight_decay!r}")
    (X, y), validation = uci_methods._fit_parts(data, budget)
    tf.random.set_seed(data.seed)
    network = uci_methods.build_twin_network(X.shape[1], data.seed)
    network(X[:1])
    if weight_decay > 0:
        for weight in network.trainable_weights:
            network.add_loss(lambda weight=weight: weight_decay * tf.reduce_sum(tf.square(weight)))
    history = train_network(network, X, y, "gaussian", budget.schedule(budget.nn_steps, len(X)), validation_data=validation)
    return network, history


def run_cell(name: str, dataset, split: int, weight_decay: float, budget: str = "converged-long") -> dict:
    from experiments import uci_methods
    from experiments.uci import prepare_split

    data = prepare_split(dataset, split, types.SimpleNamespace(fixed_splits=False, random_splits=False, seed=0))
    if not uci_methods.BUDGETS[budget].converged:
        raise ValueError(f"the study chooses λ on the validation part: give a converged budget, not {budget!r}")
    network, history = fit_penalised_twin(data, weight_decay, uci_methods.BUDGETS[budget])
    (X, y), (X_val, y_val) = data.validation_split()

    def mse(X_part, y_part):
        return float(np.mean((network(X_part).numpy()[:, 0] - y_part[:, 0]) ** 2))

    return {
        "dataset": name, "split": split, "weight_decay": float(weight_decay), "budget": budget,
        "train_mse": mse(X, y), "validation_mse": mse(X_val, y_val), "test_rmse": float(np.sqrt(mse(data.X_test, data.y_test))),
        "best_step": history.get("best_step"), "steps_run": history.get("steps_run"),
    }


def chosen(records):
    """Per (dataset, split): the λ = 0 record and the record with the lowest validation MSE."""
    cells = {}
    for record in records:
        cells.setdefault((record["dataset"], record["split"]), []).append(record)
    out = {}
    for cell, rows in cells.items():
        plain = [r for r in rows if r["weight_decay"] == 0.0]
        if plain:
            out[cell] = (plain[0], min(rows, key=lambda r: r["validation_mse"]))
    return out


def report(records, uci_records=()) -> str:
    """Markdown: per split the unpenalised and the validation-chosen twin's test RMSE (standardised), and
    the classic DGP's from ``uci_records`` (the current protocol's, where present)."""
    dgp = {(r["dataset"], r["split"]): r["rmse"] for r in uci_records if r.get("method") == "dgp"}
    lines = ["| set, split | twin, λ = 0 | chosen λ | twin, chosen λ | classic DGP |", "|---|---|---|---|---|"]
    for (name, split), (plain, best) in sorted(chosen(records).items()):
        reference = dgp.get((name, split))
        lines.append(f"| {name} {split} | {plain['test_rmse']:.4f} | {best['weight_decay']:g} | {best['test_rmse']:.4f} | "
                     f"{'—' if reference is None else f'{reference:.4f}'} |")
    return "\n".join(lines)


def _uci_records(path: Path, budget: str = "converged-long"):
    """The UCI benchmark's records of ``budget`` under the current protocol (none when there are none)."""
    from experiments.uci import load_records
    from experiments.uci_methods import BUDGETS

    try:
        return load_records(path.parent, BUDGETS[budget].key())
    except (FileNotFoundError, ValueError):
        return []


def main(argv=None) -> None:
    from activated_dgp.data import load_regression_dataset
    from experiments.uci import canonical_datasets

    from experiments.harness.cli import make_parser, shared_option

    parser = make_parser("python -m experiments.twin_weight_decay", __doc__)
    parser.add_argument("--dataset", default="yacht", help="comma list of UCI sets")
    parser.add_argument("--splits", type=int, default=2, help="published splits 0 … K−1 per set")
    parser.add_argument("--weight-decays", default=",".join(f"{w:g}" for w in WEIGHT_DECAYS), help="comma list of λ ≥ 0")
    shared_option(parser, "--data-dir", help="directory holding uci/<folder> (default $ADGP_DATA_DIR)")
    parser.add_argument("--out", default="docs/results/stage2/twin_weight_decay.jsonl")
    parser.add_argument("--uci-records", default="docs/results/uci_long/records.jsonl", help="for the classic DGP's column")
    parser.add_argument("--budget", default="converged-long", help="the UCI runner's budget (default converged-long)")
    shared_option(parser, "--report-only", help="print the Markdown table of the records")
    args = parser.parse_args(argv)
    store = ResultStore(Path(args.out), KEY_FIELDS)
    if not args.report_only:
        try:
            weight_decays = [float(w) for w in args.weight_decays.split(",")]
        except ValueError:
            raise SystemExit(f"--weight-decays must be a comma list of numbers, got {args.weight_decays!r}")
        for name in canonical_datasets(args.dataset.split(",")):
            dataset = load_regression_dataset(name, data_dir=args.data_dir)
            for split in range(args.splits):
                for weight_decay in weight_decays:
                    if store.done(dataset=name, split=split, weight_decay=weight_decay):
                        continue
                    start = time.perf_counter()
                    record = run_cell(name, dataset, split, weight_decay, args.budget)
                    record["seconds"] = time.perf_counter() - start
                    store.append(record)
                    print(f"{name} split {split} λ={weight_decay:g}: validation MSE {record['validation_mse']:.4f}, "
                          f"test RMSE {record['test_rmse']:.4f} ({record['seconds']:.0f} s)", flush=True)
    print(report(store.records(), _uci_records(Path(args.uci_records), args.budget)))


if __name__ == "__main__":
    main()
