"""``predict_class_probabilities`` of a converted CNN head against Keras ``predict`` of the CNN, on the same images.

Model: the rotated-MNIST-sized CNN users write, Conv2D(32, 3, relu) → MaxPool → Conv2D(64, 3, relu) → MaxPool →
Flatten, followed by a head of zonal Swish units, ``ActivatedLayer(64)`` → ``Dense(10)`` → ``Softmax`` (the head
:func:`activated_dgp.make_convertible` gives a ReLU ``Dense(64)`` head), float64, untrained: the cost does not depend
on the values. The CNN is split by :func:`activated_dgp.deep.network_reading.split_convertible_head`, its head converted
by :func:`activated_dgp.dgp_from_keras`. Timed, after one untimed call each (tracing), three calls of each taking turns (the medians): Keras
``cnn.predict(images, verbose=0)``, and the converted model's ``predict_class_probabilities`` with its defaults
(S = 100 samples, the default memory budget) on the extracted features, plus the extraction itself.

Run:  python -m benchmarks.prediction_cnn_vs_keras          (1,000 images; writes docs/results/prediction_cnn_vs_keras.json
                                                           and the "prediction-cnn-vs-keras" block of docs/benchmarks*.md)
      python -m benchmarks.prediction_cnn_vs_keras --images 100 --no-write    (a quick check that it runs)
"""

from __future__ import annotations

from pathlib import Path
import time

import gpflow
import numpy as np
import tf_keras

from activated_dgp import dgp_from_keras, predict_class_probabilities
from activated_dgp.deep.network_reading import split_convertible_head
from activated_dgp.deep.twin import ActivatedLayer
from activated_dgp.training import extracted_features
from benchmarks._report import (command_line, load_average_line, machine_state, median, record_line, report_block,
                                write_record)

OUTPUT = Path(__file__).resolve().parents[1] / "docs" / "results" / "prediction_cnn_vs_keras.json"
REPORT_COMMAND = "python -m benchmarks.prediction_cnn_vs_keras --report-only"
REPORT_BLOCKS = [("docs/benchmarks_prediction.md", "prediction-cnn-vs-keras")]
DEFAULTS = {"images": 1_000}
UNITS, CLASSES, SAMPLES = 64, 10, 100


def build_cnn():
    dtype = gpflow.default_float()
    tf_keras.utils.set_random_seed(0)
    return tf_keras.Sequential([
        tf_keras.Input((28, 28, 1), dtype=dtype),
        tf_keras.layers.Conv2D(32, 3, activation="relu", dtype=dtype), tf_keras.layers.MaxPooling2D(dtype=dtype),
        tf_keras.layers.Conv2D(64, 3, activation="relu", dtype=dtype), tf_keras.layers.MaxPooling2D(dtype=dtype),
        tf_keras.layers.Flatten(dtype=dtype),
        ActivatedLayer(UNITS, seed=0), tf_keras.layers.Dense(CLASSES, dtype=dtype), tf_keras.layers.Softmax(dtype=dtype),
    ], name="cnn")


def measure(images: int, output=OUTPUT) -> dict:
    X = np.random.default_rng(0).uniform(size=(images, 28, 28, 1))
    cnn = build_cnn()
    extractor, head = split_convertible_head(cnn)
    dgp = dgp_from_keras(head, num_data=60_000).dgp

    cnn.predict(X, verbose=0)
    predict_class_probabilities(dgp, extracted_features(extractor, X), progress=False)
    keras_times, extraction_times, dgp_times = [], [], []
    for _ in range(3):  # three calls of each, taking turns; the medians are reported
        start = time.perf_counter()
        cnn.predict(X, verbose=0)
        keras_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        features = extracted_features(extractor, X)
        extraction_times.append(time.perf_counter() - start)
        probabilities = predict_class_probabilities(dgp, features, progress=False)
        dgp_times.append(time.perf_counter() - start)
    keras_seconds, extraction_seconds, dgp_seconds = median(keras_times), median(extraction_times), median(dgp_times)
    assert probabilities.shape == (images, CLASSES)
    print(f"Keras predict {keras_seconds:.3f} s, features + predict_class_probabilities {dgp_seconds:.3f} s "
          f"({dgp_seconds / keras_seconds:.1f}×; the extraction {extraction_seconds:.3f} s)", flush=True)
    record = {"command": command_line("python -m benchmarks.prediction_cnn_vs_keras", {"images": images}, DEFAULTS),
              "images": images, "units": UNITS, "classes": CLASSES, "samples": SAMPLES,
              "keras_seconds": round(keras_seconds, 4), "extraction_seconds": round(extraction_seconds, 4),
              "dgp_seconds": round(dgp_seconds, 4), "keras_seconds_each": [round(t, 4) for t in keras_times],
              "dgp_seconds_each": [round(t, 4) for t in dgp_times], **machine_state()}
    if output is not None:
        write_record(output, record)
    return record


def markdown(record: dict) -> str:
    """The "prediction-cnn-vs-keras" block of docs/benchmarks*.md from its record."""
    keras, dgp, extraction = record["keras_seconds"], record["dgp_seconds"], record["extraction_seconds"]
    return f"""{record_line(OUTPUT, record["command"])}

Command: `{record["command"]}` ({record["images"]:,} images of 28 × 28; Conv2D(32) → pool → Conv2D(64) → pool → Flatten,
then a head of {record["units"]} zonal Swish units → Dense({record["classes"]}) → softmax, converted; float64;
`predict_class_probabilities` with its defaults, S = {record["samples"]} samples).

| method | seconds | / Keras `predict` |
|---|---|---|
| Keras `cnn.predict(images)` | {keras:.3f} | 1.0 |
| converted: feature extraction + `predict_class_probabilities` | {dgp:.3f} | {dgp / keras:.1f} |
| of which the feature extraction | {extraction:.3f} | {extraction / keras:.1f} |

{spread(record)}{load_average_line(record)}"""


def spread(record: dict) -> str:
    """The timed calls behind the medians, when the record has them."""
    if "keras_seconds_each" not in record:
        return ""
    each = lambda times: ", ".join(f"{t:.3f}" for t in times)  # noqa: E731
    return (f"- Each of the timed calls (seconds): Keras {each(record['keras_seconds_each'])}; converted "
            f"{each(record['dgp_seconds_each'])}; the table gives the medians.\n")


def report_from_records() -> str:
    return report_block("prediction-cnn-vs-keras", markdown, OUTPUT, REPORT_COMMAND, made_by="python -m benchmarks.prediction_cnn_vs_keras")


def _options(parser) -> None:
    parser.add_argument("--images", type=int, default=DEFAULTS["images"])


def _measure(args, output):
    return measure(args.images, output=output)


if __name__ == "__main__":
    from benchmarks._report import measure_or_report

    measure_or_report("benchmarks.prediction_cnn_vs_keras", __doc__.splitlines()[0], _measure, report_from_records, _options, markdown, OUTPUT)
