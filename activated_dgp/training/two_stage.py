"""Two-stage training (Dutordoir et al., 2021, Sec. 5.1, appendix E.1): fit the network twin on
MSE or cross-entropy, convert it to an activated DGP, then optimise the ELBO over all DGP parameters
(:func:`train_two_stage`, :class:`TwoStageResult`; the held-out split :func:`split_validation`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
import warnings
from typing import Optional, Sequence, Tuple, Union

import gpflux
import numpy as np
import tensorflow as tf
import tf_keras

from ..deep.config import ArchitectureConfig
from ..deep.conversion import dgp_from_keras
from ..deep.network_reading import _logit_chain, head_likelihood, relu_layers, resolve_head_likelihood, split_convertible_head
from ..deep.far_field import add_far_field, far_field_options, refit_far_field
from ..deep.builders import likelihood_name, output_width
from ..deep.likelihoods import network_loss
from ..deep.prediction import predict_class_probabilities, predict_y, predictive_log_density
from ..deep.twin import build_activated_nn
from ..validation import check_targets
from .extractor import _check_inputs, extracted_features, train_dgp_with_extractor
from .convertible import ConvertibleNetwork, make_convertible as _make_convertible
from .fitters import _check_data, evaluate_elbo, train_dgp, train_network
from .recipes import (
    DEFAULT_RECIPE, NOISE_FACTORS, STAGE2_RECIPES, VALIDATION_SPLITS, Stage2Recipe, check_variance_floor, rescale_kernel_variance, select_kernel_variances,
    stage2_recipe,
)
from .schedule import TrainingSchedule

__all__ = ["TwoStageResult", "split_validation", "train_two_stage"]


@dataclass
class TwoStageResult:
    """What :func:`train_two_stage` returns: the trained network and DGP, the two stages' histories and the
    conversion's record. Predict with its methods, which take the same inputs as the network (images for a
    network with a feature extractor): :meth:`predict_y`, :meth:`predict_class_probabilities`,
    :meth:`predict_log_density`, each on :meth:`features` of X."""

    network: tf_keras.Model
    dgp: gpflux.models.DeepGP
    network_history: dict = field(default_factory=dict)
    dgp_history: dict = field(default_factory=dict)
    conversion_mismatch: Optional[float] = None
    initial_elbo: Optional[float] = None  # the converted DGP's ELBO before stage 2 (evaluate_elbo)
    kernel_variances: Optional[list] = None  # per layer, after conversion (chosen when kernel_variance="elbo")
    initial_noise_variance: Optional[float] = None
    recipe: Optional[str] = None  # the stage-2 recipe used (activated_dgp.training.recipes), e.g. "validation"
    # the feature extractor g trained with the DGP when the network's first layers do not convert (a copy: the
    # network is left as it was); features(X) applies it. None otherwise.
    extractor: Optional[tf_keras.Model] = None
    # make_convertible's record when the network was made convertible first (train_two_stage(make_convertible=))
    convertible: Optional[ConvertibleNetwork] = None
    # the mean validation log predictive density of the starting network and of the DGP, when there is a validation part
    validation_scores: Optional[dict] = None
    # per GP layer, the KL (nats) the converted means carry into the ELBO at conversion, before any kernel variance is
    # chosen (ConversionReport.mean_kl)
    conversion_kl: Optional[list] = None

    def features(self, X) -> np.ndarray:
        """The DGP's inputs for the network's inputs X: g(X) [N, D] through the trained feature extractor g when
        there is one (inference mode, in batches), else X itself."""
        if self.extractor is None:
            return X
        X = _check_inputs(X, "X")
        expected = tuple(self.extractor.input_shape[1:])
        if len(X.shape[1:]) != len(expected) or any(e is not None and e != g for e, g in zip(expected, X.shape[1:])):
            raise ValueError(
                f"X must be [N, {', '.join(map(str, expected))}], the inputs of the network's feature extractor, got shape {X.shape}"
            )
        return extracted_features(self.extractor, X)

    def predict_y(self, X, num_samples: int = 100, seed: Optional[int] = None, batch_size: Optional[int] = None):
        """Predictive mean and variance of y at the network's inputs X, [N, P] each
        (:func:`activated_dgp.predict_y` on :meth:`features` of X)."""
        return predict_y(self.dgp, self.features(X), num_samples, seed, batch_size)

    def predict_class_probabilities(self, X, num_samples: int = 100, seed: Optional[int] = None,
                                    batch_size: Optional[int] = None) -> np.ndarray:
        """p(y = c | x) at the network's inputs X, [N, C] (C = 1 for Bernoulli: p(y = 1 | x))
        (:func:`activated_dgp.predict_class_probabilities` on :meth:`features` of X)."""
        return predict_class_probabilities(self.dgp, self.features(X), num_samples, seed, batch_size)

    def predict_log_density(self, X, Y, num_samples: int = 100, seed: Optional[int] = None) -> np.ndarray:
        """log p(y | x) per point [N] at the network's inputs X with targets Y
        (:func:`activated_dgp.predictive_log_density` on :meth:`features` of X); −mean is the NLPD."""
        return predictive_log_density(self.dgp, self.features(X), Y, num_samples, seed)


def _recipe_used(recipe: Stage2Recipe) -> str:
    """The name of the registered recipe whose choices of v, floor, noise and stopping ``recipe`` makes (a composite such
    as "by_likelihood", once :meth:`Stage2Recipe.for_likelihood` has picked its branch, is named by the branch:
    "validation"); a recipe whose choices match none keeps its own name."""
    core = ("kernel_variance", "kernel_variance_floor", "noise_variance", "early_stopping", "validation_split")
    for name, registered in STAGE2_RECIPES.items():
        if registered.classification is None and all(getattr(recipe, f) == getattr(registered, f) for f in core):
            return name
    return recipe.name


def _wants_swap(option, network: tf_keras.Model) -> bool:
    """Whether train_two_stage makes ``network`` convertible first (its ``make_convertible`` option)."""
    if isinstance(option, dict) or option is True:
        return True
    if option is False:
        return False
    if option != "auto":
        raise ValueError(f"make_convertible must be 'auto', True, False or a dict of make_convertible's keywords, got {option!r}")
    return bool(relu_layers(network))


def _validation_scores(result: TwoStageResult, network: tf_keras.Model, validation_data, likelihood,
                       noise_variance: Optional[float], seed: Optional[int]) -> dict:
    """The mean validation log predictive density of the starting network, log N(y | f(x), σ²) with the conversion's
    noise σ² for a Gaussian likelihood and minus its cross-entropy (:func:`~activated_dgp.deep.likelihoods.network_loss`
    on its logits) for a classifier, beside the DGP's; a UserWarning when the DGP's is the lower."""
    X_val, Y_val = validation_data
    gaussian = likelihood_name(likelihood) == "gaussian"
    if gaussian:
        outputs = np.asarray(network(X_val), dtype=np.float64)
        network_score = float(np.mean(-0.5 * np.log(2 * np.pi * noise_variance) - 0.5 * (Y_val - outputs) ** 2 / noise_variance))
    else:
        logits = tf_keras.Sequential([tf_keras.Input(network.input_shape[1:])] + _logit_chain(network)[0])
        network_score = -float(network_loss(likelihood)(Y_val, np.asarray(logits(X_val), dtype=np.float64)))
    dgp_score = float(np.mean(result.predict_log_density(X_val, Y_val, seed=seed)))
    if dgp_score < network_score:
        warnings.warn(
            f"the trained DGP's mean validation log predictive density {dgp_score:.4g} is below the starting network's "
            f"{network_score:.4g} ({'with the conversion noise' if gaussian else 'its own probabilities'}); "
            "TwoStageResult.validation_scores keeps both",
            UserWarning, stacklevel=3,
        )
    return {"network": network_score, "dgp": dgp_score}


def _slab_scores(X: np.ndarray, rng: np.random.Generator) -> Tuple[np.ndarray, str]:
    """The coordinate a slab is cut along, per row, and what it is: a seeded input feature with at least three
    distinct values for tabular X [N, D]; the first principal component of the flattened inputs otherwise (images)."""
    if X.ndim == 2:
        candidates = [k for k in range(X.shape[1]) if len(np.unique(X[:, k])) >= 3]
        if not candidates:
            raise ValueError("a slab validation part needs an input feature with at least three distinct values")
        feature = int(rng.choice(candidates))
        return X[:, feature].astype(np.float64), f"input feature {feature}"
    flat = X.reshape(len(X), -1).astype(np.float64)
    rows = flat[rng.permutation(len(flat))[:2000]]
    _, _, vt = np.linalg.svd(rows - rows.mean(0), full_matrices=False)
    return flat @ vt[0], "the inputs' first principal component"


def split_validation(X, Y, fraction: float, seed: Optional[int] = None, kind: str = "random"):
    """(X_fit, Y_fit), (X_val, Y_val) with round(fraction·N) ≥ 1 validation rows, held out by ``kind``:

    * ``"random"``: a seeded random subset;
    * ``"slab"``: a covariate-shifted part. The rows are sorted along a seeded input feature (the first principal
      component for image inputs; ties in random order), and a contiguous block of them, centred at a seeded
      quantile in [0.25, 0.75], is held out, so that the validation inputs lie between fit inputs along that
      coordinate. It imitates the "gap" shift of Foong et al. (2019), "'In-Between' Uncertainty in Bayesian
      Neural Networks", from the training data alone;
    * ``"mixed"``: both at once: ceil(n/2) of the n validation rows are a slab cut as above, the other floor(n/2) a
      seeded random subset of the remaining rows, so that a choice made on the validation part answers to the data's
      own region and to a shift alike.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the validation fraction must be in (0, 1), got {fraction!r}")
    if kind not in VALIDATION_SPLITS:
        raise ValueError(f"the validation split must be one of {', '.join(map(repr, VALIDATION_SPLITS))}, got {kind!r}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(X))
    num_val = max(1, int(round(fraction * len(X))))
    if num_val >= len(X):
        raise ValueError(f"{len(X)} rows are too few to hold out {fraction:.0%} for validation")
    if kind == "random":
        val, fit = order[:num_val], order[num_val:]
    else:
        num_slab = num_val if kind == "slab" else (num_val + 1) // 2
        scores, _ = _slab_scores(np.asarray(X), rng)
        ranked = order[np.argsort(scores[order], kind="stable")]  # sorted along the coordinate, ties in random order
        centre = rng.uniform(0.25, 0.75) * len(X)
        start = int(np.clip(round(centre - num_slab / 2), 0, len(X) - num_slab))
        val = ranked[start:start + num_slab]
        fit = np.concatenate([ranked[:start], ranked[start + num_slab:]])
        if num_slab < num_val:  # "mixed": the rest of the validation part at random from the rows outside the slab
            fit = fit[rng.permutation(len(fit))]
            val, fit = np.concatenate([val, fit[:num_val - num_slab]]), fit[num_val - num_slab:]
    return (X[fit], Y[fit]), (X[val], Y[val])


#: ``train_two_stage``'s keywords of the previous release and where each now lives.
_MOVED_KEYWORDS = {
    **{name: "architecture" for name in ("num_classes", "num_layers", "num_units", "layer_widths", "activation",
                                         "truncation_level", "lengthscales", "whiten")},
    **{name: "recipe" for name in ("noise_variance", "kernel_variance", "kernel_variance_floor", "warmup_steps",
                                   "validation_fraction", "elbo_samples", "far_field")},
    "dgp_callbacks": "callbacks",
}


def _architecture(architecture, X_width: int, likelihood, Y, num_classes=None, **legacy) -> ArchitectureConfig:
    """The stage-1 twin's (and so the DGP's) architecture: an :class:`ArchitectureConfig` whose input width must be the
    data's, or a dict of its keywords (without ``input_dim``); the output width and likelihood come from
    ``likelihood`` and Y (a softmax's class count from ``output_dim`` when given, else the largest label + 1)."""
    if architecture is None:
        options = dict(legacy)
    elif isinstance(architecture, ArchitectureConfig):
        if legacy:
            raise ValueError(f"give the architecture once: architecture= together with {sorted(legacy)}")
        if architecture.input_dim != X_width:
            raise ValueError(f"architecture.input_dim is {architecture.input_dim}, but the inputs are {X_width} wide")
        options = {name: getattr(architecture, name) for name in ("num_layers", "num_units", "layer_widths", "activation",
                                                                  "truncation_level", "lengthscales", "whiten")}
        if architecture.output_dim != 1:
            options["output_dim"] = architecture.output_dim
    elif isinstance(architecture, dict):
        if legacy:
            raise ValueError(f"give the architecture once: architecture= together with {sorted(legacy)}")
        options = dict(architecture)
        if "input_dim" in options or "likelihood" in options:
            raise ValueError("architecture= takes neither input_dim (the data's width) nor likelihood (train_two_stage's own)")
    else:
        raise ValueError(f"architecture must be an ArchitectureConfig or a dict of its keywords, got {type(architecture).__name__}")
    if "output_dim" in options:
        num_classes = options.pop("output_dim")
    return ArchitectureConfig(  # validates the architecture and the likelihood before any training
        X_width, output_dim=output_width(likelihood, Y, num_classes), likelihood=likelihood, **options
    )


def train_two_stage(
    X,
    Y,
    *,
    likelihood: Optional[str] = None,
    network: Optional[tf_keras.Model] = None,
    architecture: Union[None, ArchitectureConfig, dict] = None,
    recipe: Union[str, Stage2Recipe] = DEFAULT_RECIPE,
    network_schedule: Optional[TrainingSchedule] = None,
    dgp_schedule: Optional[TrainingSchedule] = None,
    validation_data=None,
    seed: Optional[int] = None,
    callbacks: Sequence[tf_keras.callbacks.Callback] = (),
    strategy: Optional[tf.distribute.Strategy] = None,
    make_convertible: Union[str, bool, dict] = "auto",
    **deprecated,
) -> TwoStageResult:
    """Network twin → activated DGP → ELBO (Dutordoir et al., 2021, Sec. 5.1, appendix E.1): train a network twin
    on MSE or cross-entropy (or start from ``network``), convert it to an activated DGP whose mean propagation is the
    network's forward pass, then optimise the ELBO over all DGP parameters. Defaults follow appendix E.1 (Adam 0.01,
    ×0.9 on plateau, minibatch 128).

    :param X: [N, D] inputs (or whatever ``network``'s first layers take, e.g. [N, H, W, C] images).
    :param Y: [N, P] targets; for "bernoulli" 0/1 labels [N, 1]; for "softmax"/"robustmax" class indices [N, 1].
    :param likelihood: a name of :data:`~activated_dgp.deep.LIKELIHOOD_REGISTRY` ("gaussian", "bernoulli", "softmax",
        "robustmax"); default None: the ``network``'s classifier head's (a final softmax → "softmax", sigmoid →
        "bernoulli": :func:`~activated_dgp.deep.network_reading.head_likelihood`), else "gaussian". One that conflicts with
        the network's head is a ValueError.
    :param network: a trained tf-keras network to start from instead of building and training a twin (stage 1 is
        then skipped). When its first layers do not convert (Conv2D, pooling, Flatten, a tanh layer), they become a
        feature extractor g and the longest convertible tail of Dense layers the DGP
        (:func:`~activated_dgp.deep.network_reading.split_convertible_head`); stage 2 trains a copy of g with the DGP
        (:func:`~activated_dgp.training.train_dgp_with_extractor`; ``TwoStageResult.extractor``), the paper's
        fine-tuned conv layers (Sec. 5.3).
    :param architecture: the twin's architecture when no ``network`` is given: an
        :class:`~activated_dgp.deep.ArchitectureConfig` (its ``input_dim`` must be the data's) or a dict of its
        keywords, e.g. ``dict(num_layers=2, num_units=64, activation="softplus")``; for a softmax likelihood
        ``output_dim`` is the class count (default: the largest label + 1). Default: ArchitectureConfig's defaults
        (3 layers of 128 zonal Swish units, Ñ = 20).
    :param recipe: the stage-2 recipe, a name of :data:`~activated_dgp.training.recipes.STAGE2_RECIPES` ("paper",
        "validation", "elbo", "floor", or "by_likelihood": validation for a Gaussian likelihood, paper otherwise) or a
        :class:`~activated_dgp.training.Stage2Recipe`, e.g. ``stage2_recipe("validation", kernel_variance_floor=1e-2)``:
        the start of v and the noise, whether stage 2 stops early, the validation fraction, warm-up, far field.
        ``TwoStageResult.recipe`` names the one used.
    :param network_schedule: stage 1's :class:`TrainingSchedule` (default: appendix E.1's).
    :param dgp_schedule: stage 2's :class:`TrainingSchedule` (default: appendix E.1's; an early-stopped recipe stops
        after :data:`~activated_dgp.training.recipes.DEFAULT_DGP_PATIENCE` epochs without improvement).
    :param validation_data: (X_val, Y_val) for early stopping of each stage whose schedule sets a ``patience`` (best
        parameters restored) and for the recipe's validation choices; without it a recipe that reads a validation
        part holds out its ``validation_fraction`` of (X, Y), seeded by ``seed``.
    :param seed: seeds the twin's initialisation, the validation split, the conversion's selections and stage 2.
    :param callbacks: tf-keras callbacks for stage 2; one with a ``set_dgp(dgp)`` method is handed the converted
        DeepGP before stage 2 starts. With a feature extractor they are callbacks of the
        :class:`~activated_dgp.training.ExtractorDGP`'s fit.
    :param strategy: a ``tf.distribute.Strategy`` for stage 2 (:func:`train_dgp`); stage 1 trains on one device.
    :param make_convertible: whether ``network`` is first made convertible by
        :func:`~activated_dgp.training.make_convertible` (its activated blocks swapped for zonal Swish units refitted
        to it and fine-tuned on (X, Y), the start kept if that made the training loss worse): ``"auto"`` (default) when the network has
        ReLU units (:func:`~activated_dgp.deep.network_reading.relu_layers`), whose converted means carry a KL that grows
        without bound with the truncation level, so that stage 2's ELBO trains them away from the network's
        (docs/results/relu_conversion.md); ``True`` always; a dict: always, with these keywords for make_convertible
        (e.g. ``dict(steps=2000)``); ``False``: convert the network as it is. ``TwoStageResult.convertible`` keeps
        make_convertible's record, and ``TwoStageResult.network`` is then the swapped network the DGP mirrors.

    After stage 2, when there is a validation part, the DGP's mean validation log predictive density is compared
    with the starting network's (its outputs with the conversion's noise for a Gaussian likelihood, its
    probabilities for a classifier): both are in ``TwoStageResult.validation_scores``, and a UserWarning names them
    when the DGP scores lower.

    The keywords of the previous release (``num_layers``, ``kernel_variance``, ``dgp_callbacks``, …) still work for
    one release, with a DeprecationWarning naming where each now lives.
    """
    legacy_architecture, legacy_recipe = {}, {}
    for name, value in deprecated.items():
        if name not in _MOVED_KEYWORDS:
            raise TypeError(f"train_two_stage() got an unexpected keyword argument {name!r}")
        home = _MOVED_KEYWORDS[name]
        where = {
            "architecture": "activated_dgp.deep.ArchitectureConfig (architecture=)",
            "recipe": "activated_dgp.training.stage2_recipe (recipe=)",
            "callbacks": "activated_dgp.train_two_stage(callbacks=)",
        }[home]
        warnings.warn(f"activated_dgp.train_two_stage({name}=) is deprecated; use {where}", DeprecationWarning, stacklevel=2)
        if home == "architecture":
            legacy_architecture[name] = value
        elif home == "recipe":
            legacy_recipe[name] = value
        else:
            if callbacks:
                raise ValueError("give the stage-2 callbacks once: callbacks= or dgp_callbacks=")
            callbacks = value
    chosen = stage2_recipe(recipe, **legacy_recipe)
    far_field, warmup_steps, elbo_samples = chosen.far_field, chosen.warmup_steps, chosen.elbo_samples
    far_field = far_field_options(far_field)
    likelihood = resolve_head_likelihood(head_likelihood(network) if network is not None else None, likelihood)
    extractor, head = split_convertible_head(network) if network is not None else (None, None)
    if extractor is None:
        X, Y = _check_data(X, Y)
    else:
        if warmup_steps or strategy is not None:
            raise ValueError(
                f"the network {network.name!r} starts with layers that do not convert, so stage 2 trains them as a feature "
                "extractor (train_dgp_with_extractor), which takes no warmup_steps or strategy"
            )
        X, Y = _check_inputs(X, "X"), check_targets(Y, "Y")
        expected = tuple(network.input_shape[1:])
        if len(X.shape[1:]) != len(expected) or any(e is not None and e != g for e, g in zip(expected, X.shape[1:])):
            raise ValueError(f"X must be [N, {', '.join(map(str, expected))}] for the network {network.name!r}, got shape {X.shape}")
        if len(X) != len(Y):
            raise ValueError(f"X and Y must have the same N, got {len(X)} and {len(Y)} rows")
    config = _architecture(architecture, X.shape[1] if extractor is None else head.input_shape[-1], likelihood, Y, **legacy_architecture)
    gaussian = likelihood_name(config.likelihood) == "gaussian"
    chosen = chosen.for_likelihood(gaussian)
    settings = chosen.resolve(gaussian=gaussian, dgp_schedule=dgp_schedule)
    kernel_variance, kernel_variance_floor, noise_variance = settings.kernel_variance, settings.kernel_variance_floor, settings.noise_variance
    dgp_schedule, validation_fraction = settings.dgp_schedule, settings.validation_fraction
    if isinstance(noise_variance, str) and noise_variance not in ("train", "validation", "selected"):
        raise ValueError(f"noise_variance must be a number, 'train', 'validation' or 'selected', got {noise_variance!r}")
    select_noise = noise_variance == "selected"
    if select_noise and not (gaussian and kernel_variance in ("elbo", "validation")):
        raise ValueError("noise_variance='selected' needs a Gaussian likelihood and kernel_variance='elbo' or 'validation'")
    if validation_data is None and validation_fraction > 0:
        (X, Y), validation_data = split_validation(X, Y, validation_fraction, seed, kind=chosen.validation_split)
    if validation_data is not None:
        if extractor is None:
            validation_data = _check_data(*validation_data)
        else:
            validation_data = _check_inputs(validation_data[0], "validation X"), check_targets(validation_data[1], "validation Y")
        if validation_data[0].shape[1:] != X.shape[1:] or validation_data[1].shape[1] != Y.shape[1]:
            def widths(A, B):
                return f"{A.shape[1] if A.ndim == 2 else A.shape[1:]} and {B.shape[1]}"

            raise ValueError(f"validation_data must have the widths of (X, Y), {widths(X, Y)}; got {widths(*validation_data)}")
    if isinstance(kernel_variance, str) and kernel_variance not in ("elbo", "validation"):
        raise ValueError(f"kernel_variance must be a positive number, 'elbo' or 'validation', got {kernel_variance!r}")
    if kernel_variance_floor is not None:
        if not isinstance(kernel_variance, str):
            raise ValueError(
                f"kernel_variance_floor bounds a chosen kernel variance: it needs kernel_variance='elbo' or 'validation', "
                f"not the fixed {kernel_variance!r}"
            )
        kernel_variance_floor = check_variance_floor(kernel_variance_floor, "kernel_variance_floor")
    for name, value in (("noise_variance", noise_variance), ("kernel_variance", kernel_variance)):
        if value in ("validation", "selected") and validation_data is None:
            raise ValueError(f"{name}={value!r} needs validation_data or a validation_fraction")
    convertible = None
    start_network = network
    if network is not None and _wants_swap(make_convertible, network):
        options = make_convertible if isinstance(make_convertible, dict) else {}
        convertible = _make_convertible(network, X, Y, likelihood=likelihood, seed=seed or 0, **options)
        network = convertible.network
        extractor, head = split_convertible_head(network)
    if seed is not None:
        tf.random.set_seed(seed)
    network_history = {}
    if network is None:
        network = build_activated_nn(config, seed=seed)
        stop_network = network_schedule is not None and network_schedule.patience is not None
        network_history = train_network(
            network, X, Y, config.likelihood, network_schedule, validation_data=validation_data if stop_network else None
        )
    if gaussian and not isinstance(noise_variance, (int, float)):
        source = validation_data if (noise_variance in ("validation", "selected") or (noise_variance is None and validation_data is not None)) else (X, Y)
        noise_variance = float(max(np.mean((network(source[0]).numpy() - source[1]) ** 2), 1e-4))
    if extractor is not None:  # a copy: stage 2 trains g, and the user's network stays as it was
        original, extractor = extractor, tf_keras.models.clone_model(extractor)
        extractor.set_weights(original.get_weights())
    features = X if extractor is None else extracted_features(extractor, X)  # the DGP's inputs
    validation_features = validation_data
    if extractor is not None and validation_data is not None:
        validation_features = extracted_features(extractor, validation_data[0]), validation_data[1]
    conversion = dgp_from_keras(
        network if extractor is None else head, len(X), X=features[:2048], likelihood=config.likelihood, whiten=config.whiten, noise_variance=noise_variance or 0.01
    )
    noise_factors = NOISE_FACTORS if select_noise else None
    if kernel_variance == "elbo":
        select_kernel_variances(conversion.dgp, features, Y, seed=seed or 0, noise_factors=noise_factors, min_variance=kernel_variance_floor)
    elif kernel_variance == "validation":
        select_kernel_variances(
            conversion.dgp, *validation_features, objective="validation", seed=seed or 0, noise_factors=noise_factors,
            min_variance=kernel_variance_floor,
        )
    elif kernel_variance != 1.0:
        for layer in conversion.dgp.f_layers:
            rescale_kernel_variance(layer, float(kernel_variance))
    if far_field is not None:
        add_far_field(conversion.dgp, features, **far_field)
    if select_noise:  # the noise stage 2 starts from, as the joint search left it
        noise_variance = float(conversion.dgp.likelihood_layer.likelihood.variance.numpy())
    variances = [float(layer.kernel.kernel.variance.numpy()) for layer in conversion.dgp.f_layers]
    conversion_kl = None if conversion.mean_kl is None else [float(kl) for kl in conversion.mean_kl]
    initial_elbo = evaluate_elbo(conversion.dgp, features, Y, num_samples=elbo_samples) if elbo_samples > 0 else None
    for callback in callbacks:  # e.g. diagnostics that want to see the converted model
        if hasattr(callback, "set_dgp"):
            callback.set_dgp(conversion.dgp)
    stop_dgp = dgp_schedule is not None and dgp_schedule.patience is not None
    validation = validation_data if stop_dgp else None
    if extractor is not None:  # trains g with the DGP and refits the far field to the final features
        dgp_history = train_dgp_with_extractor(
            conversion.dgp, extractor, X, Y, dgp_schedule, validation_data=validation, seed=seed or 0, callbacks=callbacks
        )
    else:
        dgp_history = train_dgp(
            conversion.dgp, X, Y, dgp_schedule, validation_data=validation, warmup_steps=warmup_steps, callbacks=callbacks,
            strategy=strategy, seed=seed or 0,
        )
        if far_field is not None and len(conversion.dgp.f_layers) > 1:  # stage 2 moved the hidden representations
            refit_far_field(conversion.dgp, X)
    result = TwoStageResult(
        network,
        conversion.dgp,
        network_history,
        dgp_history,
        conversion.max_abs_mismatch,
        initial_elbo,
        variances,
        noise_variance if gaussian else None,
        _recipe_used(chosen),
        extractor,
        convertible,
    )
    result.conversion_kl = conversion_kl
    if validation_data is not None:
        result.validation_scores = _validation_scores(result, start_network or network, validation_data, config.likelihood, noise_variance, seed)
    return result
