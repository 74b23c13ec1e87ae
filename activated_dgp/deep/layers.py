"""The library's GPflux layers, whose whole state survives tf-keras' ``.weights.h5`` format.

tf-keras' ``Model.save_weights("….weights.h5")`` (and the weights inside a ``.keras`` archive) stores each layer's
*own* variables only: for gpflux's ``GPLayer`` that is q_μ and q_sqrt, and the kernel's, the inducing variables'
(the activated directions W), the mean function's and the likelihood's parameters are silently left out, so
loading such a file into a fresh model gives a different model (measured: a mean error of 6.46 on the tutorial's
DGP). These subclasses save and load every variable the layer reaches (``layer.weights``, which walks the nested
GPflow modules) in a fixed order, and refuse a file whose variables do not match, naming the layer.

The one other difference: their ``call`` is traced as written, without AutoGraph's source conversion, inside Keras'
compiled train and predict functions. GPflow and gpflux need no conversion (their tensor-dependent branches are
``tf.cond``s, and their Python branches depend on shapes and settings only), but AutoGraph converts every function
they reach the first time a process traces them: about a fifth of the CPU time of a process's first ``fit`` of a
converted DGP, nothing once the conversions are cached (benchmarks/tracing.py). The results are the same. Otherwise
they are gpflux's ``GPLayer`` and ``LikelihoodLayer``.
"""

from __future__ import annotations

import warnings

import gpflux
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from gpflux.layers.likelihood_layer import unwrap_dist

__all__ = ["ActivatedGPLayer", "LikelihoodLayer"]


WHOLE_MODEL_ERROR = (
    "a DeepGP's Keras models cannot be saved whole (.keras or SavedModel): gpflux's layers hold GPflow modules and "
    "return distributions, which tf-keras can neither serialise nor trace. Save the state instead: "
    "model.save_weights('….weights.h5') or tf.train.Checkpoint(model=model) into a DGP of the same architecture, "
    "or activated_dgp.save_dgp(dgp, directory), which also records the architecture (the saving tutorial, docs/tutorials/saving_and_resuming.py)."
)


class _SavesNestedVariables:
    """``save_own_variables`` / ``load_own_variables`` (tf-keras' saving hooks) over all of ``self.weights``, and
    a clear error instead of upstream's for whole-model saving (``get_config``)."""

    def get_config(self):
        raise NotImplementedError(WHOLE_MODEL_ERROR)

    def save_own_variables(self, store) -> None:
        for index, variable in enumerate(self.weights):
            store[f"{index}"] = variable.numpy()

    def load_own_variables(self, store) -> None:
        variables = self.weights
        if len(store.keys()) != len(variables):
            raise ValueError(
                f"cannot load layer {self.name!r}: the file holds {len(store.keys())} variables, the layer has "
                f"{len(variables)} ({[v.name for v in variables]}). Was it saved from the same architecture? "
                "activated_dgp.save_dgp / load_dgp also rebuild the architecture."
            )
        for index, variable in enumerate(variables):
            value = np.asarray(store[f"{index}"])
            if value.shape != tuple(variable.shape):
                raise ValueError(
                    f"cannot load layer {self.name!r}: variable {index} ({variable.name}) has shape "
                    f"{tuple(variable.shape)}, the file {value.shape}"
                )
            variable.assign(value)


class ActivatedGPLayer(_SavesNestedVariables, gpflux.layers.GPLayer):
    """gpflux's ``GPLayer`` whose ``.weights.h5`` state holds the kernel, inducing-variable and mean-function
    parameters too (module docstring); built by :func:`activated_dgp.deep.builders.activated_gp_layer`."""

    @tf.autograph.experimental.do_not_convert
    def call(self, *args, **kwargs):
        """gpflux's call, traced without AutoGraph (module docstring)."""
        return super().call(*args, **kwargs)


class LikelihoodLayer(_SavesNestedVariables, gpflux.layers.LikelihoodLayer):
    """gpflux's ``LikelihoodLayer`` whose ``.weights.h5`` state holds the likelihood's parameters (e.g. the
    Gaussian noise variance). Named as gpflux's, so that Keras names its instances as it names gpflux's."""

    def __init__(self, likelihood, **kwargs):
        with warnings.catch_warnings():  # gpflux 0.4.5 warns about its own base class (TrackableLayer)
            warnings.filterwarnings("ignore", message=".*TrackableLayer.*", category=DeprecationWarning)
            super().__init__(likelihood, **kwargs)

    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, targets=None, training=None):
        """gpflux's call, traced without AutoGraph (module docstring); a plain tensor in place of the last layer's
        distribution (what SavedModel tracing passes) gets :data:`WHOLE_MODEL_ERROR` instead of gpflux's bare
        ``AssertionError``."""
        if not isinstance(unwrap_dist(inputs), tfp.distributions.MultivariateNormalDiag):
            raise TypeError(f"{self.name} received {type(inputs).__name__}, not the last GP layer's distribution: " + WHOLE_MODEL_ERROR)
        return super().call(inputs, targets=targets, training=training)
