"""Deep models: activated DGPs in GPflux, their network twin, the converter between them, prediction and saving.

A namespace: it re-exports, from the modules that implement them (imports go down only; no implementation module
imports this one),

* architecture and builders (:mod:`activated_dgp.config`, :mod:`activated_dgp.models`, :mod:`activated_dgp.likelihoods`):
  :class:`ArchitectureConfig`, :func:`build_activated_dgp`, :func:`activated_gp_layer`,
  :data:`LIKELIHOOD_REGISTRY`;
* the network twin (:mod:`activated_dgp.nn`): :class:`ActivatedLayer`, :func:`build_activated_nn`;
* conversion (:mod:`activated_dgp.conversion`): :func:`dgp_from_keras`, :class:`ConversionReport`;
* prediction (:mod:`activated_dgp.prediction`, :mod:`activated_dgp.batch_prediction`): :func:`predict_y`,
  :func:`predict_class_probabilities`, :func:`predictive_log_density`, :func:`propagate_means`,
  :func:`layer_moments`, :class:`BatchPredictor`;
* saving (:mod:`activated_dgp.persistence`): :func:`save_dgp`, :func:`load_dgp`, :func:`save_network`,
  :func:`load_network`, :func:`load_optimizer`, :func:`load_training_state`, :class:`DGPCheckpoint`.

The far-field residual is in :mod:`activated_dgp.far_field`. Training lives in :mod:`activated_dgp.training`, data sources in :mod:`activated_dgp.data`.

Renamed here (the old names still resolve from ``activated_dgp`` and their modules, with a DeprecationWarning):
``Conversion`` → ``ConversionReport`` (the converted DGP with its mismatch report), ``LIKELIHOODS`` →
``LIKELIHOOD_REGISTRY`` (names → likelihood, latent GPs and the twin's loss), ``load_state`` →
``load_training_state`` (the epoch and logs a checkpoint saved, not the model's state).
"""

from .batch_prediction import BatchPredictor
from .config import ArchitectureConfig
from .conversion import ConversionReport, dgp_from_keras
from .likelihoods import LIKELIHOOD_REGISTRY
from .models import activated_gp_layer, build_activated_dgp
from .nn import ActivatedLayer, build_activated_nn
from .persistence import (
    DGPCheckpoint,
    load_dgp,
    load_network,
    load_optimizer,
    load_training_state,
    save_dgp,
    save_network,
)
from .prediction import layer_moments, predict_class_probabilities, predict_y, predictive_log_density, propagate_means

__all__ = [
    "ArchitectureConfig",
    "build_activated_dgp",
    "activated_gp_layer",
    "LIKELIHOOD_REGISTRY",
    "ActivatedLayer",
    "build_activated_nn",
    "dgp_from_keras",
    "ConversionReport",
    "predict_y",
    "predict_class_probabilities",
    "predictive_log_density",
    "propagate_means",
    "layer_moments",
    "BatchPredictor",
    "save_dgp",
    "load_dgp",
    "save_network",
    "load_network",
    "load_optimizer",
    "load_training_state",
    "DGPCheckpoint",
]
