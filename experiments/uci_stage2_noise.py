"""Diagnostic: does ADGP's stage 2 lose the network's fit because the ELBO raises the noise variance?

    python -m experiments.uci_stage2_noise --dataset energy --splits 2 --data-dir ../shared/data

For each split (the same seeded 90/10 splits and medium budget as ``experiments.uci``) the activated twin is
trained once, converted, and stage 2 is run twice from the same conversion: with the Gaussian noise variance
trained (what ``train_two_stage`` and the benchmark do) and with it fixed at the network's training MSE.
Prints test RMSE / NLPD (standardised targets) of the network and of both DGPs. Results in
docs/results/uci.md ("Where stage 2 goes").
"""

from __future__ import annotations

import argparse
import types

import gpflow

from activated_dgp import dgp_from_keras, train_dgp
from activated_dgp.data import load_regression_dataset
from activated_dgp.metrics import regression_metrics
from experiments.uci import prepare_split
from experiments.uci_methods import BUDGETS, _fit_twin, _network_mean, _training_mse, dgp_mixture


def compare(dataset_name: str, num_splits: int, data_dir=None, budget_name: str = "medium") -> None:
    dataset = load_regression_dataset(dataset_name, data_dir)
    budget = BUDGETS[budget_name]
    for split in range(num_splits):
        data = prepare_split(dataset, split, types.SimpleNamespace(fixed_splits=False, seed=0))
        network = _fit_twin(data.X_train, data.y_train, budget, data.seed)  # stage 1, as the benchmark's NN and ADGP
        train_mse = _training_mse(network, data.X_train, data.y_train)
        nn = regression_metrics(data.y_test, _network_mean(network, data.X_test), train_mse, data.y_scale)
        line = [f"{dataset_name} split {split}: NN RMSE {nn['rmse']:.3f} NLPD {nn['nlpd']:.3f} (training MSE {train_mse:.4f})"]
        for noise in ("trained", "fixed"):
            dgp = dgp_from_keras(network, len(data.X_train), likelihood="gaussian", noise_variance=train_mse).dgp
            if noise == "fixed":
                gpflow.set_trainable(dgp.likelihood_layer.likelihood.variance, False)
            train_dgp(dgp, data.X_train, data.y_train, budget.schedule(budget.dgp_steps, len(data.X_train)))
            scores = regression_metrics(data.y_test, *dgp_mixture(dgp, data.X_test, budget.mc_samples, data.seed), data.y_scale)
            variance = float(dgp.likelihood_layer.likelihood.variance.numpy())
            line.append(f"ADGP noise {noise}: RMSE {scores['rmse']:.3f} NLPD {scores['nlpd']:.3f} (noise {variance:.4f})")
        print(" | ".join(line), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="boston-embedded")
    parser.add_argument("--splits", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--budget", choices=sorted(BUDGETS), default="medium")
    args = parser.parse_args()
    compare(args.dataset, args.splits, args.data_dir, args.budget)
