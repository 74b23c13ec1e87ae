"""The studies (``python -m experiments <study>``, ``python -m experiments.<study>``). TensorFlow's C++ log level is
set here, once, before any study module imports TensorFlow: warnings and errors only (``TF_CPP_MIN_LOG_LEVEL=3``
unless the environment sets it)."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
