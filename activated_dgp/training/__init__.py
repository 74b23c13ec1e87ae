"""Training of activated DGPs, one concept per module, imports going down:
:mod:`~activated_dgp.training.callbacks` (progress, learning-rate ramp, early stopping with the best parameters
restored) → :mod:`~activated_dgp.training.schedule` (:class:`TrainingSchedule`) →
:mod:`~activated_dgp.training.recipes` (the named stage-2 recipes and the choice of the converted layers' kernel
variance v they name) → :mod:`~activated_dgp.training.fitters` (stage 1
:func:`train_network`, stage 2 :func:`train_dgp`, their scores and stage 2's guard) →
:mod:`~activated_dgp.training.two_stage` (the pipeline :func:`train_two_stage`); beside it :mod:`~activated_dgp.training.convertible` (a plain network's
units swapped for zonal ones and refitted, :func:`make_convertible`); beside it
:mod:`~activated_dgp.training.extractor` (stage 2 with a feature extractor trained too, :func:`train_dgp_with_extractor`); and
:mod:`~activated_dgp.training.swag` (SWA and SWAG along an SGD trajectory, :class:`SWAG`).
Every name is re-exported here, so ``from activated_dgp.training import …`` keeps working."""

from .callbacks import FitProgress, LearningRateRamp, RestoreBest, without_retracing_warnings
from .fitters import (
    GUARD_MIN_STEPS,
    GUARD_ROWS,
    evaluate_elbo,
    guard_rows,
    negative_elbo_score,
    train_dgp,
    train_network,
    validation_nlpd,
)
from .extractor import ExtractorDGP, extracted_features, train_dgp_with_extractor
from .recipes import (
    DEFAULT_RECIPE,
    NOISE_FACTORS,
    STAGE2_RECIPES,
    Stage2Recipe,
    VarianceSelection,
    rescale_kernel_variance,
    select_kernel_variances,
    stage2_recipe,
)
from .schedule import TrainingSchedule
from .two_stage import TwoStageResult, split_validation, train_two_stage
from .swag import SWAG, SWAGCallback
from .convertible import ConvertibleNetwork, fine_tuning_schedule, make_convertible, swap_to_zonal
from .mean_kl_penalty import network_mean_kl

__all__ = [
    "SWAG",
    "SWAGCallback",
    "ConvertibleNetwork",
    "fine_tuning_schedule",
    "make_convertible",
    "network_mean_kl",
    "swap_to_zonal",
    "TwoStageResult",
    "TrainingSchedule",
    "Stage2Recipe",
    "STAGE2_RECIPES",
    "stage2_recipe",
    "DEFAULT_RECIPE",
    "select_kernel_variances",
    "rescale_kernel_variance",
    "VarianceSelection",
    "NOISE_FACTORS",
    "RestoreBest",
    "LearningRateRamp",
    "split_validation",
    "train_network",
    "train_dgp",
    "train_dgp_with_extractor",
    "ExtractorDGP",
    "extracted_features",
    "validation_nlpd",
    "train_two_stage",
    "evaluate_elbo",
    "guard_rows",
    "negative_elbo_score",
    "GUARD_ROWS",
    "GUARD_MIN_STEPS",
]
