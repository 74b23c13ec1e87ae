"""What the rotated-MNIST study fits that is neither the library's nor a shared method: the data splits, the CNN
classifier's training (stage 1) and its extra epochs, the conversion and stage 2 of the ADGP (frozen or with the conv
layers fine-tuned), temperature scaling, MC dropout, the ensembles' predictive and the LLA rows."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional, Sequence

import numpy as np

from activated_dgp.saving import save
from experiments.harness.artifacts import atomic_write, atomic_write_text, restore_saved_weights
from experiments.rotated_mnist.config import (ENSEMBLE_SEED_STRIDE, KERNEL_VARIANCE_CHOICES, LABELS, STAGE2_OPTIMIZER,
                                              VALIDATION_SAMPLES, Config, log)
from experiments.harness.setups import classifier, rotated_mnist_cnn


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
    """(model, extractor, head) of the study's CNN (:func:`experiments.harness.setups.rotated_mnist_cnn`) at ``config``'s sizes."""
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


def stage2_schedule(config: Config):
    """The schedule of ADGP's stage 2 and of the networks' extra epochs (the controls): ``config.dgp_epochs`` epochs
    of Adam at ``config.dgp_learning_rate`` on minibatches of ``config.batch_size``, with early stopping after
    ``config.dgp_patience`` epochs without a better validation score when it is set (remedy e)."""
    return _schedule(config, config.dgp_epochs, config.dgp_learning_rate, config.dgp_patience)


def _stage2_record(history: dict, config: Config, num_train: int, ramp_steps: int = 0) -> dict:
    """The record of a stage-2 fit of the library (:func:`activated_dgp.train_dgp`,
    :func:`activated_dgp.training.train_dgp_with_extractor`, :func:`activated_dgp.train_network`): its losses, the
    schedule used and, with early stopping, the validation checks, the best epoch and the epochs run (the library
    counts steps, the records count epochs). ``ramp_steps``: the learning-rate warm-up the fit had (the DGP's only)."""
    schedule = stage2_schedule(config)
    losses = [float(v) for v in history.get("loss", [])]
    record = {"loss": losses, "schedule": {"epochs": len(losses), "optimizer": STAGE2_OPTIMIZER, "learning_rate": schedule.learning_rate,
                                           "batch_size": min(schedule.batch_size, num_train), "ramp_steps": ramp_steps}}
    if "validation_checks" in history:
        per_epoch = schedule.steps_per_epoch(num_train)
        record.update(validation_nlpd=[[int(s // per_epoch), float(v)] for s, v in history["validation_checks"]],
                      best_epoch=int(history["best_step"] // per_epoch), epochs_run=int(history["steps_run"] // per_epoch))
    return record


def finetune_dgp_and_extractor(dgp, extractor, x: np.ndarray, y: np.ndarray, config: Config, seed: int, validation=None) -> dict:
    """Stage 2 with the convolutional layers trained too: the library's
    :func:`activated_dgp.training.train_dgp_with_extractor` (Adam on −ELBO/N over the DGP's variables and the
    extractor's, the ELBO of :meth:`gpflux.models.DeepGP.elbo` on minibatches of features extractor(x), its
    learning-rate ramp and its guard) with :func:`stage2_schedule`.

    With ``config.dgp_patience`` (remedy e), ``validation`` = (x_val, y_val) images: the validation NLPD of the
    DGP on extractor(x_val) is the score checked before training and after every epoch, training stops after
    ``dgp_patience`` epochs without improvement, and the DGP's and the extractor's parameters of the best check are
    restored."""
    from activated_dgp.training import train_dgp_with_extractor

    if config.dgp_patience is not None and (validation is None or len(validation[0]) == 0):
        raise ValueError("dgp_patience (early stopping) needs validation images")
    schedule = stage2_schedule(config)
    history = train_dgp_with_extractor(dgp, extractor, x.astype(np.float32), y, schedule, validation_data=validation,
                                       validation_samples=VALIDATION_SAMPLES, seed=seed)
    return _stage2_record(history, config, len(x), ramp_steps=schedule.ramp_steps)


def finetuned_classifier(config: Config, splits: Splits, seed: int, dropout: float, source: Path, checkpoint: Path):
    """The control of ADGP + conv fine-tuned for a network: stage 1 (``source``'s checkpoint) followed by the
    extra epochs of :func:`stage2_schedule` — the same number, optimiser, learning rate and minibatch size as ADGP's
    stage 2 with the conv layers trained — by the library's :func:`activated_dgp.train_network` on the network's own
    loss (cross-entropy of the softmax of its logits; dropout active while training when ``dropout`` > 0), every
    weight (conv layers and head) trained. The DGP's stage 2 alone ramps its learning rate up over its first
    ``ramp_steps`` steps (:class:`activated_dgp.TrainingSchedule`), a protection of the converted inducing
    directions a network does not need. With ``config.dgp_patience`` the score is the validation cross-entropy.
    Returns (extractor, head, stage-1 seconds, info); the weights are checkpointed under ``checkpoint``."""
    from activated_dgp import train_network

    import tf_keras

    extractor, head, seconds = trained_classifier(config, splits, seed, dropout, source)
    model = classifier(extractor, head)
    model.build((None, splits.x_train.shape[1]))  # its weights exist before the fit (RestoreBest snapshots them)
    saved, record = checkpoint.with_suffix(".saved"), checkpoint.with_suffix(".json")
    if record.is_file() and restore_saved_weights(model, saved, legacy_weights=checkpoint.with_suffix(".weights.h5")):
        log(f"  loaded {checkpoint}")
        return extractor, head, seconds, json.loads(record.read_text())
    validation = (splits.x_val, splits.y_val) if config.dgp_patience is not None and len(splits.x_val) else None
    start = time.time()
    tf_keras.utils.set_random_seed(seed)
    history = train_network(model, splits.x_train, splits.y_train, "softmax", stage2_schedule(config), validation_data=validation)
    info = {"seconds": time.time() - start, **_stage2_record(history, config, len(splits.x_train))}
    atomic_write_text(record, json.dumps(info))
    save(model, saved)
    return extractor, head, seconds, info


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
        schedule = stage2_schedule(config)
        history = _stage2_record(train_dgp(
            dgp, train_features, splits.y_train, schedule,
            validation_data=(val_features, splits.y_val) if stopping else None, validation_samples=VALIDATION_SAMPLES,
        ), config, len(train_features), ramp_steps=schedule.ramp_steps)
    info.update({"seconds": time.time() - start, "elbo_loss": history["loss"]})
    if config.far_field and len(dgp.f_layers) > 1 and not finetune:  # stage 2 moved the hidden layers; the fine-tuned
        # path's train_dgp_with_extractor refits the far field to its final features itself
        from activated_dgp.deep.far_field import refit_far_field

        refit_far_field(dgp, train_features)
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


def member_seed(seed: int, member: int) -> int:
    """The seed of deep-ensemble member ``member`` of run ``seed``: member 0 is ``nn``'s network itself; the
    others' seeds never meet another run's (runs use seeds < 10 000)."""
    return seed if member == 0 else seed + ENSEMBLE_SEED_STRIDE * member



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
                    neuralef_steps=config.lla_neuralef_steps, neuralef_options={"oversampling": 0},  # as the records were made
                    seed=seed, batch_size=LLA_BATCH_SIZE, verbose=1)
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
    """ADGP's stage-2 schedule with the conv layers trained (:func:`stage2_schedule`) as the records show it."""
    return {"epochs": config.dgp_epochs, "optimizer": STAGE2_OPTIMIZER, "learning_rate": config.dgp_learning_rate,
            "batch_size": config.batch_size}


def ensemble_probabilities(members: Sequence[np.ndarray]) -> np.ndarray:
    """The deep ensemble's predictive (Lakshminarayanan et al., 2017, Sec. 2.4): the uniform mixture of the M members'
    class probabilities, p(y | x) = (1/M) Σ_m p_m(y | x), [N, C] from M arrays [N, C]. (The library's
    ``ensemble_predict_y`` / ``ensemble_log_density`` give a mixture's moments and log density, not the class
    probabilities the accuracy, ECE and entropy need, so the members' probabilities are averaged here.)"""
    return np.mean(np.stack(members), axis=0)
