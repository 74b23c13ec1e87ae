"""Rotated MNIST: dataset shift by rotating the test digits 0°…180° (Dutordoir et al., 2021, Sec. 5.3, Fig. 8, E.2).

    python -m experiments rotated_mnist --data-dir $ADGP_DATA_DIR --out docs/results/rotated_mnist \\
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
  the DGP on the ELBO through the library's :func:`activated_dgp.training.train_dgp_with_extractor`
  (:func:`finetune_dgp_and_extractor`), to measure fine-tuning against freezing.

Controls (``--controls``): does ADGP's gain come from the conversion or from more training / averaging?

* ``nn_ft``, ``nn_ts_ft``, ``nn_dropout_ft``: after stage 1 the network (conv layers and head) gets the extra
  epochs of ``adgp_ft``'s stage 2 — the same :func:`stage2_schedule`: ``--dgp-epochs`` epochs of Adam at
  ``dgp_learning_rate``, the same minibatch size, learning-rate plateau and early stopping, through the library's
  :func:`activated_dgp.train_network` — on its own cross-entropy (dropout active for
  the dropout net), then is evaluated as ``nn`` / ``nn_ts`` (T fitted after the extra epochs) / ``nn_dropout``.
  Each record holds the schedule its fit used (``extra``) and ADGP's from the same configuration (``adgp_stage2``).
* ``ensemble``: a deep ensemble (Lakshminarayanan et al., 2017) of ``--ensemble-size`` (5) networks trained as
  ``nn`` from independent seeds (:func:`member_seed`; member 0 is ``nn``'s network); the predictive is the mean
  of the members' softmax probabilities (:func:`ensemble_probabilities`).
* ``adgp_ensemble``: every member converted and trained through stage 2 as ``adgp`` (frozen conv layers; member 0
  is ``adgp``'s DGP), predicting with the mean of the members' class probabilities.

LLA rows (``--lla``; not run by default): the linearised Laplace approximation
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
seed) in ``<out>/records.jsonl`` (resumable: finished cells are skipped), under the harness
:class:`~experiments.harness.protocol.Protocol` of :func:`protocol`: the cell definition :data:`CELL_PROTOCOL`
(``eval_seconds`` is the model's own prediction time, ``feature_seconds`` its conv features'), the configuration,
and the stage-2 fit of :data:`STAGE2_MODELS`, so a record of another model made before the fine-tuned stage 2 moved
onto the library still counts. Records made before the harness, whose cells were all models of a seed, read as
made under ``seed-group`` and are never mixed with new ones. Trained networks, DGPs, per-angle conv features and
evaluation progress are artifacts under ``--artifacts`` (default ``<--cache-dir>/rotated_mnist``), shared by the
cells that use them. ``--report-only`` rewrites the generated part of the page (``--doc``, default ``<out>.md``)
and the figure from the records of the newest protocol.
The configuration and protocols: experiments/rotated_mnist/config.py; the cells and options: cells.py; what is
fitted: models.py; the report: report.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The study's interface for the harness (experiments/harness/study.py) and its vocabulary. Note that
# ``experiments.rotated_mnist.cells`` here is the function :func:`cells`; the module of that name is read with
# ``from experiments.rotated_mnist.cells import …``. What is fitted is in :mod:`experiments.rotated_mnist.models`.
from experiments.rotated_mnist import models  # noqa: E402
from experiments.rotated_mnist.cells import (  # noqa: E402
    PROTOCOL, add_options, artifact_cache, cells, config_from, prepare, run_cell, selected_models,
)
from experiments.rotated_mnist.config import (  # noqa: E402
    ALL_MODELS, ANGLES, CELL_PROTOCOL, CONTROLS, KEY, KEY_FIELDS, LABELS, LEGACY_PROTOCOL, LLA_MODELS, METRIC_LABELS, PLAIN_MODELS,
    METRICS, MODELS, STAGE2_FIT, STAGE2_MODELS, Config, config_digest, newest_protocol, protocol, protocol_of, upgrade,
)
from experiments.rotated_mnist import plain_report  # noqa: E402
from experiments.rotated_mnist import report as _report  # noqa: E402
from experiments.rotated_mnist.report import FIGURE, REPO, REPORT_RUNS, compare_runs  # noqa: E402

#: the plain-CNN run (--plain-cnn) and its page
REPORT_RUNS = REPORT_RUNS + [["--out", "docs/results/rotated_mnist_plain", "--doc", "docs/results/rotated_mnist_plain.md",
                              "--figure", "docs/figures/rotated_mnist_plain.png"]]


def report(records, options) -> None:
    """The page of the records: the plain-CNN page (:mod:`experiments.rotated_mnist.plain_report`) when every record
    is one of :data:`PLAIN_MODELS` and no ``--compare`` is asked, else the study's page
    (:func:`experiments.rotated_mnist.report.report`)."""
    if records and not options.compare and all(r["model"] in PLAIN_MODELS for r in records):
        command = getattr(options, "report_command", None) or _report.BLOCK_COMMAND
        plain_report.write(records, Path(options.doc) if options.doc else Path(options.out).with_suffix(".md"),
                           Path(options.figure) if options.figure else Path(options.out) / "rotated_mnist_plain.png", command, REPO)
        return
    _report.report(records, options)


def main(argv=None) -> list:
    """``python -m experiments.rotated_mnist …``: the same as ``python -m experiments rotated_mnist …``."""
    from experiments.harness import cli

    return cli.main("rotated_mnist", sys.modules[__name__], argv)


__all__ = [
    "ALL_MODELS", "ANGLES", "CELL_PROTOCOL", "CONTROLS", "Config", "FIGURE", "KEY", "KEY_FIELDS", "LABELS",
    "LEGACY_PROTOCOL", "LLA_MODELS", "PLAIN_MODELS", "METRICS", "METRIC_LABELS", "MODELS", "PROTOCOL", "REPORT_RUNS", "add_options",
    "artifact_cache", "cells", "compare_runs", "config_digest", "config_from", "main", "models", "newest_protocol",
    "prepare", "protocol", "protocol_of", "report", "run_cell", "selected_models", "STAGE2_FIT", "STAGE2_MODELS", "upgrade",
]
