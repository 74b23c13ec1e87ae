"""What the rotated-MNIST study runs: one cell per (dataset, model, seed), its command-line options, and
:func:`run_cell`, which trains (or loads from the artifact cache) what the cell's model needs
(:mod:`experiments.rotated_mnist.models`) and evaluates it at every angle."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Dict, List, Union

import numpy as np

from experiments.harness.artifacts import ArtifactCache, atomic_write_text
from experiments.harness.store import ResultStore, portable_path
from experiments.harness.study import records_path
from experiments.rotated_mnist import models, plain
from experiments.harness.protocol import SETTINGS_FIELD
from experiments.rotated_mnist.config import (ALL_MODELS, ANGLES, CONTROLS, KERNEL_VARIANCE_CHOICES, KEY, LABELS,
                                              LATER_DEFAULTS, LLA_MODELS, METRICS, MODELS, PLAIN_MODELS, REMEDIES, STAGE2_FIT, Config,
                                              config_digest, log, newest_protocol, protocol, upgrade)
from experiments.rotated_mnist.models import Splits


def PROTOCOL(options):
    """A run's protocol (:func:`~experiments.rotated_mnist.config.protocol`: the cell definition, the configuration,
    the stage-2 fit of the models it changed), so records of another configuration or cell definition are never
    mixed in. ``--report-only`` and ``--compare`` show the newest protocol in the records (the page describes the
    latest run)."""
    if options.report_only or options.compare:
        return newest_protocol(records_path(options))
    return protocol(config_from(options))


class RotatedCache(ArtifactCache):
    """The study's artifacts (trained networks, DGPs, per-angle features, evaluation progress) under the file names
    the study has always used (``<dataset>_<config digest>_seed<s>_<what>``, so checkpoints made before the study
    moved onto the harness are reused), and the objects the cells of the current seed share in memory (its data
    splits and the networks and DGPs no cell changes), dropped when another seed starts."""

    def __init__(self, root, rotated_dir):
        super().__init__(root, name=lambda kind, key, suffix: f"{key}{suffix}")
        self.rotated_dir = Path(rotated_dir)
        self.seed, self.shared = None, {}

    def checkpoint(self, key: str) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        return self.path("checkpoint", key, "")

    def for_seed(self, seed: int, what, build):
        if self.seed != seed:
            self.seed, self.shared = seed, {}
        if what not in self.shared:
            self.shared[what] = build()
        return self.shared[what]


def artifact_cache(options) -> RotatedCache:
    """``--artifacts``, else ``<--cache-dir>/rotated_mnist`` (default ~/.cache/activated_dgp/rotated_mnist, where
    the networks of the committed runs were checkpointed)."""
    from activated_dgp.data.mnist import default_cache_dir

    cache_dir = Path(options.cache_dir) if options.cache_dir else default_cache_dir()
    return RotatedCache(Path(options.artifacts) if options.artifacts else cache_dir / "rotated_mnist", cache_dir / "rotated")


def config_from(options) -> Config:
    lla = {name: getattr(options, name, LATER_DEFAULTS[name]) for name in ("lla_eigenpairs", "lla_neuralef_steps", "convertible_steps")}
    remedies = dict(LATER_DEFAULTS, ensemble_size=options.ensemble_size, **lla, **(REMEDIES if options.stage2_remedies else {}))
    if options.kernel_variance is not None:
        remedies["kernel_variance"] = options.kernel_variance
    if options.dgp_patience is not None:
        remedies["dgp_patience"] = options.dgp_patience
    remedies.update(far_field=bool(options.far_field), kernel_variance_floor=options.kernel_variance_floor)
    if len(options.angles) < 2:
        raise ValueError("give at least two --angles")
    return Config(
        dataset=options.dataset, epochs=options.epochs, dgp_epochs=options.dgp_epochs if options.dgp_epochs is not None else options.epochs,
        train_size=options.train_size, test_size=options.test_size, dgp_samples=options.dgp_samples,
        dropout_samples=options.dropout_samples, angles=tuple(options.angles), truncation_level=options.truncation_level, **remedies,
    )


def cells(options) -> List[Dict]:
    if options.compare:
        return []
    return [dict(dataset=options.dataset, model=m, seed=s) for s in options.seeds for m in selected_models(options)]


def selected_models(options) -> List[str]:
    models = list(options.models)
    extra = (["adgp_ft"] if options.finetune_conv else []) + (list(CONTROLS) if options.controls else [])
    extra += list(LLA_MODELS) if getattr(options, "lla", False) else []
    extra += list(PLAIN_MODELS) if getattr(options, "plain_cnn", False) else []
    return models + [m for m in extra if m not in models]


def prepare(options, context) -> None:
    """One records folder holds one configuration per dataset (its page describes one): refuse another."""
    if options.compare:
        return
    config = config_from(options)
    store = ResultStore(records_path(options), KEY, upgrade=upgrade)
    for record in store.all_records():
        settings = record.get(SETTINGS_FIELD, {}).get("shared", record["config"])
        if record.get("dataset") == config.dataset and config_digest(settings) != config.digest():
            raise ValueError(
                f"{store.path} holds {config.dataset} records made with another configuration "
                f"({record.get('config')}); use another --out or the same flags"
            )


def _splits(options, context, config: Config, seed: int) -> Splits:
    return context.artifacts.for_seed(seed, "splits", lambda: models.prepare_data(config, options.data_dir, seed, context.artifacts.rotated_dir))


def _network(context, config: Config, splits: Splits, seed: int, member: int = 0, dropout: float = 0.0):
    """Stage 1 of ``nn`` (member 0), of deep-ensemble member ``member`` or of the dropout network (shared in memory
    by the seed's cells; no cell changes it)."""
    stage1 = f"{config.dataset}_{config.stage1_digest()}_seed{seed}"
    name = "_dropout" if dropout > 0 else ("_nn" if member == 0 else f"_nn_member{member}")

    def build():
        if dropout == 0:
            log(f"seed {seed}: stage 1, NN" + (f" (ensemble member {member}, seed {models.member_seed(seed, member)})" if member else ""))
        else:
            log(f"seed {seed}: stage 1, NN + Dropout({config.dropout})")
        return models.trained_classifier(config, splits, models.member_seed(seed, member), dropout, context.artifacts.checkpoint(stage1 + name))

    return (stage1 + name, *context.artifacts.for_seed(seed, ("network", member, dropout), build))


def _adgp(context, config: Config, splits: Splits, seed: int, member: int = 0):
    """``adgp``'s DGP (member 0) or ensemble member ``member``'s, converted and trained with frozen conv layers."""
    key, extractor, head, seconds = _network(context, config, splits, seed, member)
    tag = f"{config.dataset}_{config.digest()}_seed{seed}"

    def build():
        log(f"seed {seed}: stage 2, ADGP (ELBO, convolutional layers frozen)" + (f", ensemble member {member}" if member else ""))
        name = "_adgp" if member == 0 else f"_adgp_member{member}"
        return models.trained_adgp(config, splits, extractor, head, models.member_seed(seed, member), context.artifacts.checkpoint(tag + name))

    dgp, info = context.artifacts.for_seed(seed, ("adgp", member), build)
    return key, extractor, dgp, seconds, info


def run_cell(cell, options, context) -> Dict:
    """Train (or load) what the cell's model needs, evaluate it at every angle, return its record. ``eval_seconds``
    is the model's own prediction and scoring time, ``feature_seconds`` the time to compute (or load from the cache)
    the conv features it reads, which other models of the seed share."""
    config, seed, model = config_from(options), cell["seed"], cell["model"]
    splits = _splits(options, context, config, seed)
    tag = f"{config.dataset}_{config.digest()}_seed{seed}"
    samples = config.dgp_samples
    info: Dict = {}
    dgps = []  # the model's DGPs, for the far-field-off scoring
    if model in ("nn", "nn_ts"):
        key, extractor, head, info["train_seconds"] = _network(context, config, splits, seed)
        groups = [(key, extractor)]
        scale = 1.0
        if model == "nn_ts":
            scale = info["temperature"] = models.fit_temperature(head(models.features(extractor, splits.x_val)).numpy(), splits.y_val)
            log(f"  temperature T = {scale:.3f} (fitted on {len(splits.x_val)} validation images)")
        predict = lambda feats: models.softmax(head(feats[0]).numpy() / scale)  # noqa: E731
    elif model == "nn_dropout":
        key, extractor, head, info["train_seconds"] = _network(context, config, splits, seed, dropout=config.dropout)
        groups = [(key, extractor)]
        predict = lambda feats: models.dropout_probabilities(head, feats[0], config.dropout_samples)  # noqa: E731
    elif model == "adgp":
        key, extractor, dgp, seconds, dgp_info = _adgp(context, config, splits, seed)
        info = {"train_seconds": seconds + dgp_info["seconds"], **dgp_info}
        dgps = [dgp]
        groups = [(key, extractor)]
        predict = lambda feats: models.adgp_probabilities(dgp, feats[0], samples, seed)  # noqa: E731
    elif model == "adgp_ft":
        log(f"seed {seed}: stage 2, ADGP (ELBO, convolutional layers fine-tuned)")
        stage1 = f"{config.dataset}_{config.stage1_digest()}_seed{seed}"
        extractor, head, seconds = models.trained_classifier(config, splits, seed, 0.0, context.artifacts.checkpoint(stage1 + "_nn"))  # a copy to tune
        name = f"{tag}_adgp_ft_{STAGE2_FIT}"  # checkpoints of another stage-2 fit are never read back
        dgp, ft_info = models.trained_adgp(config, splits, extractor, head, seed, context.artifacts.checkpoint(name), finetune=True)
        info = {"train_seconds": seconds + ft_info["seconds"], **ft_info}
        dgps = [dgp]
        groups = [(name, extractor)]
        predict = lambda feats: models.adgp_probabilities(dgp, feats[0], samples, seed)  # noqa: E731
    elif model in ("nn_ft", "nn_ts_ft", "nn_dropout_ft"):
        dropout = config.dropout if model == "nn_dropout_ft" else 0.0
        source, _, _, _ = _network(context, config, splits, seed, dropout=dropout)
        name = tag + ("_dropout_ft" if dropout else "_nn_ft") + f"_{STAGE2_FIT}"  # another fit's checkpoints are never read
        log(f"seed {seed}: {LABELS[model]}: stage 1 + the extra epochs of ADGP's stage 2 (conv layers trained)")
        extractor, head, seconds, ft = context.artifacts.for_seed(
            seed, name, lambda: models.finetuned_classifier(config, splits, seed, dropout, context.artifacts.checkpoint(source),
                                                     context.artifacts.checkpoint(name)))
        info = {"train_seconds": seconds + ft["seconds"], "extra_loss": ft["loss"], "extra": ft["schedule"],
                "adgp_stage2": models.stage2_settings(config)}
        if "best_epoch" in ft:
            info.update(extra_validation=ft["validation_nlpd"], extra_best_epoch=ft["best_epoch"], extra_epochs_run=ft["epochs_run"])
        groups = [(name, extractor)]
        if model == "nn_dropout_ft":
            predict = lambda feats: models.dropout_probabilities(head, feats[0], config.dropout_samples)  # noqa: E731
        else:
            scale = 1.0
            if model == "nn_ts_ft":  # the temperature is fitted after the extra epochs
                scale = info["temperature"] = models.fit_temperature(head(models.features(extractor, splits.x_val)).numpy(), splits.y_val)
            predict = lambda feats: models.softmax(head(feats[0]).numpy() / scale)  # noqa: E731
    elif model == "ensemble":
        members = [_network(context, config, splits, seed, k) for k in range(config.ensemble_size)]
        info = {"train_seconds": sum(m[3] for m in members), "member_seeds": [models.member_seed(seed, k) for k in range(config.ensemble_size)]}
        groups = [(key, extractor) for key, extractor, _, _ in members]
        predict = lambda feats: models.ensemble_probabilities([models.softmax(m[2](f).numpy()) for m, f in zip(members, feats)])  # noqa: E731
    elif model == "adgp_ensemble":
        members = [_adgp(context, config, splits, seed, k) for k in range(config.ensemble_size)]
        info = {"train_seconds": sum(m[3] + m[4]["seconds"] for m in members),
                "member_seeds": [models.member_seed(seed, k) for k in range(config.ensemble_size)],
                "members": [{k: v for k, v in m[4].items() if k != "elbo_loss"} for m in members]}
        groups = [(m[0], m[1]) for m in members]
        dgps = [m[2] for m in members]
        predict = lambda feats: models.ensemble_probabilities(  # noqa: E731
            [models.adgp_probabilities(m[2], f, samples, models.member_seed(seed, k)) for k, (m, f) in enumerate(zip(members, feats))])
    elif model in LLA_MODELS:
        key, extractor, head, seconds = _network(context, config, splits, seed)
        groups = [(key, extractor)]
        predict, info = models.lla_prediction(context, config, splits, extractor, head, seed, model, context.artifacts.checkpoint(f"{tag}_{model}"))
        info["train_seconds"] = seconds + info["lla_seconds"]
    elif model in PLAIN_MODELS:
        groups, predict, info = plain.prediction(context, config, splits, seed, model, tag)
    else:
        raise ValueError(f"unknown model {model!r}; choose from {', '.join(ALL_MODELS)}")
    results = evaluate(context, config, splits, f"{tag}_{model}", groups, predict)
    if config.far_field and dgps:
        results.update(far_field_off_results(context, config, splits, f"{tag}_{model}", groups, predict, dgps))
    data_root = options.data_dir or os.environ.get("ADGP_DATA_DIR")
    return dict(
        angles=list(config.angles), **results, **info, config=config.as_record(),
        train_source=portable_path(splits.train_source, data_root), test_source=portable_path(splits.test_source, data_root),
        command=options.command, train_size=len(splits.x_train), validation_size=len(splits.x_val), num_test=len(splits.y_test),
    )


def far_field_off_results(context, config: Config, splits: Splits, progress_key: str, groups, predict, dgps) -> Dict:
    """The same fitted model scored at every angle with every DGP's far-field residual switched off
    (:func:`activated_dgp.deep.far_field.far_field_switched_off`, exactly zero), the same features and samples: the
    paired "without" of the far-field residual, stored as ``far_field_off`` (metric → per-angle list)."""
    from contextlib import ExitStack

    from activated_dgp.deep.far_field import far_field_switched_off

    with ExitStack() as stack:
        for dgp in dgps:
            stack.enter_context(far_field_switched_off(dgp))
        off = evaluate(context, config, splits, progress_key + "_far_field_off", groups, predict)
    return {"far_field_off": {metric: off[metric] for metric in METRICS}, "far_field_off_eval_seconds": off["eval_seconds"]}


def evaluate(context, config: Config, splits: Splits, progress_key: str, groups, predict) -> Dict:
    """Every angle's metrics of ``predict([features of each group's extractor])`` (probabilities [T, 10]); the
    features per (extractor, angle) come from the artifact cache, the finished angles of an interrupted
    evaluation from its progress file (the key's digest covers the angles and test set)."""
    from activated_dgp.metrics import classification_metrics

    progress = context.artifacts.checkpoint(progress_key + "_evaluation.json")
    state = {"results": {metric: [] for metric in METRICS}, "eval_seconds": 0.0, "feature_seconds": 0.0}
    if progress.is_file():
        state = json.loads(progress.read_text())
        log(f"  resumed the evaluation of {progress_key}: {len(state['results'][METRICS[0]])} angles done")
    for index, angle in enumerate(config.angles):
        if index < len(state["results"][METRICS[0]]):
            continue
        start = time.time()
        feats = [angle_features(context, key, extractor, splits, index, angle) for key, extractor in groups]
        state["feature_seconds"] += time.time() - start
        start = time.time()
        scores = classification_metrics(predict(feats), splits.y_test)
        state["eval_seconds"] += time.time() - start
        for metric in METRICS:
            state["results"][metric].append(scores[metric])
        log(f"  {progress_key} angle {angle:3d}°: acc {scores['accuracy']:.3f} tll {scores['log_likelihood']:.3f}")
        atomic_write_text(progress, json.dumps(state))  # an interrupted write leaves the previous angle's file intact
    return {**state["results"], "eval_seconds": state["eval_seconds"], "feature_seconds": state["feature_seconds"]}


def angle_features(context, key: str, extractor, splits: Splits, index: int, angle) -> np.ndarray:
    """The conv features [T, 1024] of the test images rotated by ``angle`` (saved as float32, the extractor's own
    precision, so the copy is exact), shared by the models reading the same extractor; with ``extractor`` None the
    rotated test images themselves, [T, 784] in [0, 1] (float32, not cached)."""
    if extractor is None:
        return models.as_inputs(splits.rotated[index])
    saved = context.artifacts.get_or_build(
        "features", f"{key}_features_{angle}deg", ".npy", build=lambda: extractor.predict(models.as_inputs(splits.rotated[index]), batch_size=1000, verbose=0),
        save=lambda array, path: np.save(path, array), load=np.load)
    return np.asarray(saved).astype(np.float64)


# ---------------------------------------------------------------- command line


def kernel_variance_option(text: str) -> Union[str, float]:
    """--kernel-variance: 'validation', 'elbo' or a positive number (argparse reports anything else)."""
    if text in KERNEL_VARIANCE_CHOICES:
        return text
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (np.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number or one of {', '.join(KERNEL_VARIANCE_CHOICES)}, got {text!r}")
    return value


def patience_option(text: str) -> int:
    """--dgp-patience: an integer ≥ 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer ≥ 1 (epochs), got {text!r}")
    return value


def add_options(parser) -> None:
    parser.add_argument("--dataset", choices=("mnist", "fashion_mnist"), default="mnist")
    parser.add_argument("--cache-dir", default=None,
                        help="rotated test sets, and the artifacts when --artifacts is not given (default ~/.cache/activated_dgp)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--models", nargs="+", choices=ALL_MODELS, default=[m for m in MODELS if m != "adgp_ft"])
    parser.add_argument("--finetune-conv", action="store_true",
                        help="also run adgp_ft: stage 2 trains the convolutional layers with the DGP (measured against adgp, frozen)")
    parser.add_argument("--controls", action="store_true",
                        help=f"also run the controls (does the gain come from the conversion?): {', '.join(CONTROLS)}")
    parser.add_argument("--ensemble-size", type=int, default=Config.ensemble_size, help="members of the deep ensembles")
    parser.add_argument("--lla", action="store_true",
                        help=f"also run the linearised-Laplace rows on nn's network: {', '.join(LLA_MODELS)}")
    parser.add_argument("--plain-cnn", action="store_true",
                        help=f"also run the plain tf-keras CNN (ReLU, softmax head) and the library's conversions of it: {', '.join(PLAIN_MODELS)}")
    parser.add_argument("--convertible-steps", type=int, default=Config.convertible_steps,
                        help="make_convertible's fine-tuning steps in plain_cnn_convertible_adgp (default: its own)")
    parser.add_argument("--lla-eigenpairs", type=int, default=Config.lla_eigenpairs, help="k of lla_neuralef")
    parser.add_argument("--lla-neuralef-steps", type=int, default=Config.lla_neuralef_steps, help="NeuralEF steps of lla_neuralef")
    parser.add_argument("--truncation-level", type=int, default=Config.truncation_level, help="Ñ of the activated GP layers")
    parser.add_argument("--epochs", type=int, default=Config.epochs, help="stage-1 (network) epochs")
    parser.add_argument("--dgp-epochs", type=int, default=None,
                        help="stage-2 (ELBO) epochs, and the extra epochs of the *_ft controls; default --epochs")
    parser.add_argument("--train-size", type=int, default=None, help="training images used (train + validation); default all")
    parser.add_argument("--test-size", type=int, default=None, help="test images per angle; default all 10,000")
    parser.add_argument("--dgp-samples", type=int, default=Config.dgp_samples)
    parser.add_argument("--dropout-samples", type=int, default=Config.dropout_samples)
    parser.add_argument("--angles", type=int, nargs="+", default=list(ANGLES))
    parser.add_argument("--kernel-variance", type=kernel_variance_option, default=None,
                        help="stage 2, each GP layer's kernel variance at conversion, mean propagation kept: 'validation' "
                             "(remedy a2: chosen on the validation images' log density), 'elbo' (a) or a positive number; default 1")
    parser.add_argument("--dgp-patience", type=patience_option, default=None,
                        help="stage 2 early stopping (remedy e): stop after this many epochs without a better validation NLPD "
                             "and restore the best epoch's parameters (conv layers included for adgp_ft); default off")
    parser.add_argument("--far-field", action="store_true",
                        help="give each ADGP's output layer the far-field residual; records also score the same fit without it")
    parser.add_argument("--kernel-variance-floor", type=float, default=None,
                        help="with --kernel-variance validation/elbo: never choose a v below this (the floor on v)")
    parser.add_argument("--stage2-remedies", action="store_true",
                        help=f"the stage-2 remedies of docs/results/stage2.md: --kernel-variance {REMEDIES['kernel_variance']} "
                             f"--dgp-patience {REMEDIES['dgp_patience']} (an explicit --kernel-variance / --dgp-patience wins)")
    parser.add_argument("--doc", default=None, help="results markdown whose generated block is rewritten (default <out>.md)")
    parser.add_argument("--figure", default=None, help="figure to write (default <out>/rotated_mnist.png; with --compare: none)")
    parser.add_argument("--compare", nargs="+", metavar="DIR[:MODEL,…]", default=None,
                        help="print a table setting these records directories side by side (optionally only the named "
                             "models of each; only the records of --seeds) and draw --figure; nothing is run")
    parser.add_argument("--block", default=None, help="with --compare and --doc: write the table into this generated block of --doc")
    parser.add_argument("--agreement", action="store_true",
                        help="with --compare of two runs of the same models (a rerun): per model, at how many angles the "
                             "seed means agree within the seed standard deviation")
