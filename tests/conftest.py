import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

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


def _save_with_tampered_config(obj, kind_name: str, directory, tamper):
    """``activated_dgp.save(obj, directory)`` with the config of its saved kind ``kind_name`` edited by ``tamper``: a
    directory whose header disagrees with its variables, written by the real writer."""
    import dataclasses

    from activated_dgp import saving

    kind = next(k for k in saving._KINDS.values() if k.name == kind_name)

    def describe(item):
        description = kind.describe(item)
        tamper(description.config)
        return description

    saving.register_saved_kind(dataclasses.replace(kind, describe=describe))
    try:
        return saving.save(obj, directory)
    finally:
        saving.register_saved_kind(kind)


@pytest.fixture(scope="session")
def save_with_tampered_config():
    """``save_with_tampered_config(obj, kind_name, directory, tamper)``: save with the kind's config edited."""
    return _save_with_tampered_config


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
