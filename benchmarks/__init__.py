"""The benchmarks (``python -m benchmarks.<name>``). TensorFlow's C++ log level is set here, once, before any
benchmark module imports TensorFlow: warnings and errors only (``TF_CPP_MIN_LOG_LEVEL=3`` unless the environment
sets it)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
