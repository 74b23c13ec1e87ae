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
