"""Deep models: activated DGPs in GPflux, their network twin, the converter between them, prediction and saving.

Modules:

* :mod:`~activated_dgp.deep.likelihoods` — names → likelihood, latent GPs and the twin's loss
  (:data:`LIKELIHOOD_REGISTRY`);
* :mod:`~activated_dgp.deep.config` — :class:`ArchitectureConfig`, the one description of an architecture that the
  builders, the converter and saving share;
* :mod:`~activated_dgp.deep.twin` — the network twin: :class:`ActivatedLayer`, :func:`build_activated_nn`;
* :mod:`~activated_dgp.deep.far_field` — the far-field residual kernel;
* :mod:`~activated_dgp.deep.layers` — the GPflux layers' Keras state: :class:`LikelihoodLayer` (gpflux's, whose
  ``.weights.h5`` state keeps the likelihood's parameters; use it when stacking a ``gpflux.models.DeepGP`` by hand);
* :mod:`~activated_dgp.deep.builders` — the DGP builders and layer factory: :func:`build_activated_dgp`,
  :func:`activated_gp_layer`;
* :mod:`~activated_dgp.deep.sampling` — checks of a DGP and its inputs, :func:`propagate_means` (the twin's forward
  pass) and the propagation of samples through the layers;
* :mod:`~activated_dgp.deep.draws` — the seeded normal draws of the Monte Carlo predictions;
* :mod:`~activated_dgp.deep.prediction_memory` — the rows per batch of a prediction under a memory budget;
* :mod:`~activated_dgp.deep.prediction`, :mod:`~activated_dgp.deep.batch_prediction` — :func:`predict_y`,
  :func:`predict_class_probabilities`, :func:`predictive_log_density`, :func:`layer_moments`,
  :class:`BatchPredictor`;
* :mod:`~activated_dgp.deep.diagnostics` — KL and mismatch diagnostics of a converted model;
* :mod:`~activated_dgp.deep.posterior_mean` — the q_μ that gives a layer given posterior-mean weights, the weights a
  q_μ gives, the KL the mean carries;
* :mod:`~activated_dgp.deep.network_reading` — reading a tf-keras network: its runs of activated units, its classifier
  head and the likelihood it stands for, the split into a feature extractor and a convertible head;
* :mod:`~activated_dgp.deep.conversion` — planning and building a network's GP layers: :func:`dgp_from_keras`,
  :class:`ConversionReport`;
* :mod:`~activated_dgp.deep.introspection` — a built model's architecture read back from the object;
* :mod:`~activated_dgp.deep.persistence` — :func:`save_dgp`, :func:`load_dgp`, :func:`save_network`,
  :func:`load_network`, :func:`load_optimizer`, :func:`load_training_state`, :class:`DGPCheckpoint`.

Training lives in :mod:`activated_dgp.training` (with the choice of a converted layer's kernel variance,
:func:`activated_dgp.training.select_kernel_variances`), data sources in :mod:`activated_dgp.data`.

Renamed names (the old ones still resolve from ``activated_dgp`` and their modules, with a DeprecationWarning):
``Conversion`` → ``ConversionReport`` (the converted DGP with its mismatch report), ``LIKELIHOODS`` →
``LIKELIHOOD_REGISTRY`` (names → likelihood, latent GPs and the twin's loss), ``load_state`` →
``load_training_state`` (the epoch and logs a checkpoint saved, not the model's state).
"""

from .batch_prediction import BatchPredictor
from .config import ArchitectureConfig
from .conversion import ConversionReport, dgp_from_keras
from .layers import LikelihoodLayer
from .likelihoods import LIKELIHOOD_REGISTRY
from .builders import activated_gp_layer, build_activated_dgp
from .twin import ActivatedLayer, build_activated_nn
from .persistence import (
    DGPCheckpoint,
    load_dgp,
    load_network,
    load_optimizer,
    load_training_state,
    save_dgp,
    save_network,
)
from .prediction import layer_moments, predict_class_probabilities, predict_y, predictive_log_density
from .sampling import propagate_means

__all__ = [
    "ArchitectureConfig",
    "build_activated_dgp",
    "activated_gp_layer",
    "LikelihoodLayer",
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
