"""Compiled training step, streaming data and tf.distribute, each against an independent run:
the uncompiled step, the in-memory full-batch fit, the single-device run."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf

from activated_dgp import TrainingSchedule, build_activated_dgp, train_dgp
from activated_dgp.data.streaming import ArraySource, CsvSource

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "distributed_worker.py"


def _problem(num_data=96, input_dim=3, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, input_dim))
    Y = np.sin(2.0 * X[:, :1]) + 0.1 * rng.standard_normal((num_data, 1))
    return X, Y


def _dgp(num_data, input_dim=3, layers=1):
    return build_activated_dgp(input_dim, num_data, num_layers=layers, num_units=8, seed=1)


def _values(dgp):
    return {k: v.numpy() for k, v in gpflow.utilities.parameter_dict(dgp).items() if isinstance(v, gpflow.Parameter)}


def _assert_same(a, b, rtol=1e-9, atol=1e-12):
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_allclose(a[key], b[key], rtol=rtol, atol=atol, err_msg=key)


def test_xla_step_matches_graph_step():
    # one layer: no sampled hidden layer, so the step is deterministic and XLA must agree to round-off
    X, Y = _problem()
    runs = []
    for jit in (False, True):
        dgp = _dgp(len(X))
        train_dgp(dgp, ArraySource(X, Y, block_rows=32), schedule=TrainingSchedule(epochs=2, batch_size=32, jit_compile=jit), seed=5)
        runs.append(_values(dgp))
    _assert_same(*runs)
    assert not np.allclose(runs[0][".f_layers[0].q_mu"], 0.0)  # it trained


def _full_batch_reference(X, Y, epochs):
    dgp = _dgp(len(X))
    train_dgp(dgp, X, Y, TrainingSchedule(epochs=epochs, batch_size=len(X)))  # the original in-memory path
    return _values(dgp)


@pytest.mark.parametrize("kind", ["dataset", "batched dataset", "memmap", "csv"])
def test_streamed_sources_match_in_memory_fit(kind, tmp_path):
    # full-batch steps do not depend on the order of the rows: every source must give the in-memory result
    # (to round-off: the rows are summed in another order, and Adam's normalised steps carry that along)
    X, Y = _problem()
    epochs = 3
    if kind == "dataset":
        data = tf.data.Dataset.from_tensor_slices((X, Y))
    elif kind == "batched dataset":
        data = tf.data.Dataset.from_tensor_slices({"inputs": X, "targets": Y}).batch(10)
    elif kind == "memmap":
        for name, array in (("x", X), ("y", Y)):
            np.lib.format.open_memmap(tmp_path / f"{name}.npy", mode="w+", dtype=np.float64, shape=array.shape)[:] = array
        data = ArraySource.from_npy(tmp_path / "x.npy", tmp_path / "y.npy", block_rows=25)
    else:
        shards = []
        for i, rows in enumerate(np.array_split(np.arange(len(X)), 3)):
            shards.append(tmp_path / f"part-{i}.csv")
            np.savetxt(shards[-1], np.hstack([X[rows], Y[rows]]), delimiter=",", header="x0,x1,x2,y", comments="")
        data = CsvSource(shards, targets=1, header=True)
        assert data.num_data == len(X)
    dgp = _dgp(len(X))
    train_dgp(dgp, data, schedule=TrainingSchedule(epochs=epochs, batch_size=len(X)))
    _assert_same(_values(dgp), _full_batch_reference(X, Y, epochs), rtol=1e-6, atol=1e-8)


def test_stream_visits_every_row_once_per_epoch():
    X = np.arange(50, dtype=np.float64)[:, None] * np.ones((1, 2))
    source = ArraySource(X, X[:, :1], block_rows=7)
    for epoch in range(2):
        batches = list(source.epoch(8, seed=3, epoch=epoch, window_blocks=2))
        assert len(batches) == source.batches_per_epoch(8) == 7
        rows = np.concatenate([x[:, 0] for x, _ in batches])
        np.testing.assert_array_equal(np.sort(rows), np.arange(50))
    first = [x[:, 0] for x, _ in source.epoch(8, seed=3, epoch=0)]
    second = [x[:, 0] for x, _ in source.epoch(8, seed=3, epoch=1)]
    assert not all(np.array_equal(a, b) for a, b in zip(first, second))  # reshuffled


def test_bad_streams_are_named(tmp_path):
    X, Y = _problem(num_data=40)
    dgp = _dgp(len(X))
    schedule = TrainingSchedule(epochs=1, batch_size=8)
    with pytest.raises(ValueError, match="2 columns but the model takes 3"):
        train_dgp(dgp, tf.data.Dataset.from_tensor_slices((X[:, :2], Y)), schedule=schedule)
    with pytest.raises(ValueError, match="must yield"):
        train_dgp(dgp, tf.data.Dataset.from_tensor_slices(X), schedule=schedule)
    with pytest.raises(ValueError, match="has 30 rows but num_data is 40"):
        train_dgp(dgp, tf.data.Dataset.from_tensor_slices((X[:30], Y[:30])), schedule=schedule)
    with pytest.raises(ValueError, match="N = 30 rows but the DGP was built with num_data = 40"):
        train_dgp(dgp, ArraySource(X[:30], Y[:30]), schedule=schedule)
    bad = X.copy()
    bad[[3, 17]] = np.nan
    with pytest.raises(ValueError, match=r"X contains NaN or inf in rows \[3, 17\]"):
        train_dgp(dgp, ArraySource(bad, Y, block_rows=64), schedule=schedule)
    with pytest.raises(ValueError, match="Y contains NaN or inf"):
        train_dgp(dgp, tf.data.Dataset.from_tensor_slices((X, np.where(np.arange(40)[:, None] == 5, np.inf, Y))), schedule=schedule)
    shard = tmp_path / "bad.csv"
    shard.write_text("1,2,3,4\n1,2,x,4\n")
    with pytest.raises(ValueError, match="cannot parse"):
        train_dgp(_dgp(2), CsvSource([shard]), schedule=schedule)

    class ThreeReplicas:
        num_replicas_in_sync = 3

    with pytest.raises(ValueError, match="global batch size 8 is not divisible by the strategy's 3 replicas"):
        train_dgp(dgp, X, Y, schedule, strategy=ThreeReplicas())


def _run_worker(strategy, out, env=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.Popen(
        [sys.executable, str(WORKER), "--strategy", strategy, "--out", str(out)], env=env,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _reference():
    sys.path.insert(0, str(WORKER.parent))
    try:
        import distributed_worker
    finally:
        sys.path.pop(0)
    return distributed_worker.train(None, epochs=2, batch_size=64)[0]


def _finish(processes, timeout):
    try:
        for process in processes:
            output, _ = process.communicate(timeout=timeout)
            assert process.returncode == 0, output[-3000:]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_mirrored_two_devices_match_one_device(tmp_path):
    # MirroredStrategy over two logical CPUs: the global batch of 64 is split 32 + 32; after 8 steps the
    # parameters equal a single-device run on the same global batches
    process = _run_worker("mirrored", tmp_path / "mirrored.npz")
    reference = _reference()
    _finish([process], timeout=300)
    _assert_same(dict(np.load(tmp_path / "mirrored.npz")), reference)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.mark.slow
def test_two_workers_match_one_worker(tmp_path):
    # MultiWorkerMirroredStrategy, two processes on 127.0.0.1 (one CPU replica each), 8 steps
    ports = _free_ports(2)
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    processes = [
        _run_worker("multiworker", tmp_path / "workers.npz", {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})})
        for i in range(2)
    ]
    reference = _reference()
    _finish(processes, timeout=400)
    _assert_same(dict(np.load(tmp_path / "workers.npz")), reference)


def test_batch_predictor_one_layer_is_the_closed_form():
    # one layer: no sampling, so every sample is the exact Gaussian predictive N(y | μ(x), σ²(x) + σ_n²)
    from scipy.stats import norm

    from activated_dgp.deep import BatchPredictor

    X, Y = _problem(num_data=50)
    dgp = _dgp(len(X))
    dgp.f_layers[0].q_mu.assign(np.random.default_rng(2).standard_normal((8, 1)))
    f_mean, f_var = (t.numpy() for t in dgp.f_layers[0].predict(X))
    noise = dgp.likelihood_layer.likelihood.variance.numpy()
    predictor = BatchPredictor(dgp, num_samples=4, batch_size=16)
    mean, var = predictor.predict_y(X)
    np.testing.assert_allclose(mean, f_mean, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(var, f_var + noise, rtol=1e-10)
    np.testing.assert_allclose(predictor.predictive_log_density(X, Y), norm.logpdf(Y, f_mean, np.sqrt(f_var + noise))[:, 0], rtol=1e-10)
    with pytest.raises(ValueError, match=r"NaN or inf in rows \[20\]"):
        predictor.predict_y(np.where(np.arange(50)[:, None] == 20, np.nan, X))


def test_batch_predictor_agrees_with_eager_monte_carlo():
    # two layers: the batched stateless estimate and the eager one are independent Monte Carlo estimates
    from activated_dgp import predict_y
    from activated_dgp.deep import BatchPredictor

    X, _ = _problem(num_data=6)
    dgp = _dgp(len(X), layers=2)
    for layer in dgp.f_layers:
        layer.q_sqrt.assign(0.3 * layer.q_sqrt.numpy() / 1e-5)
    samples = 4000
    mean, var = BatchPredictor(dgp, num_samples=samples, batch_size=4).predict_y(X, seed=1)
    eager_mean, eager_var = predict_y(dgp, X, samples, seed=2)
    np.testing.assert_allclose(mean, eager_mean, atol=5 * np.sqrt(2 * var.max() / samples))
    np.testing.assert_allclose(var, eager_var, rtol=0.15)


def test_npy_rows_read_any_window_exactly_and_refuse_what_they_cannot_stream(tmp_path):
    from activated_dgp.data.streaming import NpyRows

    values = np.random.default_rng(0).normal(size=(37, 3))
    np.save(tmp_path / "v.npy", values)
    rows = NpyRows(tmp_path / "v.npy")
    assert rows.shape == (37, 3) and len(rows) == 37
    for window in (slice(0, 5), slice(30, 37), slice(35, 99), slice(10, 10)):
        np.testing.assert_array_equal(rows[window], values[window])
    np.save(tmp_path / "f.npy", np.asfortranarray(values))
    with pytest.raises(ValueError, match="C-ordered matrix"):
        NpyRows(tmp_path / "f.npy")
    np.save(tmp_path / "c.npy", values[None])
    with pytest.raises(ValueError, match=r"shape \(1, 37, 3\)"):
        NpyRows(tmp_path / "c.npy")
    with pytest.raises(FileNotFoundError, match="no such .npy file"):
        NpyRows(tmp_path / "missing.npy")
