import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# pytest-xdist runs one process per core: each gets its share of TensorFlow's op threads instead of a pool as large
# as the machine (two workers on two cores, each with two busy threads, spent about 5 % more CPU; a subprocess a test
# starts inherits the setting)
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    _threads = str(max(1, (os.cpu_count() or 1) // _workers))
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", _threads)
    os.environ.setdefault("TF_NUM_INTEROP_THREADS", _threads)

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _float64_and_seed():
    gpflow.config.set_default_float(np.float64)
    np.random.seed(0)
    yield


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def _interrupt_after(epochs: int):
    """A tf-keras callback that raises KeyboardInterrupt at the end of epoch ``epochs`` (a simulated crash,
    after the callbacks listed before it have run)."""
    import tf_keras

    class InterruptAfter(tf_keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if epoch + 1 == epochs:
                raise KeyboardInterrupt("simulated interruption")

    return InterruptAfter()


@pytest.fixture(scope="session")
def interrupt_after():
    """``interrupt_after(epochs)``: a callback that simulates a crash at the end of that epoch."""
    return _interrupt_after


# Slow tests (@pytest.mark.slow) are deselected unless --runslow is given or ADGP_RUN_SLOW=1.
def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="also run tests marked slow")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long-running test, deselected unless --runslow or ADGP_RUN_SLOW=1")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow") or os.environ.get("ADGP_RUN_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with --runslow or ADGP_RUN_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
