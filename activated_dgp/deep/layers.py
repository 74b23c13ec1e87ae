"""The library's GPflux layers, whose whole state survives tf-keras' ``.weights.h5`` format.

tf-keras' ``Model.save_weights("….weights.h5")`` (and the weights inside a ``.keras`` archive) stores each layer's
*own* variables only: for gpflux's ``GPLayer`` that is q_μ and q_sqrt, and the kernel's, the inducing variables'
(the activated directions W), the mean function's and the likelihood's parameters are silently left out, so
loading such a file into a fresh model gives a different model (measured: a mean error of 6.46 on the tutorial's
DGP). These subclasses save and load every variable the layer reaches (``layer.weights``, which walks the nested
GPflow modules) in a fixed order, and refuse a file whose variables do not match, naming the layer.

Their Keras losses are added in evaluation too, so that ``dgp.as_training_model().fit(…, validation_data=…)`` reports a
real ``val_loss``: the negative ELBO per data point on the validation batches, −(1/n) Σ_i E_q[log p(y_i | f(x_i))]
+ Σ_ℓ KL[q(u_ℓ) ‖ p(u_ℓ)] / N (the training loss's formula, with one sample through the hidden layers), where gpflux
adds 0 outside training and ``EarlyStopping("val_loss")`` would silently keep the first epoch. The likelihood
layer checks the targets: Y [N, P] with the output layer's P columns for real targets, one label column otherwise
(a 1-D y would broadcast against [N, 1] means into an [N, N] loss).

Importing this module also gives gpflux's own ``LikelihoodLayer`` these saving hooks, so that a ``.weights.h5`` file
of a model built with it keeps the likelihood's parameters (upstream silently leaves the Gaussian noise out, and
a reload brings back the noise the model was built with).

The one other difference: their ``call`` is traced as written, without AutoGraph's source conversion, inside Keras'
compiled train and predict functions. GPflow and gpflux need no conversion (their tensor-dependent branches are
``tf.cond``s, and their Python branches depend on shapes and settings only), but AutoGraph converts every function
they reach the first time a process traces them: about a fifth of the CPU time of a process's first ``fit`` of a
converted DGP, nothing once the conversions are cached (benchmarks/tracing.py). The results are the same. Otherwise
they are gpflux's ``GPLayer`` and ``LikelihoodLayer``.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import gpflow
import gpflux
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
import tf_keras
from gpflow.conditionals import conditional
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.kullback_leiblers import prior_kl
from gpflux.layers.likelihood_layer import unwrap_dist

from ..zonal.conditionals import SharedActivationFeature, fast_conditional_enabled, symmetric_variances_active
from ..zonal.owned_conditional import is_lower_fill_triangular, owned_layout, owned_marginals_and_kl

from .likelihoods import LIKELIHOOD_REGISTRY, likelihood_name

__all__ = ["ActivatedGPLayer", "LikelihoodLayer", "DeepGPModel", "check_target_shape", "gpflux_step"]

_owned_step = True


@contextlib.contextmanager
def gpflux_step() -> Iterator[None]:
    """Within this context, graphs traced for :class:`ActivatedGPLayer` take gpflux's ``GPLayer`` step: q_sqrt read
    and transformed in ``predict`` and again in ``prior_kl``, the conditional through GPflow's dispatch (for an
    activated layer, :mod:`activated_dgp.zonal.conditionals`' batched one). For comparisons (the dgp_epoch
    benchmark); like :func:`~activated_dgp.zonal.conditionals.gpflow_conditional` it acts at trace time."""
    global _owned_step
    previous, _owned_step = _owned_step, False
    try:
        yield
    finally:
        _owned_step = previous


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
    parameters too (module docstring), with the training step of :mod:`activated_dgp.zonal.owned_conditional`; built
    by :func:`activated_dgp.deep.builders.activated_gp_layer`.

    One call (a training or evaluation step) reads q_sqrt's variable and q_μ once, computes one Cholesky of Kuu
    and shares them between the conditional and the KL term. For the marginals (``full_cov = full_output_cov =
    False``) of a :class:`~activated_dgp.zonal.conditionals.SharedActivationFeature` layer with gpflux's
    lower-triangular q_sqrt, whitened or not, the mean, variance and KL come from q_sqrt's unconstrained vector
    without its ``fill_triangular`` transform, the P outputs' q_sqrt products skipping the zero upper triangle
    (:func:`~activated_dgp.zonal.owned_conditional.owned_marginals_and_kl`). Every other case (full covariances,
    other inducing variables or q_sqrt transforms, inside
    :func:`~activated_dgp.zonal.conditionals.gpflow_conditional`, predictions inside
    :func:`~activated_dgp.zonal.conditionals.symmetric_variances`) is GPflow's ``conditional`` and ``prior_kl``, given
    the q_sqrt value read once per call. The values are GPflow's to round-off. Inside :func:`gpflux_step` the layer
    takes gpflux's own step."""

    _step_values = None  # within call: the values one step shares between predict and prior_kl

    @tf.autograph.experimental.do_not_convert
    def call(self, inputs, *args, **kwargs):
        """gpflux's call, traced without AutoGraph, with its loss KL[q(u) ‖ p(u)] / N added in evaluation too
        (module docstring), q_sqrt and q_μ read once for the conditional and the KL. ``training`` gates nothing
        else in gpflux's GPLayer: the output distribution is the same."""
        object.__setattr__(self, "_step_values", {} if _owned_step else None)
        try:
            return super().call(inputs, *args, **{**kwargs, "training": True})
        finally:
            object.__setattr__(self, "_step_values", None)

    def _read(self, name: str, read):
        """A value read once per call (``read()`` outside a call, or inside :func:`gpflux_step`)."""
        if self._step_values is None:
            return read()
        if name not in self._step_values:
            self._step_values[name] = read()
        return self._step_values[name]

    def _q_sqrt(self) -> tf.Tensor:
        return self._read("q_sqrt", lambda: tf.convert_to_tensor(self.q_sqrt))

    def owns_conditional(self, full_cov: bool = False, full_output_cov: bool = False) -> bool:
        """Whether :meth:`predict` with these options takes the owned algebra (class docstring) at trace time."""
        return (
            _owned_step
            and fast_conditional_enabled()
            and not full_cov
            and not full_output_cov
            and not (symmetric_variances_active() and self._step_values is None)
            and isinstance(self.inducing_variable, SharedActivationFeature)
            and isinstance(self.kernel, gpflow.kernels.SharedIndependent)
            and is_lower_fill_triangular(self.q_sqrt.transform)
            and self.q_sqrt.shape.rank == 3
            and self.q_sqrt.shape.is_fully_defined()
        )

    def predict(self, inputs, *, full_cov: bool = False, full_output_cov: bool = False):
        """gpflux's ``predict`` (mean with the mean function, and the (co)variance), by the owned algebra where it
        applies (class docstring), else by GPflow's ``conditional`` on the q_sqrt value read once per call."""
        if not self.owns_conditional(full_cov, full_output_cov):
            mean, cov = conditional(
                inputs, self.inducing_variable, self.kernel, self.q_mu, q_sqrt=self._q_sqrt(),
                full_cov=full_cov, full_output_cov=full_output_cov, white=self.whiten,
            )
            return mean + self.mean_function(inputs), cov
        num_outputs, num_inducing = int(self.q_sqrt.shape[0]), int(self.q_sqrt.shape[1])
        Kmm = Kuu(self.inducing_variable, self.kernel, jitter=default_jitter())  # [M, M]
        Kmn = Kuf(self.inducing_variable, self.kernel, inputs)  # [M, batch..., N]
        Knn = self.kernel.kernel(inputs, full_cov=False)  # [batch..., N]
        with tf.name_scope("conditional"):
            Lm = tf.linalg.cholesky(Kmm)
        q_mu = self._read("q_mu", lambda: tf.convert_to_tensor(self.q_mu))
        x = self._read("q_sqrt_vector", lambda: tf.convert_to_tensor(self.q_sqrt.unconstrained_variable))
        mean, var, kl = owned_marginals_and_kl(
            tf.reshape(Kmn, [num_inducing, -1]), Lm, tf.reshape(Knn, [-1]), q_mu, x,
            owned_layout(num_inducing, num_outputs, self.whiten), self.whiten, with_kl=self._step_values is not None,
        )
        if kl is not None:
            self._step_values["prior_kl"] = kl
        shape = tf.concat([tf.shape(Knn), [num_outputs]], 0)  # [batch..., N, P]
        return tf.reshape(mean, shape) + self.mean_function(inputs), tf.reshape(var, shape)

    def prior_kl(self) -> tf.Tensor:
        """KL[q(u) ‖ p(u)] (KL[q(v) ‖ p(v)] whitened): within a call, the one the owned algebra computed with the
        conditional (class docstring), else GPflow's ``prior_kl`` on the q_sqrt value read once per call."""
        if self._step_values is not None and "prior_kl" in self._step_values:
            return self._step_values["prior_kl"]
        return prior_kl(self.inducing_variable, self.kernel, self.q_mu, self._q_sqrt(), whiten=self.whiten)


class LikelihoodLayer(_SavesNestedVariables, gpflux.layers.LikelihoodLayer):
    """gpflux's ``LikelihoodLayer`` whose ``.weights.h5`` state holds the likelihood's parameters (e.g. the
    Gaussian noise variance). Named as gpflux's, so that Keras names its instances as it names gpflux's."""

    def __init__(self, likelihood, **kwargs):
        if not isinstance(likelihood, gpflow.likelihoods.Likelihood):
            raise ValueError(f"LikelihoodLayer takes a gpflow likelihood (e.g. gpflow.likelihoods.Gaussian()), got {likelihood!r}")
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
        if targets is not None:
            check_target_shape(self.likelihood, targets.shape, inputs.loc.shape[-1])
        outputs = super().call(inputs, targets=targets, training=training)
        if not training and targets is not None:  # gpflux adds 0 here: the same data term as in training
            F_mean, F_var = inputs.loc, inputs.scale.diag ** 2
            self.add_loss(tf.reduce_mean(-self.likelihood.variational_expectations(None, F_mean, F_var, targets)))
        return outputs


def check_target_shape(likelihood, shape, width) -> None:
    """A ValueError naming the problem unless targets of ``shape`` fit a likelihood over ``width`` latent outputs: rank
    2, with ``width`` columns for real targets (a Gaussian likelihood) or one label column (Bernoulli, softmax).
    Unknown (None) sizes pass; an unregistered likelihood is checked for rank only."""
    shape = tf.TensorShape(shape)
    if shape.rank is not None and shape.rank != 2:
        raise ValueError(
            f"the targets must be a matrix Y [N, P], got shape {shape} (a 1-D y of length N would broadcast against the "
            "[N, P] predictions into an [N, N] loss): pass y[:, None]"
        )
    try:
        targets = LIKELIHOOD_REGISTRY[likelihood_name(likelihood)].targets
    except ValueError:
        return
    expected = width if targets == "real" else 1
    got = shape[-1] if shape.rank is not None else None
    if got is not None and expected is not None and got != expected:
        what = f"the output layer's {expected} output columns" if targets == "real" else "one label column"
        raise ValueError(f"the targets must have {what} ({likelihood_name(likelihood)} likelihood), got shape {shape}")


def _nested_saving_hooks(cls) -> None:
    """Give gpflux's ``cls`` the saving hooks of :class:`_SavesNestedVariables` (module docstring), where it has none
    of its own: its ``.weights.h5`` state then round-trips whole, or a mismatched file is refused naming the layer."""
    for name in ("save_own_variables", "load_own_variables"):
        if name not in vars(cls):
            setattr(cls, name, getattr(_SavesNestedVariables, name))


_nested_saving_hooks(gpflux.layers.LikelihoodLayer)


def build_optimizer_state(model: tf_keras.Model) -> None:
    """Create the compiled optimizer's state (Adam's moments, its step counter) for ``model.trainable_variables``
    before the first training step, so that Keras traces the train step once instead of twice.

    ``tf.function`` traces a function that creates variables a second time, without creating them (TensorFlow's rule
    for lifting variable creation out of a traced function). A tf-keras optimizer creates its slots lazily in its first
    ``apply_gradients``, inside the train step, so every fresh ``compile`` + ``fit`` paid two traces of the whole ELBO
    and its gradient (measured in benchmarks/tracing.py). The slots made here are the ones that first step would make
    (``Optimizer.build(trainable_variables)`` under the optimizer's name, which the step then skips), so training and
    the state's names are unchanged. Nothing is done for a model that has no variables yet, a legacy optimizer, or
    one already built (so calling it again is free)."""
    optimizer = getattr(model, "optimizer", None)
    if not isinstance(optimizer, tf_keras.optimizers.Optimizer) or getattr(optimizer, "_built", False) or not model.built:
        return
    variables = model.trainable_variables
    if variables:
        with model.distribute_strategy.scope(), tf.name_scope(optimizer.name or "optimizer"):  # Keras' own names
            optimizer.build(variables)


class DeepGPModel(tf_keras.Model):
    """The Keras model of ``dgp.as_training_model()`` / ``as_prediction_model()`` for the library's DGPs (their
    ``default_model_class``): tf-keras' own, with the training data checked before Keras sees them. ``fit`` and
    ``evaluate`` of ``{"inputs": X, "targets": Y}`` (and ``validation_data``) need X and Y with the same N and Y
    [N, P] that fits the likelihood (:func:`check_target_shape`); tf-keras itself reports a different N as
    ``AttributeError: 'str' object has no attribute 'shape'``, and a 1-D y would broadcast."""

    def _check_data(self, data, what: str) -> None:
        if not isinstance(data, dict) or not {"inputs", "targets"} <= set(data):
            return
        inputs, targets = data["inputs"], data["targets"]
        if not all(isinstance(a, (np.ndarray, tf.Tensor)) for a in (inputs, targets)):
            return  # datasets and generators carry their own batches
        rows = (int(np.shape(inputs)[0]), int(np.shape(targets)[0]) if np.ndim(targets) else 0)
        if rows[0] != rows[1]:
            raise ValueError(f"the {what} inputs and targets must have the same number of rows N, got {rows[0]} and {rows[1]}")
        likelihoods = [layer for layer in self.layers if isinstance(layer, gpflux.layers.LikelihoodLayer)]
        widths = [layer.num_latent_gps for layer in self.layers if isinstance(layer, gpflux.layers.GPLayer)]
        if likelihoods:
            check_target_shape(likelihoods[0].likelihood, np.shape(targets), widths[-1] if widths else None)

    def fit(self, x=None, y=None, *args, **kwargs):
        self._check_data(x, "training")
        validation = kwargs.get("validation_data")
        if isinstance(validation, (tuple, list)) and validation:
            self._check_data(validation[0], "validation")
        build_optimizer_state(self)
        return super().fit(x, y, *args, **kwargs)

    def evaluate(self, x=None, y=None, *args, **kwargs):
        self._check_data(x, "evaluation")
        return super().evaluate(x, y, *args, **kwargs)
