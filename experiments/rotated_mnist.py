"""Rotated MNIST: dataset shift by rotating the test digits 0°…180° (Dutordoir et al., 2021, Sec. 5.3, Fig. 8, E.2).

    python -m experiments rotated_mnist --data-dir ../shared/data --out docs/results/rotated_mnist \\
        --seeds 0 1 2 --epochs 10

(``python -m experiments.rotated_mnist …`` is the same command.) Models (appendix E.2): a CNN feature extractor
conv(32, 5)+maxpool(2), conv(64, 5)+maxpool(2) (ReLU, valid padding, 1024 features) followed by a dense part of two
layers of 128 Softplus units and 10 heads. The dense part is the activated network twin of
:func:`activated_dgp.build_activated_nn` — [ActivatedLayer(128), Dense(128, no bias), ActivatedLayer(128),
Dense(10, no bias)] — so that it converts exactly to an activated DGP.

* ``nn``: the CNN + twin trained on cross-entropy (Adam, minibatch 256).
* ``nn_dropout``: the same with Dropout before each activated layer, trained separately and evaluated by
  Monte Carlo dropout (``--dropout-samples`` passes).
* ``nn_ts``: ``nn`` with its logits divided by a temperature T fitted on the held-out validation split by
  minimising the NLL (Guo et al., 2017).
* ``adgp``: ``nn``'s dense part converted to two activated GP layers (ZonalArcCosine + Softplus
  ActivationFeature, :func:`activated_dgp.dgp_from_keras`, Softmax likelihood) and trained further on the ELBO
  with the convolutional layers FROZEN at their stage-1 values (the DGP is trained on their features).
  Predictions average ``--dgp-samples`` samples propagated through the DGP.
* ``adgp_ft`` (``--finetune-conv``): as ``adgp``, but stage 2 trains the convolutional layers together with
  the DGP on the ELBO (:func:`finetune_dgp_and_extractor`), to measure fine-tuning against freezing.

Controls (issue 36, ``--controls``): does ADGP's gain come from the conversion or from more training / averaging?

* ``nn_ft``, ``nn_ts_ft``, ``nn_dropout_ft``: after stage 1 the network (conv layers and head) gets the extra
  epochs of ``adgp_ft``'s stage 2 — the same :func:`stage2_fit`: ``--dgp-epochs`` epochs of Adam at
  ``dgp_learning_rate``, the same minibatches and early stopping — on its own cross-entropy (dropout active for
  the dropout net), then is evaluated as ``nn`` / ``nn_ts`` (T fitted after the extra epochs) / ``nn_dropout``.
  Each record holds the schedule its fit used (``extra``) and ADGP's from the same configuration (``adgp_stage2``).
* ``ensemble``: a deep ensemble (Lakshminarayanan et al., 2017) of ``--ensemble-size`` (5) networks trained as
  ``nn`` from independent seeds (:func:`member_seed`; member 0 is ``nn``'s network); the predictive is the mean
  of the members' softmax probabilities (:func:`ensemble_probabilities`).
* ``adgp_ensemble``: every member converted and trained through stage 2 as ``adgp`` (frozen conv layers; member 0
  is ``adgp``'s DGP), predicting with the mean of the members' class probabilities.

LLA rows (issue 33, ``--lla``; not run by default): the linearised Laplace approximation
(:class:`activated_dgp.eigen.LinearisedLaplace`, softmax likelihood) of ``nn``'s own trained network, so that its
MAP is the ``nn`` row and the rows are paired: ``lla_last_layer`` (exact GGN over the last Dense layer, prior
precision by the Laplace evidence), ``lla_diagonal`` (diagonal GGN, evidence) and ``lla_neuralef`` (eq. 22 of the
NeuralEF paper with the top-k NTK eigenfunctions, prior precision on the validation images); see
:func:`lla_prediction` for which parameters they cover and why.

Stage-2 remedies (docs/results/stage2.md), for ``adgp`` and ``adgp_ft`` alike, on the held-out validation
images (the ``--validation-fraction`` part of the training images, which NN + TS also uses):

* ``--kernel-variance validation`` (a2): each GP layer's kernel variance chosen on the validation log density
  with the mean propagation kept (:func:`activated_dgp.training.select_kernel_variances` on the validation
  images' conv features); ``elbo`` (a) chooses it on the ELBO; a number sets it. Default 1.
* ``--dgp-patience P`` (e): stage 2 stops once the validation NLPD has not improved for P epochs (checked
  before training and after every epoch), and the parameters of the best check are restored — for
  ``adgp_ft`` the convolutional layers' with the DGP's.
* ``--stage2-remedies``: both, (a2) + (e) with a patience of 5 epochs; ``--dgp-epochs`` is then the cap.

Metrics per angle (:mod:`activated_dgp.metrics`): accuracy, test log-likelihood, ECE (15 bins) and mean
predictive entropy. The study runs on :mod:`experiments.harness`: one cell and one record per (dataset, model,
seed) in ``<out>/records.jsonl`` (resumable: finished cells are skipped), protocol ``seed-model/1:<configuration
digest>`` (:data:`CELL_PROTOCOL`; ``eval_seconds`` is the model's own prediction time, ``feature_seconds`` its conv
features'); records made before the harness, whose cells were all models of a seed, read as
``seed-group:<digest>`` and are never mixed with new ones. Trained networks, DGPs, per-angle conv features and
evaluation progress are artifacts under ``--artifacts`` (default ``<--cache-dir>/rotated_mnist``), shared by the
cells that use them. ``--report-only`` rewrites the generated part of the page (``--doc``, default ``<out>.md``)
and the figure from the records of the newest protocol.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple, Union

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

from activated_dgp.saving import save  # noqa: E402
from experiments.harness.artifacts import ArtifactCache, atomic_write, atomic_write_text, restore_saved_weights  # noqa: E402
from experiments.harness.blocks import write_block  # noqa: E402
from experiments.harness.store import ResultStore, portable_path  # noqa: E402
from experiments.harness.study import page_path, records_path  # noqa: E402
from experiments.setups import classifier, rotated_mnist_cnn  # noqa: E402

MODELS = ("nn", "nn_dropout", "nn_ts", "adgp", "adgp_ft")
#: issue 36's controls: the networks given ADGP's extra stage-2 epochs, and deep ensembles of networks and of ADGPs
CONTROLS = ("nn_ft", "nn_ts_ft", "nn_dropout_ft", "ensemble", "adgp_ensemble")
#: issue 33's LLA rows on ``nn``'s network (--lla)
LLA_MODELS = ("lla_last_layer", "lla_diagonal", "lla_neuralef")
ALL_MODELS = MODELS + CONTROLS + LLA_MODELS
LABELS = {"nn": "NN", "nn_dropout": "NN + Dropout", "nn_ts": "NN + TS", "adgp": "ADGP", "adgp_ft": "ADGP + conv fine-tuned",
          "nn_ft": "NN + extra epochs", "nn_ts_ft": "NN + extra epochs + TS", "nn_dropout_ft": "NN + Dropout + extra epochs",
          "ensemble": "Deep ensemble", "adgp_ensemble": "ADGP ensemble",
          "lla_last_layer": "LLA last layer", "lla_diagonal": "LLA diagonal", "lla_neuralef": "LLA NeuralEF"}
STAGE2_OPTIMIZER = "Adam"  # stage 2 with the conv layers trained, and the networks' extra epochs (stage2_fit)
ENSEMBLE_SEED_STRIDE = 10_000  # deep-ensemble member k of run s has seed s + k · stride (member_seed)
ANGLES = tuple(range(0, 181, 15))
METRICS = ("accuracy", "log_likelihood", "ece", "entropy")
METRIC_LABELS = {
    "accuracy": "accuracy",
    "log_likelihood": "test log-likelihood",
    "ece": "expected calibration error (15 bins)",
    "entropy": "mean predictive entropy (nats)",
}
KEY_FIELDS = KEY = ("dataset", "model", "seed")
REPO = Path(__file__).resolve().parents[1]
FIGURE = REPO / "docs" / "figures" / "rotated_mnist.png"  # the results page's figure (Ñ = 8); the runner writes it only when named
BLOCK_COMMAND = "python -m experiments rotated_mnist --report-only"  # the marker's command when no report run names the page


@dataclass(frozen=True)
class Config:
    """Everything that changes the numbers; records made under another config are not mixed in."""

    dataset: str = "mnist"
    epochs: int = 10  # stage 1 (networks)
    dgp_epochs: int = 10  # stage 2 (ELBO)
    batch_size: int = 256
    learning_rate: float = 1e-3
    dgp_learning_rate: float = 1e-3
    num_units: int = 128
    width: int = 128
    # the paper's Ñ = 20; the records of docs/results/rotated_mnist/ were made with Ñ = 8, before the Softplus
    # coefficients at d = 1025 were computed in extended precision (float64 quadrature gave round-off from n = 8 on)
    truncation_level: int = 20
    dropout: float = 0.1
    dropout_samples: int = 20
    dgp_samples: int = 10
    validation_fraction: float = 0.1
    train_size: Optional[int] = None  # None: every training image the source has
    test_size: Optional[int] = None  # None: the whole test set
    angles: tuple = ANGLES
    # stage-2 remedies (docs/results/stage2.md): "validation" (a2) / "elbo" (a) / a number, and (e) early stopping
    kernel_variance: Union[str, float] = 1.0
    dgp_patience: Optional[int] = None  # epochs without a better validation NLPD; None: every dgp_epochs epoch
    # the library's stage-2 defaults: "ramp-guard" since train_dgp ramps a fresh Adam's learning rate over 100 steps
    # and keeps its best training-ELBO check (twelfth session); records made before have no such field, so they are
    # never mixed with new runs (the networks, which it does not change, are still shared: stage1_digest)
    stage2_defaults: str = "ramp-guard"
    ensemble_size: int = 5  # members of the deep ensembles (ensemble, adgp_ensemble)
    # issue 32: the output layer's far-field residual (activated_dgp.deep.far_field.add_far_field, fitted on the conv
    # features of the training images, re-centred after stage 2); every ADGP record then also scores the same fit
    # with the residual switched off (``far_field_off``)
    far_field: bool = False
    # issue 36's "floor on v": the kernel-variance search never goes below it (needs kernel_variance "validation"/"elbo")
    kernel_variance_floor: Optional[float] = None
    lla_eigenpairs: int = 20  # k of lla_neuralef
    lla_neuralef_steps: int = 2000  # NeuralEF steps of lla_neuralef

    def __post_init__(self):
        variance = self.kernel_variance
        if isinstance(variance, str):
            if variance not in KERNEL_VARIANCE_CHOICES:
                raise ValueError(f"kernel_variance must be a positive number or one of {KERNEL_VARIANCE_CHOICES}, got {variance!r}")
        elif isinstance(variance, bool) or not (isinstance(variance, (int, float)) and np.isfinite(variance) and variance > 0):
            raise ValueError(f"kernel_variance must be a positive number or one of {KERNEL_VARIANCE_CHOICES}, got {variance!r}")
        else:
            object.__setattr__(self, "kernel_variance", float(variance))
        floor = self.kernel_variance_floor
        if floor is not None:
            if isinstance(floor, bool) or not (isinstance(floor, (int, float)) and np.isfinite(floor) and floor > 0):
                raise ValueError(f"kernel_variance_floor must be a positive number or None, got {floor!r}")
            if not isinstance(self.kernel_variance, str):
                raise ValueError("kernel_variance_floor bounds a kernel-variance search: it needs kernel_variance 'validation' or 'elbo'")
            object.__setattr__(self, "kernel_variance_floor", float(floor))
        patience = self.dgp_patience
        if patience is not None and (isinstance(patience, bool) or int(patience) != patience or patience < 1):
            raise ValueError(f"dgp_patience must be an integer ≥ 1 or None, got {patience!r}")

    def as_record(self) -> dict:
        """The fields as stored in the records and hashed by :meth:`digest`. Fields added after records were
        made are left out while they hold their defaults, so that those records (and their checkpoints)
        still match the configuration they were made with."""
        fields = asdict(self)
        for name, default in LATER_DEFAULTS.items():
            if fields[name] == default:
                del fields[name]
        return json.loads(json.dumps(fields))

    def digest(self) -> str:
        return config_digest(self.as_record())

    def stage1_digest(self) -> str:
        """The digest without the stage-2 remedies, which do not change the networks: runs that differ only
        in them share the stage-1 checkpoints."""
        record = replace(self, **LATER_DEFAULTS).as_record()
        record.pop("stage2_defaults")
        return hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:12]


KERNEL_VARIANCE_CHOICES = ("validation", "elbo")
LATER_DEFAULTS = {"kernel_variance": 1.0, "dgp_patience": None, "ensemble_size": 5, "far_field": False, "kernel_variance_floor": None,
                  "lla_eigenpairs": 20, "lla_neuralef_steps": 2000}
REMEDIES = {"kernel_variance": "validation", "dgp_patience": 5}  # --stage2-remedies: (a2) + (e)
def config_digest(record: Dict) -> str:
    """The digest of a configuration as stored in the records (:meth:`Config.as_record`)."""
    return hashlib.sha1(json.dumps(record, sort_keys=True).encode()).hexdigest()[:12]


#: Protocols (the harness's record versioning). Records made before the study moved onto the harness carry none:
#: their cells were "all models of a seed" (eval_seconds splitting the shared feature time across the models) and
#: :func:`upgrade` names them LEGACY_PROTOCOL:<config digest>. New records are CELL_PROTOCOL:<config digest>:
#: one (seed, model) per cell, eval_seconds the model's own time, feature_seconds the conv features'.
LEGACY_PROTOCOL = "seed-group"
CELL_PROTOCOL = "seed-model/1"


def upgrade(record: Dict) -> Dict:
    if "protocol" in record:
        return record
    return {**record, "protocol": f"{LEGACY_PROTOCOL}:{config_digest(record['config'])}"}


def PROTOCOL(options) -> str:
    """A run's protocol: the cell definition and the configuration's digest (so records of another configuration
    or cell definition are never mixed in). ``--report-only`` and ``--compare`` show the newest protocol in the
    records (the page describes the latest run)."""
    if options.report_only or options.compare:
        return newest_protocol(records_path(options))
    return f"{CELL_PROTOCOL}:{config_from(options).digest()}"


def newest_protocol(path) -> Optional[str]:
    records = ResultStore(path, KEY, upgrade=upgrade).all_records()
    return records[-1]["protocol"] if records else None


VALIDATION_SAMPLES = 16  # samples of the validation NLPD (train_dgp's default), seeded with 0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------- data


@dataclass
class Splits:
    x_train: np.ndarray  # [N, 784] in [0, 1]
    y_train: np.ndarray  # [N, 1] float64 labels
    x_val: np.ndarray
    y_val: np.ndarray
    rotated: np.ndarray  # [A, T, 28, 28] uint8
    y_test: np.ndarray  # [T] int64
    train_source: str
    test_source: str


def prepare_data(config: Config, data_dir, seed: int, cache_dir) -> Splits:
    """Train/validation split of (a subset of) the training images for ``seed``, and the rotated test sets."""
    from activated_dgp.data import load_mnist, rotated_test_sets

    data = load_mnist(data_dir, dataset=config.dataset)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(data.x_train))
    if config.train_size is not None:
        if config.train_size > len(order):
            raise ValueError(f"--train-size {config.train_size} exceeds the {len(order)} training images of {data.train_source}")
        order = order[: config.train_size]
    num_val = int(round(config.validation_fraction * len(order)))
    val, train = order[:num_val], order[num_val:]
    x = data.x_train.reshape(len(data.x_train), -1).astype(np.float64) / 255.0
    y = data.y_train.astype(np.float64)[:, None]
    num_test = len(data.x_test) if config.test_size is None else min(config.test_size, len(data.x_test))
    rotated = rotated_test_sets(data.x_test[:num_test], config.angles, cache_dir=Path(cache_dir) / "rotated")
    return Splits(x[train], y[train], x[val], y[val], rotated, data.y_test[:num_test], data.train_source, data.test_source)


def as_inputs(images: np.ndarray) -> np.ndarray:
    return images.reshape(len(images), -1).astype(np.float32) / 255.0


# ---------------------------------------------------------------- models


def build_classifier(config: Config, seed: int, dropout: float = 0.0):
    """(model, extractor, head) of the study's CNN (:func:`experiments.setups.rotated_mnist_cnn`) at ``config``'s sizes."""
    return rotated_mnist_cnn(seed, truncation_level=config.truncation_level, num_units=config.num_units,
                             width=config.width, dropout=dropout)


def _schedule(config: Config, epochs: int, learning_rate: float, patience: Optional[int] = None):
    from activated_dgp import TrainingSchedule

    return TrainingSchedule(
        epochs=epochs, batch_size=config.batch_size, learning_rate=learning_rate, verbose=2, patience=patience, validation_every=1
    )


def trained_classifier(config: Config, splits: Splits, seed: int, dropout: float, checkpoint: Path):
    """Stage 1, or its checkpoint: (extractor, head, seconds spent training)."""
    import tf_keras

    from activated_dgp import train_network

    tf_keras.utils.set_random_seed(seed)
    model, extractor, head = build_classifier(config, seed, dropout)
    saved, record = checkpoint.with_suffix(".saved"), checkpoint.with_suffix(".json")
    # every weight, the activated layers' W included (they are Keras weights)
    if record.is_file() and restore_saved_weights(model, saved, legacy_weights=checkpoint.with_suffix(".weights.h5")):
        log(f"  loaded {checkpoint}")
        return extractor, head, json.loads(record.read_text())["seconds"]
    start = time.time()
    train_network(model, splits.x_train, splits.y_train, "softmax", _schedule(config, config.epochs, config.learning_rate))
    seconds = time.time() - start
    atomic_write_text(record, json.dumps({"seconds": seconds}))
    save(model, saved)  # a new checkpoint, then its pointer: an interrupted save is never loaded
    return extractor, head, seconds


def features(extractor, x: np.ndarray) -> np.ndarray:
    return extractor.predict(x, batch_size=1000, verbose=0).astype(np.float64)


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """T > 0 minimising the validation NLL of softmax(logits / T) (Guo et al., 2017), over log T ∈ [−5, 5]."""
    from scipy.optimize import minimize_scalar
    from scipy.special import log_softmax

    labels = np.asarray(labels).astype(np.int64).ravel()

    def nll(log_t):
        return -np.mean(log_softmax(logits / np.exp(log_t), axis=1)[np.arange(len(labels)), labels])

    return float(np.exp(minimize_scalar(nll, bounds=(-5.0, 5.0), method="bounded").x))


def stage2_fit(model, x: np.ndarray, y: np.ndarray, config: Config, seed: int, loss=None, score=None, label: str = "fine-tune") -> dict:
    """The schedule of stage 2 with the convolutional layers trained, for any Keras ``model`` taking images:
    ``STAGE2_OPTIMIZER`` (Adam) at ``config.dgp_learning_rate`` on ``loss`` (None: the model's own ``train_step``
    loss), ``config.dgp_epochs`` epochs of seeded shuffled full minibatches of ``config.batch_size``. With
    ``config.dgp_patience`` (remedy e), ``score()`` (lower is better) is checked before training and after every
    epoch by :class:`activated_dgp.training.RestoreBest`, training stops after ``dgp_patience`` epochs without
    improvement and the best check's parameters are restored. ADGP + conv fine-tuned and the networks' control
    runs (``nn_ft``, ``nn_dropout_ft``) both go through here, so their extra epochs, optimiser and learning rate are
    the same by construction; the returned record says which were used (read from the fitted optimiser)."""
    import tensorflow as tf
    import tf_keras

    from activated_dgp.training import RestoreBest

    model.compile(optimizer=getattr(tf_keras.optimizers, STAGE2_OPTIMIZER)(config.dgp_learning_rate), loss=loss)
    rng = np.random.default_rng(seed)
    x32 = x.astype(np.float32)

    size = min(config.batch_size, len(x))  # fewer images than a minibatch: one batch of all (never an empty epoch)

    def batches():  # one epoch: a fresh seeded permutation, full minibatches only
        order = rng.permutation(len(x))
        for start in range(0, len(x) - size + 1, size):
            rows = order[start : start + size]
            yield x32[rows], y[rows]

    signature = (tf.TensorSpec((None, x.shape[1]), tf.float32), tf.TensorSpec((None, y.shape[1]), tf.as_dtype(y.dtype)))
    callbacks, stopper = [], None
    if config.dgp_patience is not None:
        if score is None:
            raise ValueError("dgp_patience (early stopping) needs validation images")
        stopper = RestoreBest(score, model, every=1, patience=config.dgp_patience)
        callbacks.append(stopper)

    def progress(epoch, logs):
        line = f"  {label} epoch {epoch + 1}/{config.dgp_epochs}: loss = {logs['loss']:.4f}"
        log(line + (f", validation score = {stopper.checks[-1][1]:.4f}" if stopper is not None else ""))

    def start(logs):
        if stopper is not None:
            log(f"  {label} epoch 0: validation score = {stopper.checks[-1][1]:.4f}")

    callbacks.append(tf_keras.callbacks.LambdaCallback(on_train_begin=start, on_epoch_end=progress))
    history = model.fit(tf.data.Dataset.from_generator(batches, output_signature=signature), epochs=config.dgp_epochs,
                        callbacks=callbacks, verbose=0)
    losses = [float(v) for v in history.history.get("loss", [])]
    record = {"loss": losses, "schedule": {"epochs": len(losses), "optimizer": type(model.optimizer).__name__,
                                           "learning_rate": float(model.optimizer.learning_rate.numpy()), "batch_size": size}}
    if stopper is not None:  # the best check's parameters are back in the model
        record.update(validation_nlpd=[[int(e), float(v)] for e, v in stopper.checks], best_epoch=int(stopper.best_epoch),
                      epochs_run=int(stopper.epochs_run))
    return record


def finetune_dgp_and_extractor(dgp, extractor, x: np.ndarray, y: np.ndarray, config: Config, seed: int, validation=None) -> dict:
    """Stage 2 with the convolutional layers trained too: Adam on −ELBO/N over the DGP's variables and the
    extractor's (the ELBO of :meth:`gpflux.models.DeepGP.elbo` on minibatches of features extractor(x)), as a Keras
    fit of :class:`ExtractorDGP` by :func:`stage2_fit` (``config.dgp_epochs`` epochs of seeded shuffled full
    minibatches).

    With ``config.dgp_patience`` (remedy e), ``validation`` = (x_val, y_val) images: the validation NLPD of the
    DGP on extractor(x_val) (:func:`activated_dgp.training.validation_nlpd`, as in :func:`activated_dgp.train_dgp`)
    is the score checked before training and after every epoch on the fitted model, training stops after
    ``dgp_patience`` epochs without improvement, and the DGP's and the extractor's parameters of the best check are
    restored."""
    from activated_dgp.training import validation_nlpd

    score = None
    if config.dgp_patience is not None:
        if validation is None or len(validation[0]) == 0:
            raise ValueError("dgp_patience (early stopping) needs validation images")
        x_val, y_val = validation
        score = lambda: validation_nlpd(dgp, features(extractor, x_val), y_val, VALIDATION_SAMPLES, 0)  # noqa: E731
    return stage2_fit(ExtractorDGP(dgp, extractor), x, y, config, seed, score=score)


def finetuned_classifier(config: Config, splits: Splits, seed: int, dropout: float, source: Path, checkpoint: Path):
    """The control of ADGP + conv fine-tuned for a network: stage 1 (``source``'s checkpoint) followed by the
    extra epochs of :func:`stage2_fit` — the same number, optimiser, learning rate and minibatches as ADGP's stage
    2 with the conv layers trained — on the network's own loss (cross-entropy of the softmax of its logits,
    :func:`activated_dgp.deep.likelihoods.network_loss`; dropout active while training when ``dropout`` > 0), every
    weight (conv layers and head) trained. With ``config.dgp_patience`` the score is the validation cross-entropy.
    Returns (extractor, head, stage-1 seconds, info); the weights are checkpointed under ``checkpoint``."""
    from activated_dgp.deep.likelihoods import network_loss

    extractor, head, seconds = trained_classifier(config, splits, seed, dropout, source)
    model = classifier(extractor, head)
    model.build((None, splits.x_train.shape[1]))  # its weights exist before the fit (RestoreBest snapshots them)
    saved, record = checkpoint.with_suffix(".saved"), checkpoint.with_suffix(".json")
    if record.is_file() and restore_saved_weights(model, saved, legacy_weights=checkpoint.with_suffix(".weights.h5")):
        log(f"  loaded {checkpoint}")
        return extractor, head, seconds, json.loads(record.read_text())
    loss = network_loss("softmax")
    score = None
    if config.dgp_patience is not None and len(splits.x_val):
        x_val = splits.x_val.astype(np.float32)
        score = lambda: float(loss(splits.y_val, model(x_val, training=False)))  # noqa: E731
    start = time.time()
    history = stage2_fit(model, splits.x_train, splits.y_train, config, seed, loss=loss, score=score, label="network extra")
    info = {"seconds": time.time() - start, **history}
    atomic_write_text(record, json.dumps(info))
    save(model, saved)
    return extractor, head, seconds, info


def ExtractorDGP(dgp, extractor):
    """The conv extractor followed by ``dgp``, fitted on the DGP's −ELBO/N (:class:`activated_dgp.training.ExtractorDGP`;
    imported on first use, so importing this module does not import TensorFlow)."""
    from activated_dgp.training.extractor import ExtractorDGP as Model

    return Model(dgp, extractor)


def converted_dgp(config: Config, head, train, validation, seed: int):
    """The twin's dense part converted to an activated DGP whose mean propagation is the network's logits, with
    each layer's kernel variance set by ``config.kernel_variance`` (q_μ re-solved so that the mean propagation is
    kept): (dgp, info). ``train`` and ``validation`` are (conv features [N, 1024] float64, labels [N, 1])."""
    from activated_dgp import dgp_from_keras, propagate_means
    from activated_dgp.training import rescale_kernel_variance, select_kernel_variances

    train_features = train[0]
    conversion = dgp_from_keras(head, len(train_features), X=train_features[:512], likelihood="softmax")
    dgp = conversion.dgp
    info = {"conversion_mismatch": conversion.max_abs_mismatch}
    log(f"  converted: max |DGP mean − network logits| = {conversion.max_abs_mismatch:.2e}")
    variance = config.kernel_variance
    if variance in KERNEL_VARIANCE_CHOICES:
        data = validation if variance == "validation" else train
        if len(data[0]) == 0:
            raise ValueError(f"kernel_variance={variance!r} needs {variance} images; none are left (--train-size too small?)")
        floor = {} if config.kernel_variance_floor is None else {"min_variance": config.kernel_variance_floor}
        selection = select_kernel_variances(dgp, *data, objective=variance, seed=seed, **floor)
        info["variance_selection"] = [[int(layer), float(v), float(score)] for layer, v, score in selection.evaluations]
    elif variance != 1.0:
        for layer in dgp.f_layers:
            rescale_kernel_variance(layer, variance)
    info["kernel_variances"] = [float(layer.kernel.kernel.variance.numpy()) for layer in dgp.f_layers]
    if variance != 1.0:
        check = train_features[:512]
        info["variance_mismatch"] = float(np.max(np.abs(propagate_means(dgp, check)[-1].numpy() - head(check).numpy())))
        log(f"  kernel variances {info['kernel_variances']}: max |DGP mean − network logits| = {info['variance_mismatch']:.2e}")
    if config.far_field:
        from activated_dgp.deep.far_field import add_far_field

        add_far_field(dgp, train_features)
        info["far_field_variance"] = float(dgp.f_layers[-1].kernel.kernel.far_variance.numpy())
    return dgp, info


def trained_adgp(config: Config, splits: Splits, extractor, head, seed: int, checkpoint: Path, finetune: bool = False):
    """Stage 2, or its checkpoint: the twin's dense part converted (:func:`converted_dgp`) and trained on the
    ELBO, on frozen features or (``finetune``) together with ``extractor``, which is then changed in place.
    With ``config.dgp_patience``, early stopping on the validation images' NLPD with the best epoch's parameters
    restored; the info records the checks, the best epoch and the epochs run."""
    import tensorflow as tf

    from activated_dgp import load_dgp, save_dgp, train_dgp
    from activated_dgp.saving import is_saved_directory

    extractor_weights = checkpoint.parent / (checkpoint.name + "_extractor.weights.h5")
    record = checkpoint.parent / (checkpoint.name + ".json")
    complete = is_saved_directory(checkpoint) or (checkpoint / "config.json").is_file()  # a 0.1 save loads too
    if complete and record.is_file() and (not finetune or extractor_weights.is_file()):
        log(f"  loaded {checkpoint}")
        info = json.loads(record.read_text())
        if finetune:
            extractor.load_weights(extractor_weights)
        return load_dgp(checkpoint), info
    train_features = features(extractor, splits.x_train)
    val_features = features(extractor, splits.x_val) if len(splits.x_val) else np.zeros((0, train_features.shape[1]))
    dgp, info = converted_dgp(config, head, (train_features, splits.y_train), (val_features, splits.y_val), seed)
    stopping = config.dgp_patience is not None
    if stopping and len(splits.x_val) == 0:
        raise ValueError("dgp_patience (early stopping) needs validation images; none are left (--train-size too small?)")
    tf.random.set_seed(seed)
    start = time.time()
    if finetune:
        history = finetune_dgp_and_extractor(
            dgp, extractor, splits.x_train, splits.y_train, config, seed, validation=(splits.x_val, splits.y_val) if stopping else None
        )
        atomic_write(extractor_weights, lambda temporary: extractor.save_weights(temporary))
        info["stage2_schedule"] = history["schedule"]
    else:
        schedule = _schedule(config, config.dgp_epochs, config.dgp_learning_rate, config.dgp_patience)
        history = train_dgp(
            dgp, train_features, splits.y_train, schedule, validation_data=(val_features, splits.y_val) if stopping else None,
            validation_samples=VALIDATION_SAMPLES,
        )
        if stopping:  # train_dgp counts steps; the records count epochs, as the fine-tuning loop does
            per_epoch = schedule.steps_per_epoch(len(train_features))
            history.update(validation_nlpd=[[int(s // per_epoch), float(v)] for s, v in history["validation_checks"]],
                           best_epoch=int(history["best_step"] // per_epoch), epochs_run=int(history["steps_run"] // per_epoch))
    info.update({"seconds": time.time() - start, "elbo_loss": [float(v) for v in history.get("loss", [])]})
    if config.far_field and len(dgp.f_layers) > 1:  # stage 2 moved the hidden layers (and, fine-tuned, the features)
        from activated_dgp.deep.far_field import refit_far_field

        refit_far_field(dgp, features(extractor, splits.x_train) if finetune else train_features)
    if stopping:
        info.update({key: history[key] for key in ("validation_nlpd", "best_epoch", "epochs_run")})
        log(f"  early stopping: best validation NLPD {min(v for _, v in info['validation_nlpd']):.4f} at epoch "
            f"{info['best_epoch']} of {info['epochs_run']} (restored)")
    atomic_write_text(record, json.dumps(info))
    save_dgp(dgp, checkpoint)  # its checkpoint pointer, moved last and atomically, marks a complete save
    return dgp, info


def softmax(logits: np.ndarray) -> np.ndarray:
    from scipy.special import softmax as _softmax

    return _softmax(logits, axis=1)


def dropout_probabilities(head, feats: np.ndarray, samples: int, batch: int = 2000) -> np.ndarray:
    """Monte Carlo dropout: the mean of ``samples`` softmax outputs with dropout active."""
    out = []
    for start in range(0, len(feats), batch):
        chunk = feats[start : start + batch]
        out.append(np.mean([softmax(head(chunk, training=True).numpy()) for _ in range(samples)], axis=0))
    return np.concatenate(out)


def adgp_probabilities(dgp, feats: np.ndarray, samples: int, seed: int, batch: int = 1000) -> np.ndarray:
    """p(y | x) averaged over ``samples`` propagated DGP samples (:func:`activated_dgp.predict_class_probabilities`)."""
    from activated_dgp import predict_class_probabilities

    probabilities = predict_class_probabilities(dgp, feats, samples, seed, batch_size=batch)
    return probabilities / probabilities.sum(1, keepdims=True)  # Monte Carlo round-off in the class sums


# ---------------------------------------------------------------- cells (the harness runs them)


def member_seed(seed: int, member: int) -> int:
    """The seed of deep-ensemble member ``member`` of run ``seed``: member 0 is ``nn``'s network itself; the
    others' seeds never meet another run's (runs use seeds < 10 000)."""
    return seed if member == 0 else seed + ENSEMBLE_SEED_STRIDE * member


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
    lla = {name: getattr(options, name, LATER_DEFAULTS[name]) for name in ("lla_eigenpairs", "lla_neuralef_steps")}
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
    return models + [m for m in extra if m not in models]


def prepare(options, context) -> None:
    """One records folder holds one configuration per dataset (its page describes one): refuse another."""
    if options.compare:
        return
    config = config_from(options)
    store = ResultStore(records_path(options), KEY, upgrade=upgrade)
    for record in store.all_records():
        if record.get("dataset") == config.dataset and config_digest(record["config"]) != config.digest():
            raise ValueError(
                f"{store.path} holds {config.dataset} records made with another configuration "
                f"({record.get('config')}); use another --out or the same flags"
            )


def _splits(options, context, config: Config, seed: int) -> Splits:
    return context.artifacts.for_seed(seed, "splits", lambda: prepare_data(config, options.data_dir, seed, context.artifacts.rotated_dir))


def _network(context, config: Config, splits: Splits, seed: int, member: int = 0, dropout: float = 0.0):
    """Stage 1 of ``nn`` (member 0), of deep-ensemble member ``member`` or of the dropout network (shared in memory
    by the seed's cells; no cell changes it)."""
    stage1 = f"{config.dataset}_{config.stage1_digest()}_seed{seed}"
    name = "_dropout" if dropout > 0 else ("_nn" if member == 0 else f"_nn_member{member}")

    def build():
        if dropout == 0:
            log(f"seed {seed}: stage 1, NN" + (f" (ensemble member {member}, seed {member_seed(seed, member)})" if member else ""))
        else:
            log(f"seed {seed}: stage 1, NN + Dropout({config.dropout})")
        return trained_classifier(config, splits, member_seed(seed, member), dropout, context.artifacts.checkpoint(stage1 + name))

    return (stage1 + name, *context.artifacts.for_seed(seed, ("network", member, dropout), build))


def _adgp(context, config: Config, splits: Splits, seed: int, member: int = 0):
    """``adgp``'s DGP (member 0) or ensemble member ``member``'s, converted and trained with frozen conv layers."""
    key, extractor, head, seconds = _network(context, config, splits, seed, member)
    tag = f"{config.dataset}_{config.digest()}_seed{seed}"

    def build():
        log(f"seed {seed}: stage 2, ADGP (ELBO, convolutional layers frozen)" + (f", ensemble member {member}" if member else ""))
        name = "_adgp" if member == 0 else f"_adgp_member{member}"
        return trained_adgp(config, splits, extractor, head, member_seed(seed, member), context.artifacts.checkpoint(tag + name))

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
            scale = info["temperature"] = fit_temperature(head(features(extractor, splits.x_val)).numpy(), splits.y_val)
            log(f"  temperature T = {scale:.3f} (fitted on {len(splits.x_val)} validation images)")
        predict = lambda feats: softmax(head(feats[0]).numpy() / scale)  # noqa: E731
    elif model == "nn_dropout":
        key, extractor, head, info["train_seconds"] = _network(context, config, splits, seed, dropout=config.dropout)
        groups = [(key, extractor)]
        predict = lambda feats: dropout_probabilities(head, feats[0], config.dropout_samples)  # noqa: E731
    elif model == "adgp":
        key, extractor, dgp, seconds, dgp_info = _adgp(context, config, splits, seed)
        info = {"train_seconds": seconds + dgp_info["seconds"], **dgp_info}
        dgps = [dgp]
        groups = [(key, extractor)]
        predict = lambda feats: adgp_probabilities(dgp, feats[0], samples, seed)  # noqa: E731
    elif model == "adgp_ft":
        log(f"seed {seed}: stage 2, ADGP (ELBO, convolutional layers fine-tuned)")
        stage1 = f"{config.dataset}_{config.stage1_digest()}_seed{seed}"
        extractor, head, seconds = trained_classifier(config, splits, seed, 0.0, context.artifacts.checkpoint(stage1 + "_nn"))  # a copy to tune
        dgp, ft_info = trained_adgp(config, splits, extractor, head, seed, context.artifacts.checkpoint(tag + "_adgp_ft"), finetune=True)
        info = {"train_seconds": seconds + ft_info["seconds"], **ft_info}
        dgps = [dgp]
        groups = [(tag + "_adgp_ft", extractor)]
        predict = lambda feats: adgp_probabilities(dgp, feats[0], samples, seed)  # noqa: E731
    elif model in ("nn_ft", "nn_ts_ft", "nn_dropout_ft"):
        dropout = config.dropout if model == "nn_dropout_ft" else 0.0
        source, _, _, _ = _network(context, config, splits, seed, dropout=dropout)
        name = tag + ("_dropout_ft" if dropout else "_nn_ft")
        log(f"seed {seed}: {LABELS[model]}: stage 1 + the extra epochs of ADGP's stage 2 (conv layers trained)")
        extractor, head, seconds, ft = context.artifacts.for_seed(
            seed, name, lambda: finetuned_classifier(config, splits, seed, dropout, context.artifacts.checkpoint(source),
                                                     context.artifacts.checkpoint(name)))
        info = {"train_seconds": seconds + ft["seconds"], "extra_loss": ft["loss"], "extra": ft["schedule"],
                "adgp_stage2": stage2_settings(config)}
        if "best_epoch" in ft:
            info.update(extra_validation=ft["validation_nlpd"], extra_best_epoch=ft["best_epoch"], extra_epochs_run=ft["epochs_run"])
        groups = [(name, extractor)]
        if model == "nn_dropout_ft":
            predict = lambda feats: dropout_probabilities(head, feats[0], config.dropout_samples)  # noqa: E731
        else:
            scale = 1.0
            if model == "nn_ts_ft":  # the temperature is fitted after the extra epochs
                scale = info["temperature"] = fit_temperature(head(features(extractor, splits.x_val)).numpy(), splits.y_val)
            predict = lambda feats: softmax(head(feats[0]).numpy() / scale)  # noqa: E731
    elif model == "ensemble":
        members = [_network(context, config, splits, seed, k) for k in range(config.ensemble_size)]
        info = {"train_seconds": sum(m[3] for m in members), "member_seeds": [member_seed(seed, k) for k in range(config.ensemble_size)]}
        groups = [(key, extractor) for key, extractor, _, _ in members]
        predict = lambda feats: ensemble_probabilities([softmax(m[2](f).numpy()) for m, f in zip(members, feats)])  # noqa: E731
    elif model == "adgp_ensemble":
        members = [_adgp(context, config, splits, seed, k) for k in range(config.ensemble_size)]
        info = {"train_seconds": sum(m[3] + m[4]["seconds"] for m in members),
                "member_seeds": [member_seed(seed, k) for k in range(config.ensemble_size)],
                "members": [{k: v for k, v in m[4].items() if k != "elbo_loss"} for m in members]}
        groups = [(m[0], m[1]) for m in members]
        dgps = [m[2] for m in members]
        predict = lambda feats: ensemble_probabilities(  # noqa: E731
            [adgp_probabilities(m[2], f, samples, member_seed(seed, k)) for k, (m, f) in enumerate(zip(members, feats))])
    elif model in LLA_MODELS:
        key, extractor, head, seconds = _network(context, config, splits, seed)
        groups = [(key, extractor)]
        predict, info = lla_prediction(context, config, splits, extractor, head, seed, model, context.artifacts.checkpoint(f"{tag}_{model}"))
        info["train_seconds"] = seconds + info["lla_seconds"]
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
    paired "without" of issue 32, stored as ``far_field_off`` (metric → per-angle list)."""
    from contextlib import ExitStack

    from activated_dgp.deep.far_field import far_field_switched_off

    with ExitStack() as stack:
        for dgp in dgps:
            stack.enter_context(far_field_switched_off(dgp))
        off = evaluate(context, config, splits, progress_key + "_far_field_off", groups, predict)
    return {"far_field_off": {metric: off[metric] for metric in METRICS}, "far_field_off_eval_seconds": off["eval_seconds"]}


#: what the LLA rows cover, from the measured cost of the Jacobian of the 10 logits for 64 images
#: (``python -m benchmarks.lla_rotated_mnist_cost``, docs/results/lla_rotated_mnist_cost.json; Ñ = 20, 2 cores,
#: background runs stopped): over the whole CNN (P = 217,472) 31.0 s — 2,182 s per pass over 4,500 training images,
#: and its N C P = 78 GB of NeuralEF Jacobians fit no cache: not affordable. Over the dense head on frozen conv
#: features (P = 165,376) 3.20 s — 225 s per training pass; N C P = 60 GB, beyond the cache, so NeuralEF recomputes
#: them per step: affordable, so diagonal and NeuralEF LLA cover the dense head, the conv layers fixed at θ_MAP
#: (their features are the LLA's inputs). Last-layer LLA covers the last Dense layer (P = 1,280; 0.012 s), on the
#: penultimate features (taping the activated layers as well, only to differentiate the last layer, was far slower
#: in a smoke run). The LLA's GGN and test covariances are computed layer by layer (``activated_dgp.eigen.layerwise``;
#: the head is a chain of ActivatedLayer and Dense layers): the diagonal LLA's test covariances take about 0.2 s per 64
#: images in the same benchmark, 20× less than from per-example Jacobians — under 10 min per seed for 13 × 10,000 test
#: images, where the Jacobian path took about 4 h (0.11 s per image in a smoke run, MC predictive included); the
#: last-layer LLA's J V about 12× less, and NeuralEF's recomputed pair features 3.5× less (0.76 s per batch of 256).
LLA_COVERAGE = "dense head on frozen conv features"
#: images per Jacobian batch of the LLA rows: 32 · 10 logits · 165,376 parameters · 8 bytes = 423 MB (a batch of 256,
#: 3.4 GB, was killed for memory on the shared machine)
LLA_BATCH_SIZE = 32
LLA_METHODS = {"lla_last_layer": "last_layer", "lla_diagonal": "diagonal", "lla_neuralef": "neuralef"}


def lla_prediction(context, config: Config, splits: Splits, extractor, head, seed: int, model: str, checkpoint: Path):
    """``model``'s LLA of ``nn``'s network (``head`` on ``extractor``'s conv features), fitted on the training images
    or loaded from ``checkpoint``: (predict, info), predict mapping [conv features] to the LLA's class probabilities
    (Monte Carlo softmax predictive, 1,000 samples seeded with ``seed``).

    Parameters covered (:data:`LLA_COVERAGE`, measured costs above): the whole dense head on the conv features;
    ``lla_last_layer`` its last Dense layer, on the penultimate features. The latent mean is ``nn``'s logits. Prior precision: the Laplace evidence (last layer, diagonal); for
    NeuralEF the validation NLL over the library's grid (10^−4…10^4), as in the UCI rows (experiments.methods.lla
    ``_lla``), or 1 when there are no validation images. NeuralEF learns ``config.lla_eigenpairs`` eigenpairs in
    ``config.lla_neuralef_steps`` steps on the exact NTK (cached Jacobians when they fit the library's budget)."""
    import tf_keras

    from activated_dgp.eigen import LinearisedLaplace
    from activated_dgp.saving import is_saved_directory

    method = LLA_METHODS[model]
    cut = 3 if method == "last_layer" else 0  # the last Dense on the penultimate features, or the whole head
    upper = tf_keras.Sequential(head.layers[cut:], name="lla_network")
    inputs = (lambda feats: tf_keras.Sequential(head.layers[:cut])(feats).numpy()) if cut else (lambda feats: feats)  # noqa: E731
    x_train = context.artifacts.for_seed(seed, ("lla_inputs", cut), lambda: inputs(features(extractor, splits.x_train)))
    upper(x_train[:2])
    validation = None
    prior = "marginal_likelihood"
    if method == "neuralef":
        prior = "validation" if len(splits.x_val) else 1.0
        if prior == "validation":
            validation = (inputs(features(extractor, splits.x_val)), splits.y_val)
    settings = dict(likelihood="softmax", prior_precision=prior, method=method, num_eigenpairs=config.lla_eigenpairs,
                    neuralef_steps=config.lla_neuralef_steps, seed=seed, batch_size=LLA_BATCH_SIZE, verbose=1)
    start = time.time()
    if is_saved_directory(checkpoint) or (checkpoint / "laplace.json").is_file():  # laplace.json: saved by activated_dgp 0.1
        lla = LinearisedLaplace.load(str(checkpoint), upper, verbose=1)
        log(f"  loaded {checkpoint}")
    else:
        log(f"seed {seed}: {LABELS[model]} on {len(x_train)} training images")
        # NeuralEF's training (hours on the shared cores) resumes from its own checkpoints beside the LLA's
        training = str(checkpoint.parent / f"{checkpoint.name}_neuralef_training") if method == "neuralef" else None
        lla = LinearisedLaplace(upper, **settings).fit(x_train, splits.y_train, validation_data=validation, checkpoint_dir=training)
        lla.save(str(checkpoint))
    info = {"lla_seconds": time.time() - start, "lla_method": method, "lla_parameters": LLA_COVERAGE if method != "last_layer"
            else "the last Dense layer (128 → 10, no bias)", "num_parameters": lla.num_parameters,
            "prior_precision": float(lla.prior_precision), "prior_precision_by": str(prior),
            "lla_predictive": f"{lla.predictive} ({lla.num_samples} samples)"}
    if lla.log_evidence is not None:
        info["log_evidence"] = float(lla.log_evidence)
    if method == "neuralef":
        info.update(num_eigenpairs=config.lla_eigenpairs, neuralef_steps=config.lla_neuralef_steps, ntk_source=lla.ntk_source,
                    eigenvalues=np.asarray(lla.eigenfunctions.eigenvalues).tolist())

    def predict(feats, batch: int = 1000):  # in batches: the Monte Carlo predictive holds [1000, batch, 10] samples
        probabilities = np.concatenate([lla.predict_y(inputs(feats[0][a : a + batch]))[0].numpy() for a in range(0, len(feats[0]), batch)])
        return probabilities / probabilities.sum(1, keepdims=True)  # Monte Carlo round-off in the class sums

    return predict, info


def stage2_settings(config: Config) -> Dict:
    """ADGP's stage-2 schedule with the conv layers trained, as :func:`stage2_fit` applies it to ``config``."""
    return {"epochs": config.dgp_epochs, "optimizer": STAGE2_OPTIMIZER, "learning_rate": config.dgp_learning_rate,
            "batch_size": config.batch_size}


def ensemble_probabilities(members: Sequence[np.ndarray]) -> np.ndarray:
    """The deep ensemble's predictive (Lakshminarayanan et al., 2017, Sec. 2.4): the uniform mixture of the M members'
    class probabilities, p(y | x) = (1/M) Σ_m p_m(y | x), [N, C] from M arrays [N, C]. (The library's
    ``ensemble_predict_y`` / ``ensemble_log_density`` give a mixture's moments and log density, not the class
    probabilities the accuracy, ECE and entropy need, so the members' probabilities are averaged here.)"""
    return np.mean(np.stack(members), axis=0)


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
    precision, so the copy is exact), shared by the models reading the same extractor."""
    saved = context.artifacts.get_or_build(
        "features", f"{key}_features_{angle}deg", ".npy", build=lambda: extractor.predict(as_inputs(splits.rotated[index]), batch_size=1000, verbose=0),
        save=lambda array, path: np.save(path, array), load=np.load)
    return np.asarray(saved).astype(np.float64)


# ---------------------------------------------------------------- report


def aggregate(records: List[Dict], dataset: str) -> Dict[str, Dict[str, np.ndarray]]:
    """model → metric → [seeds, angles] array."""
    table: Dict[str, Dict[str, np.ndarray]] = {}
    for model in ALL_MODELS:  # only the models that have records: the controls appear once they are run
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model]
        if rows:
            table[model] = {metric: np.array([r[metric] for r in rows]) for metric in METRICS}
            table[model]["seeds"] = np.array([r["seed"] for r in rows])
    return table


def _style_axis(axis, angles, title: str) -> None:
    axis.set_xlabel("rotation (degrees)")
    axis.set_title(title, fontsize=10)
    axis.set_xticks(angles[::2])
    axis.grid(alpha=0.3)


def plot(table, angles, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(16, 3.8))
    for axis, metric in zip(axes, METRICS):
        for model, values in table.items():
            mean, std = values[metric].mean(0), values[metric].std(0)
            axis.plot(angles, mean, marker="o", markersize=3, label=f"{LABELS[model]} ({len(values['seeds'])} seeds)")
            axis.fill_between(angles, mean - std, mean + std, alpha=0.2)
        _style_axis(axis, angles, METRIC_LABELS[metric])
    axes[0].legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _cell(values: np.ndarray, digits: int) -> str:
    return f"{values.mean():.{digits}f} ± {values.std():.{digits}f}" if len(values) > 1 else f"{values.mean():.{digits}f}"


def report_markdown(records: List[Dict], dataset: str, figure: Path) -> str:
    table = aggregate(records, dataset)
    if not table:
        return "No finished records yet.\n"
    first = next(r for r in records if r["dataset"] == dataset)
    angles = first["angles"]
    config = first["config"]
    seeds = ", ".join(f"{LABELS[m]}: seeds {sorted(v['seeds'].tolist())}" for m, v in table.items())
    lines = [
        f"Generated from {sum(len(v['seeds']) for v in table.values())} records ({seeds}).",
        "",
        f"- command: `{first.get('command', '?')}`",
        f"- training images: {first['train_size']} (+ {first['validation_size']} held out for validation; "
        f"source: {first.get('train_source', '?')})",
        f"- test images per angle: {first['num_test']} (source: {first.get('test_source', '?')}), "
        f"angles {angles[0]}°…{angles[-1]}° every {angles[1] - angles[0]}°",
        f"- configuration: `{json.dumps({k: v for k, v in config.items() if k != 'angles'})}`",
        "",
        f"![rotated {dataset}](../figures/{figure.name})",
        "",
        "Mean ± standard deviation over seeds (population std).",
        "",
        "**Averaged over all angles**",
        "",
        "| model | accuracy | test log-likelihood | ECE | entropy | train s (per seed) | eval s (per seed) |",
        "|---|---|---|---|---|---|---|",
    ]
    for model, values in table.items():
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model]
        lines.append(
            f"| {LABELS[model]} | "
            + " | ".join(_cell(values[m].mean(1), 3) for m in METRICS)
            + f" | {np.mean([r.get('train_seconds', np.nan) for r in rows]):.0f} | {np.mean([r['eval_seconds'] for r in rows]):.0f} |"
        )
    stage2 = [r for r in records if r["dataset"] == dataset and ("best_epoch" in r or "variance_selection" in r)]
    if stage2:
        lines += ["", "**Stage 2** (kernel variances per GP layer after conversion; early stopping: best epoch restored / epochs run)", ""]
        for r in sorted(stage2, key=lambda r: (r["model"], r["seed"])):
            stop = f"epoch {r['best_epoch']} of {r['epochs_run']}" if "best_epoch" in r else "no early stopping"
            lines.append(f"- {LABELS[r['model']]}, seed {r['seed']}: v = {', '.join(f'{v:.3g}' for v in r['kernel_variances'])}; {stop}")
    for metric in METRICS:
        lines += ["", f"**{METRIC_LABELS[metric]}**", "", "| angle | " + " | ".join(LABELS[m] for m in table) + " |",
                  "|---" * (len(table) + 1) + "|"]
        for index, angle in enumerate(angles):
            lines.append(f"| {angle}° | " + " | ".join(_cell(v[metric][:, index], 3) for v in table.values()) + " |")
    lines += far_field_lines(records, dataset, angles)
    if "adgp" in table and len(table) > 1:
        others = [m for m in table if m != "adgp"]
        best_other = np.max([table[m]["log_likelihood"].mean(0) for m in others], axis=0)
        adgp = table["adgp"]["log_likelihood"].mean(0)
        spread = np.ptp([table[m]["accuracy"].mean(0) for m in table], axis=0)
        lines += [
            "",
            "**Checks of the paper's claims** (on seed means)",
            "",
            f"- accuracy spread across models (max − min of the means) per angle: median {np.median(spread):.3f}, "
            f"largest {spread.max():.3f} (at {angles[int(np.argmax(spread))]}°).",
            f"- ADGP has the best test log-likelihood at {int(np.sum(adgp > best_other))} of {len(angles)} angles; "
            f"ADGP − best other model: " + ", ".join(f"{a}°: {d:+.3f}" for a, d in zip(angles, adgp - best_other)) + ".",
        ]
        nn = table.get("nn")
        if nn is not None:
            lines.append(
                "- ADGP − NN (its initialisation) test log-likelihood: "
                + ", ".join(f"{a}°: {d:+.3f}" for a, d in zip(angles, adgp - nn["log_likelihood"].mean(0)))
                + "."
            )
    lines += lla_check_lines(table, angles)
    lines += ensemble_check_lines(table, angles)
    return "\n".join(lines) + "\n"


SHIFT_ANGLES = (120, 135, 150, 165, 180)  # issue 32's target: the far field helps at 120°–180° in each seed


def far_field_lines(records: List[Dict], dataset: str, angles) -> List[str]:
    """The paired far-field table (issue 32): per model with ``far_field_off`` scores, the test log-likelihood with
    the residual and without it (the same fit), seed means per angle, and in how many seeds it is better at every
    angle of :data:`SHIFT_ANGLES`."""
    lines: List[str] = []
    shift = [i for i, a in enumerate(angles) if a in SHIFT_ANGLES]
    for model in ALL_MODELS:
        rows = [r for r in records if r["dataset"] == dataset and r["model"] == model and "far_field_off" in r]
        if not rows:
            continue
        on = np.array([r["log_likelihood"] for r in rows])
        off = np.array([r["far_field_off"]["log_likelihood"] for r in rows])
        better = sum(bool(np.all(a[shift] > b[shift])) for a, b in zip(on, off)) if shift else 0
        lines += ["", f"**{LABELS[model]}: far-field residual on against off** (the same fit; test log-likelihood, seed means; "
                  f"seeds {sorted(r['seed'] for r in rows)})", "",
                  "| angle | on | off | on − off |", "|---|---|---|---|"]
        lines += [f"| {a}° | {on[:, i].mean():.3f} | {off[:, i].mean():.3f} | {on[:, i].mean() - off[:, i].mean():+.2e} |"
                  for i, a in enumerate(angles)]
        if shift:
            lines += ["", f"On better than off at every angle of {SHIFT_ANGLES[0]}°–{SHIFT_ANGLES[-1]}° in {better} of {len(rows)} seeds."]
    return lines


def lla_check_lines(table, angles) -> List[str]:
    """Issue 33's target for the LLA rows, per seed (rows paired with ``nn`` by seed): the angles at which the LLA's
    test NLL and ECE are both at or below the MAP network's (``nn``)."""
    if "nn" not in table or not any(m in table for m in LLA_MODELS):
        return []
    nn = table["nn"]
    lines = ["", "**LLA against its MAP network (NN), per seed**: angles where the LLA's test NLL and ECE are both at or below NN's", ""]
    for model in (m for m in LLA_MODELS if m in table):
        values, parts = table[model], []
        for seed, row, match in _paired_by_seed(table, model, "nn"):
            better = (values["log_likelihood"][row] >= nn["log_likelihood"][match]) & (values["ece"][row] <= nn["ece"][match])
            parts.append(f"seed {seed}: {int(better.sum())} of {len(angles)}")
        lines.append(f"- {LABELS[model]}: " + ("; ".join(parts) if parts else "no seed paired with NN") + ".")
    return lines


def _paired_by_seed(table, model: str, other: str) -> List[Tuple[int, int, int]]:
    """(seed, ``model``'s row, ``other``'s row) in :func:`aggregate`'s table for every seed both models have."""
    rows = []
    for row, seed in enumerate(table[model]["seeds"]):
        match = np.flatnonzero(table[other]["seeds"] == seed)
        if match.size:
            rows.append((int(seed), row, int(match[0])))
    return rows


def ensemble_check_lines(table, angles) -> List[str]:
    """Issue 36's ADGP ensemble paired by seed with its own first member (``adgp``: member 0 is that seed's frozen
    ADGP), with one fine-tuned ADGP and with the deep ensemble of the same networks: the angles at which the
    ensemble's test log-likelihood is above each."""
    if "adgp_ensemble" not in table:
        return []
    ensemble = table["adgp_ensemble"]["log_likelihood"]
    lines = ["", "**ADGP ensemble against single models, per seed**: angles where its test log-likelihood is above theirs", ""]
    for other in (m for m in ("adgp", "adgp_ft", "ensemble") if m in table):
        parts = [f"seed {seed}: {int(np.sum(ensemble[row] > table[other]['log_likelihood'][match]))} of {len(angles)}"
                 for seed, row, match in _paired_by_seed(table, "adgp_ensemble", other)]
        lines.append(f"- above {LABELS[other]}: " + ("; ".join(parts) if parts else "no seed paired") + ".")
    return lines


def write_report(records: List[Dict], dataset: str, doc: Path, figure: Path, command: str = BLOCK_COMMAND) -> None:
    table = aggregate(records, dataset)
    if table:
        angles = next(r for r in records if r["dataset"] == dataset)["angles"]
        plot(table, angles, figure, f"Rotated {dataset.replace('_', '-').upper() if dataset == 'mnist' else 'Fashion-MNIST'}: mean ± std over seeds")
        log(f"wrote {figure}")
    if not doc.is_file():
        doc.parent.mkdir(parents=True, exist_ok=True)
        doc.write_text(f"# Rotated {dataset}\n")
    write_block(doc, "rotated_mnist", report_markdown(records, dataset, figure), command, create=True)
    log(f"wrote {doc}")


def run_label(config: Dict) -> str:
    """A short name for a run's configuration: its truncation level and stage-2 options."""
    variance = config.get("kernel_variance", LATER_DEFAULTS["kernel_variance"])
    patience = config.get("dgp_patience", LATER_DEFAULTS["dgp_patience"])
    label = f"Ñ = {config['truncation_level']}, v {variance if isinstance(variance, str) else f'= {variance:g}'}"
    if config.get("kernel_variance_floor") is not None:
        label += f" ≥ {config['kernel_variance_floor']:g}"
    label += ", far field" if config.get("far_field") else ""
    return label + (f", stop after {patience}" if patience is not None else "")


def compare_runs(runs: Sequence[Tuple[List[Dict], Optional[Sequence[str]]]], dataset: str, figure: Optional[Path] = None) -> str:
    """Markdown (and optionally a figure) setting several runs' records side by side — e.g. Ñ = 8 against
    Ñ = 20 with and without the stage-2 remedies. ``runs``: (records, models to show or None for all). Per
    angle, the seed mean of the test log-likelihood and of the accuracy of every shown (run, model); the
    columns are named by :func:`run_label` and say how many seeds each mean has."""
    columns = []  # (name, table entry)
    for records, models in runs:
        rows = [r for r in records if r["dataset"] == dataset]
        if not rows:
            continue
        table, label = aggregate(rows, dataset), run_label(rows[0]["config"])
        for model, values in table.items():
            if models is None or model in models:
                columns.append((f"{LABELS[model]} ({label}; {len(values['seeds'])} seeds)", values, rows[0]["angles"]))
    if not columns:
        return "No finished records yet.\n"
    angles = columns[0][2]
    mismatched = [name for name, _, other in columns if list(other) != list(angles)]
    if mismatched:
        raise ValueError(f"runs evaluated at other angles than {angles} cannot share a table: {mismatched}")
    lines = []
    for metric in ("log_likelihood", "accuracy"):
        lines += ["", f"**{METRIC_LABELS[metric]}** (seed means)", "", "| angle | " + " | ".join(name for name, _, _ in columns) + " |",
                  "|---" * (len(columns) + 1) + "|"]
        for index, angle in enumerate(angles):
            lines.append(f"| {angle}° | " + " | ".join(f"{values[metric][:, index].mean():.3f}" for _, values, _ in columns) + " |")
        lines.append("| mean | " + " | ".join(f"{values[metric].mean():.3f}" for _, values, _ in columns) + " |")
    if figure is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(1, 2, figsize=(14, 4.5))
        for axis, metric in zip(axes, ("log_likelihood", "accuracy")):
            for name, values, _ in columns:
                axis.plot(angles, values[metric].mean(0), marker="o", markersize=3, label=name)
            _style_axis(axis, angles, METRIC_LABELS[metric] + " (seed means)")
        axes[0].legend(fontsize=7)
        fig.tight_layout()
        figure.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(figure, dpi=120)
        plt.close(fig)
    return "\n".join(lines).lstrip("\n") + "\n"


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
                        help=f"also run the controls of issue 36: {', '.join(CONTROLS)}")
    parser.add_argument("--ensemble-size", type=int, default=Config.ensemble_size, help="members of the deep ensembles")
    parser.add_argument("--lla", action="store_true",
                        help=f"also run the linearised-Laplace rows of issue 33 on nn's network: {', '.join(LLA_MODELS)}")
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
                        help="give each ADGP's output layer the far-field residual (issue 32); records also score the same fit without it")
    parser.add_argument("--kernel-variance-floor", type=float, default=None,
                        help="with --kernel-variance validation/elbo: never choose a v below this (issue 36's floor)")
    parser.add_argument("--stage2-remedies", action="store_true",
                        help=f"the stage-2 remedies of docs/results/stage2.md: --kernel-variance {REMEDIES['kernel_variance']} "
                             f"--dgp-patience {REMEDIES['dgp_patience']} (an explicit --kernel-variance / --dgp-patience wins)")
    parser.add_argument("--doc", default=None, help="results markdown whose generated block is rewritten (default <out>.md)")
    parser.add_argument("--figure", default=None, help="figure to write (default <out>/rotated_mnist.png; with --compare: none)")
    parser.add_argument("--compare", nargs="+", metavar="DIR[:MODEL,…]", default=None,
                        help="print a table setting these records directories side by side (optionally only the named "
                             "models of each; only the records of --seeds) and draw --figure; nothing is run")
    parser.add_argument("--block", default=None, help="with --compare and --doc: write the table into this generated block of --doc")


#: the pages ``python -m experiments report`` rewrites (the committed runs that have a page), then the comparison
#: tables of rotated_mnist.md (``--compare`` into a generated block)
REPORT_RUNS = [["--out", f"docs/results/{run}", "--doc", f"docs/results/{run}.md", "--figure", f"docs/figures/{run}.png"]
               for run in ("rotated_mnist", "rotated_mnist_n20_full", "rotated_mnist_n20_remedies", "rotated_mnist_controls")]
#: the stage-2 recipe screen's runs (issue 36; one records folder per recipe, experiments.recipes), those that have records
REPORT_RUNS += [["--out", f"docs/results/rotated_mnist_recipes/{recipe}", "--doc", f"docs/results/rotated_mnist_recipes_{recipe}.md",
                 "--figure", f"docs/figures/rotated_mnist_recipes_{recipe}.png"]
                for recipe in ("paper", "validation", "elbo", "floor")
                if (Path(__file__).resolve().parents[1] / f"docs/results/rotated_mnist_recipes/{recipe}/records.jsonl").exists()]
_RUNS = "docs/results/rotated_mnist"
REPORT_RUNS += [["--doc", "docs/results/rotated_mnist.md", "--block", block, "--compare", *compare]
                for block, compare in (
                    ("compare_n20", [f"{_RUNS}_n20_remedies:nn,nn_dropout,nn_ts", f"{_RUNS}:adgp", f"{_RUNS}_n20_full:adgp,adgp_ft",
                                     "--seeds", "0", "1", "2", "--figure", "docs/figures/rotated_mnist_n20_compare.png"]),
                    ("compare_remedies", [f"{_RUNS}_n20_remedies:nn_dropout,adgp,adgp_ft", f"{_RUNS}_n20_full:adgp,adgp_ft",
                                          "--seeds", "0", "1", "2"]),
                    ("compare_elbo", [f"{_RUNS}_n20_remedies:nn_dropout", f"{_RUNS}_n20_full:adgp,adgp_ft",
                                      f"{_RUNS}_n20_elbo:adgp,adgp_ft", "--seeds", "0"]),
                    ("compare_n20_reduced", [f"{_RUNS}_n20", "--seeds", "0"]))]


def report(records: List[Dict], options) -> None:
    """The page's generated block and figure from the records (of one protocol); with ``--compare`` the table of
    several records folders side by side instead."""
    if options.compare:
        text = compare_runs(_compared(options), options.dataset, Path(options.figure) if options.figure else None)
        if options.block and options.doc:  # the marker names this command, less --quiet
            write_block(options.doc, options.block, text, " ".join(a for a in options.command.split(" ") if a != "--quiet"))
        elif not options.quiet or not options.block:
            print(text, end="")
        return
    out = Path(options.out)
    write_report(records, options.dataset, Path(options.doc) if options.doc else page_path(options),
                 Path(options.figure) if options.figure else out / "rotated_mnist.png",
                 getattr(options, "report_command", None) or BLOCK_COMMAND)


def _compared(options) -> List[Tuple[List[Dict], Optional[Sequence[str]]]]:
    runs = []
    for entry in options.compare:
        folder, _, models = entry.partition(":")
        unknown = [m for m in models.split(",") if models and m not in ALL_MODELS]
        if unknown:
            raise SystemExit(f"--compare {entry!r}: unknown models {unknown}; choose from {', '.join(ALL_MODELS)}")
        path = Path(folder) / "records.jsonl"
        if not path.exists():
            raise SystemExit(f"--compare: no records at {path}")
        store = ResultStore(path, KEY, upgrade=upgrade, protocol=newest_protocol(path))
        runs.append(([r for r in store.records() if r["seed"] in options.seeds], models.split(",") if models else None))
    return runs


def main(argv: Optional[Sequence[str]] = None) -> list:
    """``python -m experiments.rotated_mnist …``: the same as ``python -m experiments rotated_mnist …``."""
    from experiments.harness import cli, registry

    return cli.main("rotated_mnist", registry.study("rotated_mnist"), argv)


if __name__ == "__main__":
    main()
