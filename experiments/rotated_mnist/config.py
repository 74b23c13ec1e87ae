"""The rotated-MNIST study's vocabulary and configuration: the models, angles and metrics, :class:`Config` (everything
that changes the numbers) with its digests, and the record protocols (:func:`upgrade`, :func:`newest_protocol`)."""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass, replace
from typing import Dict, Optional, Union

import numpy as np

from experiments.harness.protocol import SETTINGS_FIELD, Protocol, config_digest, relabel
from experiments.harness.store import ResultStore

MODELS = ("nn", "nn_dropout", "nn_ts", "adgp", "adgp_ft")
#: the controls: the networks given ADGP's extra stage-2 epochs, and deep ensembles of networks and of ADGPs
CONTROLS = ("nn_ft", "nn_ts_ft", "nn_dropout_ft", "ensemble", "adgp_ensemble")
#: the LLA rows on ``nn``'s network (--lla)
LLA_MODELS = ("lla_last_layer", "lla_diagonal", "lla_neuralef")
#: the plain tf-keras CNN a user has (ReLU, softmax head) and what the library makes of it (--plain-cnn)
PLAIN_MODELS = ("plain_cnn", "plain_cnn_ts", "plain_cnn_as_is_adgp", "plain_cnn_adgp", "plain_cnn_convertible_adgp")
ALL_MODELS = MODELS + CONTROLS + LLA_MODELS + PLAIN_MODELS
LABELS = {"nn": "NN", "nn_dropout": "NN + Dropout", "nn_ts": "NN + TS", "adgp": "ADGP", "adgp_ft": "ADGP + conv fine-tuned",
          "nn_ft": "NN + extra epochs", "nn_ts_ft": "NN + extra epochs + TS", "nn_dropout_ft": "NN + Dropout + extra epochs",
          "ensemble": "Deep ensemble", "adgp_ensemble": "ADGP ensemble",
          "lla_last_layer": "LLA last layer", "lla_diagonal": "LLA diagonal", "lla_neuralef": "LLA NeuralEF",
          "plain_cnn": "Plain CNN", "plain_cnn_ts": "Plain CNN + TS", "plain_cnn_adgp": "Plain CNN → train_two_stage",
          "plain_cnn_as_is_adgp": "Plain CNN → train_two_stage(make_convertible=False)",
          "plain_cnn_convertible_adgp": "Plain CNN → make_convertible → train_two_stage"}
STAGE2_OPTIMIZER = "Adam"  # stage 2 and the networks' extra epochs (models.stage2_schedule): the library's Adam
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
    # and keeps its best training-ELBO check; records made before have no such field, so they are
    # never mixed with new runs (the networks, which it does not change, are still shared: stage1_digest)
    stage2_defaults: str = "ramp-guard"
    ensemble_size: int = 5  # members of the deep ensembles (ensemble, adgp_ensemble)
    # the output layer's far-field residual (activated_dgp.deep.far_field.add_far_field, fitted on the conv
    # features of the training images, re-centred after stage 2); every ADGP record then also scores the same fit
    # with the residual switched off (``far_field_off``)
    far_field: bool = False
    # the "floor on v": the kernel-variance search never goes below it (needs kernel_variance "validation"/"elbo")
    kernel_variance_floor: Optional[float] = None
    lla_eigenpairs: int = 20  # k of lla_neuralef
    lla_neuralef_steps: int = 2000  # NeuralEF steps of lla_neuralef
    convertible_steps: int = 10_000  # make_convertible's fine-tuning steps (its default) in plain_cnn_convertible_adgp

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
                  "lla_eigenpairs": 20, "lla_neuralef_steps": 2000, "convertible_steps": 10_000}
REMEDIES = {"kernel_variance": "validation", "dgp_patience": 5}  # --stage2-remedies: (a2) + (e)
#: Protocols (the harness's :class:`~experiments.harness.protocol.Protocol`): the cell definition as the version,
#: the configuration (:meth:`Config.as_record`) as the settings, and the models whose stage 2 changed as per-model
#: settings (:func:`protocol_of`). CELL_PROTOCOL: one (seed, model) per cell, ``eval_seconds`` the model's own
#: time, ``feature_seconds`` the conv features'. Records made before the study moved onto the harness carry no
#: protocol: their cells were "all models of a seed" (``eval_seconds`` splitting the shared feature time across the
#: models), LEGACY_PROTOCOL.
LEGACY_PROTOCOL = "seed-group"
CELL_PROTOCOL = "seed-model/1"
#: the models whose stage 2 (the fine-tuned ADGP's) or extra epochs (its controls') are fitted by the library's
#: train_dgp_with_extractor and train_network ("library"); records made before, by a Keras fit of the study's own
#: (full minibatches only, no learning-rate ramp, guard or plateau), read as "study-fit" and are not carried over
STAGE2_MODELS = ("adgp_ft", "nn_ft", "nn_ts_ft", "nn_dropout_ft")
STAGE2_FIT = "library"


def protocol_of(settings: Dict, stage2_fit: str = STAGE2_FIT, version: str = CELL_PROTOCOL) -> Protocol:
    """The protocol of records made under the configuration ``settings`` (:meth:`Config.as_record`), with the stage 2
    of :data:`STAGE2_MODELS` fitted by ``stage2_fit``: a record of any other model carries over between the two."""
    return Protocol(version, settings, methods={model: {"stage2_fit": stage2_fit} for model in STAGE2_MODELS}, method_field="model")


def protocol(config: "Config") -> Protocol:
    """The protocol a run under ``config`` stamps on its records."""
    return protocol_of(config.as_record())


def upgrade(record: Dict) -> Dict:
    """A record as the harness reads it: one stamped with a :class:`Protocol` as it is; one made before the study
    declared it (``seed-model/1:<config digest>``, or no protocol: LEGACY_PROTOCOL) relabelled as made under
    :func:`protocol_of` its configuration, by the study's own stage-2 fit, or by the library's where its stored
    configuration says ``stage2_fit: library`` (the first runs through the library, whose records name it there)."""
    if SETTINGS_FIELD in record:
        return record
    stored = record.get("config")
    key = record.get("protocol")
    if not isinstance(stored, dict):
        return record
    if key is None:
        version = LEGACY_PROTOCOL
    elif key == f"{CELL_PROTOCOL}:{config_digest(stored)}":
        version = CELL_PROTOCOL
    else:
        return record
    settings = {name: value for name, value in stored.items() if name != "stage2_fit"}
    return relabel(record, protocol_of(settings, stored.get("stage2_fit", "study-fit"), version))


def newest_protocol(path) -> Union[Protocol, str, None]:
    """The protocol of the file's newest record, as a page shows it: the current :func:`protocol` of its
    configuration when the record was made under it (so records of unchanged models made before carry over), else
    that record's own protocol key."""
    records = ResultStore(path, KEY, upgrade=upgrade).all_records()
    if not records:
        return None
    newest = records[-1]
    settings = newest.get(SETTINGS_FIELD)
    if isinstance(settings, dict) and isinstance(settings.get("shared"), dict):
        current = protocol_of(settings["shared"])
        if current.key == newest.get("protocol"):
            return current
    return newest.get("protocol")


VALIDATION_SAMPLES = 16  # samples of the validation NLPD (train_dgp's default), seeded with 0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)
