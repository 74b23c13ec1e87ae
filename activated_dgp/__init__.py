"""activated_dgp: activated deep Gaussian processes and zonal spectral machinery on GPflow/GPflux.

The top level holds what the README and the tutorials type; the rest lives in subpackages that show the
architecture, each importing only from those listed before it:

* :mod:`activated_dgp.zonal` — the zonal core: Gegenbauer machinery, Funk–Hecke coefficients and their precision
  policy, activations and their spectra, kernels, activated inducing variables with their covariances and
  conditional (registered through GPflow's dispatch);
* :mod:`activated_dgp.deep` — deep models: the architecture config, the network twin, the DGP builders and layers,
  likelihoods, the converter, the far field, prediction, saving and diagnostics;
* :mod:`activated_dgp.data` — UCI and MNIST loaders, streaming minibatch sources;
* :mod:`activated_dgp.training` — schedules, the two stages, callbacks and distributed training;
* :mod:`activated_dgp.eigen` — eigenfunctions of kernels (Nyström, NeuralEF, IKA, feature regression, Laplace);
* :mod:`activated_dgp.kernel_machines` — EigenPro 2 and 3.

At the top level: :class:`ZonalArcCosine`, :class:`ActivationFeature` (the zonal core's two user-facing classes);
:func:`build_activated_nn`, :func:`build_activated_dgp`, :func:`activated_gp_layer`, :func:`dgp_from_keras`;
:class:`TrainingSchedule`, :func:`train_network`, :func:`train_dgp`, :func:`train_dgp_with_extractor`, :func:`train_two_stage`, :func:`make_convertible`, :func:`evaluate_elbo`;
:func:`predict_y`, :func:`predict_class_probabilities`, :func:`predictive_log_density`, :func:`propagate_means`;
:func:`save` and :func:`load` (:mod:`activated_dgp.saving`: one ``tf.train.Checkpoint`` format for everything the
library makes), :func:`save_dgp`, :func:`load_dgp`.

Names and module paths of the previous release still resolve for one release, with a DeprecationWarning naming
their new home (``activated_dgp.spherical is deprecated; use activated_dgp.zonal.spherical and
activated_dgp.zonal.funk_hecke``). :data:`DEPRECATED` lists the names, :data:`MOVED_MODULES` the module paths.
"""

from . import data, deep, eigen, kernel_machines, saving, training, zonal
from ._deprecation import deprecated_aliases, deprecated_module_paths
from .deep import (
    activated_gp_layer,
    build_activated_dgp,
    build_activated_nn,
    dgp_from_keras,
    load_dgp,
    predict_class_probabilities,
    predict_y,
    predictive_log_density,
    propagate_means,
    save_dgp,
)
from .saving import load, save
from .training import (
    TrainingSchedule,
    evaluate_elbo,
    make_convertible,
    train_dgp,
    train_dgp_with_extractor,
    train_network,
    train_two_stage,
)
from .zonal import ActivationFeature, ZonalArcCosine

__all__ = [
    # subpackages
    "zonal",
    "deep",
    "training",
    "eigen",
    "kernel_machines",
    "data",
    "saving",
    # the zonal core
    "ZonalArcCosine",
    "ActivationFeature",
    # deep models and the converter
    "build_activated_nn",
    "build_activated_dgp",
    "activated_gp_layer",
    "dgp_from_keras",
    # training
    "TrainingSchedule",
    "train_network",
    "train_dgp",
    "train_dgp_with_extractor",
    "train_two_stage",
    "make_convertible",
    "evaluate_elbo",
    # prediction and saving
    "predict_y",
    "predict_class_probabilities",
    "predictive_log_density",
    "propagate_means",
    "save",
    "load",
    "save_dgp",
    "load_dgp",
]


def _moved(home: str, *names: str) -> dict:
    return {name: (f"activated_dgp.{home}", name) for name in names}


#: Old top-level name → (new home, new name), each resolved by ``__getattr__`` with a DeprecationWarning.
DEPRECATED = {
    **_moved("zonal", "ZonalKernel", "basis_coefficients", "inducing_coefficients", "register_activation",
             "activation_coefficients", "arc_cosine_coefficients", "arc_cosine_shape", "relu_coefficients",
             "zonal_matern52_shape", "funk_hecke_coefficients", "gegenbauer_series", "num_harmonics"),
    "Activation": ("activated_dgp.zonal", "ZonalActivation"),
    "ACTIVATIONS": ("activated_dgp.zonal", "ACTIVATION_REGISTRY"),
    "set_xla": ("activated_dgp.zonal", "use_xla_for_gegenbauer"),
    **_moved("deep", "ArchitectureConfig", "ActivatedLayer", "layer_moments", "BatchPredictor", "save_network",
             "load_network", "load_optimizer", "DGPCheckpoint"),
    "Conversion": ("activated_dgp.deep", "ConversionReport"),
    "LIKELIHOODS": ("activated_dgp.deep", "LIKELIHOOD_REGISTRY"),
    "load_state": ("activated_dgp.deep", "load_training_state"),
    **_moved("training", "TwoStageResult"),
    **_moved("data", "ArraySource", "CsvSource"),
    **_moved("eigen", "Nystrom", "NeuralEF", "LinearisedLaplace", "EigenfunctionFeature", "IKA", "FeatureRidge"),
    **_moved("kernel_machines", "EigenPro2", "EigenPro3"),
}

__getattr__ = deprecated_aliases(__name__, DEPRECATED)


def _homes(*modules: str) -> tuple:
    return tuple(f"activated_dgp.{module}" for module in modules)


#: Old module path → its new home(s), importable with a DeprecationWarning for one release.
MOVED_MODULES = {
    f"activated_dgp.{old}": _homes(*new)
    for old, new in {
        "spherical": ("zonal.spherical", "zonal.funk_hecke"),
        "extended_precision": ("zonal.funk_hecke", "zonal.spherical"),
        "spectra": ("zonal.spectra",),
        "kernels": ("zonal.kernels",),
        "inducing_variables": ("zonal.inducing_variables",),
        "covariances": ("zonal.covariances",),
        "conditionals": ("zonal.conditionals",),
        "config": ("deep.config",),
        "nn": ("deep.twin",),
        "models": ("deep.builders",),
        "layers": ("deep.layers",),
        "likelihoods": ("deep.likelihoods",),
        "conversion": ("deep.conversion", "deep.network_reading"),
        "far_field": ("deep.far_field",),
        "prediction": ("deep.prediction", "deep.sampling", "deep.draws"),
        "batch_prediction": ("deep.batch_prediction",),
        "persistence": ("deep.persistence",),
        "diagnostics": ("deep.diagnostics",),
        "introspection": ("deep.introspection",),
        "streaming": ("data.streaming",),
        "distributed": ("training.distributed",),
        "deep.variance_selection": ("training.recipes",),
    }.items()
}
deprecated_module_paths(MOVED_MODULES)


def __dir__():
    return sorted(__all__ + ["DEPRECATED", "MOVED_MODULES", "__version__"])


__version__ = "0.2.0"
