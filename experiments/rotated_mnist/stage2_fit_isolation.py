"""Which difference between the two fits of the networks' extra epochs moves their confidence at large rotations?

The controls of the rotated-MNIST study (``nn_ft``: the stage-1 network given ADGP's 40 extra epochs) were first
fitted by the study's own Keras loop, then by the library's :func:`activated_dgp.train_network`
(docs/results/rotated_mnist_library_stage2.md). The two differ in three ways:

- minibatches: a seeded permutation of full minibatches per epoch (the remainder dropped) against Keras' shuffle with
  a last partial minibatch;
- the learning rate: constant against ``TrainingSchedule``'s plateau (×0.9 after 5 epochs without a lower training
  loss);
- the random stream: NumPy's seeded permutation against Keras' shuffle after ``tf_keras.utils.set_random_seed``.

This diagnosis trains seed 0's stage-1 network once (the study's configuration of that run: 40 epochs, Ñ = 20), then
gives a copy of it the extra epochs three ways: (A) the library's fit as the study runs it, (B) the same with the
plateau switched off, (C) the earlier study loop (seeded full minibatches, constant learning rate), and (D) that
loop with another permutation seed (seed + 1000), the size of a change of the minibatch stream alone. Each is scored on
the 10,000 test digits at every angle (test log-likelihood and accuracy, :func:`activated_dgp.metrics.classification_metrics`).
If B moves to C, the plateau is the cause; if B stays with A, the minibatches and the random stream are, and D
says how far the stream alone moves the result.

Run:  python -m experiments.rotated_mnist.stage2_fit_isolation --data-dir $ADGP_DATA_DIR
      (writes docs/results/rotated_mnist_stage2_isolation.json and its block of
      docs/results/rotated_mnist_stage2_isolation.md; about 15 CPU minutes; ``--report-only`` rewrites the block only)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from activated_dgp import train_network
from activated_dgp.deep.likelihoods import network_loss
from activated_dgp.metrics import classification_metrics
from experiments.harness.artifacts import atomic_write_text
from experiments.harness.blocks import write_block_from_record
from experiments.harness.setups import classifier
from experiments.rotated_mnist.config import Config
from experiments.rotated_mnist.models import as_inputs, prepare_data, softmax, stage2_schedule, trained_classifier

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_NAME, PAGE_NAME = "docs/results/rotated_mnist_stage2_isolation.json", "docs/results/rotated_mnist_stage2_isolation.md"
OUTPUT, PAGE = ROOT / OUTPUT_NAME, ROOT / PAGE_NAME
REPORT_COMMAND = "python -m experiments.rotated_mnist.stage2_fit_isolation --report-only"
REPORT_BLOCKS = [(PAGE_NAME, "stage2_fit_isolation")]
#: the configuration of the runs compared (docs/results/rotated_mnist_library_stage2.md and the controls run)
CONFIG = Config(epochs=40, dgp_epochs=40, truncation_level=20)
VARIANTS = ("library", "library, no plateau", "earlier study loop", "earlier study loop, another permutation seed")
#: the permutation seed of the last variant: seed + ANOTHER_STREAM
ANOTHER_STREAM = 1000


def earlier_study_loop(model, x: np.ndarray, y: np.ndarray, config: Config, seed: int) -> None:
    """The study's fit before it used the library: Adam at ``config.dgp_learning_rate`` (constant) on the network's
    cross-entropy, ``config.dgp_epochs`` epochs, each a fresh seeded permutation cut into full minibatches of
    ``config.batch_size`` (the remainder dropped)."""
    import tensorflow as tf
    import tf_keras

    model.compile(optimizer=tf_keras.optimizers.Adam(config.dgp_learning_rate), loss=network_loss("softmax"))
    rng, x32, size = np.random.default_rng(seed), x.astype(np.float32), min(config.batch_size, len(x))

    def batches():
        order = rng.permutation(len(x))
        for start in range(0, len(x) - size + 1, size):
            rows = order[start : start + size]
            yield x32[rows], y[rows]

    signature = (tf.TensorSpec((None, x.shape[1]), tf.float32), tf.TensorSpec((None, y.shape[1]), tf.as_dtype(y.dtype)))
    model.fit(tf.data.Dataset.from_generator(batches, output_signature=signature), epochs=config.dgp_epochs, verbose=0)


def scores(model, splits) -> dict:
    """Test log-likelihood and accuracy of ``model``'s softmax at every angle."""
    per_angle = [classification_metrics(softmax(model.predict(as_inputs(images), batch_size=1000, verbose=0)), splits.y_test)
                 for images in splits.rotated]
    return {metric: [float(s[metric]) for s in per_angle] for metric in ("log_likelihood", "accuracy")}


def markdown(record: dict) -> str:
    """The block: test log-likelihood per angle of stage 1 and of each fit, their means over the angles, and the
    mean accuracy."""
    fits = {"stage 1 (no extra epochs)": record["stage_1"], **record["variants"]}
    names = list(fits)
    lines = [f"**Which difference moves the extra epochs' confidence** (seed {record['seed']}, one stage-1 network, "
             f"record `{OUTPUT_NAME}`): test log-likelihood per angle", "",
             "| angle | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for index, angle in enumerate(record["angles"]):
        lines.append(f"| {angle}° | " + " | ".join(f"{fits[n]['log_likelihood'][index]:.3f}" for n in names) + " |")
    lines.append("| mean | " + " | ".join(f"**{np.mean(fits[n]['log_likelihood']):.3f}**" for n in names) + " |")
    lines.append("| mean accuracy | " + " | ".join(f"{np.mean(fits[n]['accuracy']):.3f}" for n in names) + " |")
    mean = {n: float(np.mean(fits[n]["log_likelihood"])) for n in names}
    lines.append("")
    if {"library", "library, no plateau", "earlier study loop"} <= set(mean):
        lines.append(f"- The plateau: switching it off moves the library fit's mean by {mean['library, no plateau'] - mean['library']:+.3f} nats.")
        lines.append(f"- The minibatches and their stream: the earlier loop lies {mean['earlier study loop'] - mean['library, no plateau']:+.3f} "
                     "nats from the library fit without the plateau.")
    if "earlier study loop, another permutation seed" in mean and "earlier study loop" in mean:
        lines.append(f"- The stream alone: the earlier loop with another permutation seed moves by "
                     f"{mean['earlier study loop, another permutation seed'] - mean['earlier study loop']:+.3f} nats.")
    return "\n".join(lines) + "\n"


def report_from_records(record=None) -> str:
    """Rewrite the page's block from the committed record (or ``record``; ``python -m experiments report``); nothing
    without one."""
    return write_block_from_record(PAGE, "stage2_fit_isolation", markdown, OUTPUT if record is None else record, REPORT_COMMAND)


def main(argv=None) -> dict:
    import tf_keras

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--artifacts", default=".cache/experiments/rotated_mnist_stage2_isolation")
    parser.add_argument("--output", default=str(OUTPUT))
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        help="the fits to run; those already in --output are kept, not rerun")
    parser.add_argument("--report-only", action="store_true", help="rewrite the page's block from the record, train nothing")
    options = parser.parse_args(argv)
    if options.report_only:
        if not report_from_records(options.output):
            parser.error(f"no record at {options.output}")
        return json.loads(Path(options.output).read_text())
    if options.data_dir is None:
        parser.error("--data-dir is needed to train (or use --report-only)")
    artifacts, seed = Path(options.artifacts), options.seed
    artifacts.mkdir(parents=True, exist_ok=True)
    splits = prepare_data(CONFIG, options.data_dir, seed, artifacts)
    stage1 = artifacts / f"stage1_seed{seed}"
    output = Path(options.output)
    record = {"seed": seed, "config": CONFIG.as_record(), "angles": list(CONFIG.angles), "variants": {}}
    if output.is_file():  # an earlier run's finished fits are kept
        record = json.loads(output.read_text())
    if "stage_1" not in record:  # stage 1 is trained (or loaded) inside each fit below; scored once
        extractor, head, _ = trained_classifier(CONFIG, splits, seed, 0.0, stage1)
        record["stage_1"] = scores(classifier(extractor, head), splits)
    for variant in options.variants:
        if variant in record["variants"]:
            continue
        extractor, head, _ = trained_classifier(CONFIG, splits, seed, 0.0, stage1)  # a fresh copy of stage 1
        model = classifier(extractor, head)
        model.build((None, splits.x_train.shape[1]))
        start = time.process_time()
        if variant.startswith("earlier study loop"):
            stream = seed + (ANOTHER_STREAM if variant.endswith("seed") else 0)
            earlier_study_loop(model, splits.x_train, splits.y_train, CONFIG, stream)
        else:
            schedule = stage2_schedule(CONFIG)
            if variant == "library, no plateau":
                schedule = dataclasses.replace(schedule, plateau_patience=10**9)
            tf_keras.utils.set_random_seed(seed)
            train_network(model, splits.x_train, splits.y_train, "softmax", schedule)
        record["variants"][variant] = {**scores(model, splits), "cpu_seconds": time.process_time() - start}
        print(f"{variant}: mean test log-likelihood over the angles {np.mean(record['variants'][variant]['log_likelihood']):.3f}", flush=True)
        atomic_write_text(output, json.dumps(record, indent=1) + "\n")  # each finished fit is kept
    report_from_records(output)
    return record


if __name__ == "__main__":
    main()
