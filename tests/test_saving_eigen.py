"""Saving the eigen module's approximations, the Laplace approximation and the kernel machines with
activated_dgp.save / activated_dgp.load: round trips in a fresh process, refusals, tampered directories, and
Laplace directories written by activated_dgp 0.1.

Every saved object is loaded by ONE script in a fresh Python process (tests/conftest.py's, to keep the suite fast) and its predictions are compared
bit for bit with those of the object that was saved. Each object's state is away from anything its constructor
makes: fitted or trained, kernels with parameters moved off their defaults (one of them frozen), an optimiser that
has taken steps, an EigenPro model that averages its iterates. Training continued in the fresh process (NeuralEF,
EigenPro) is compared with the same continuation in the saving process, which checks the optimiser state, step
counters and epoch histories that predictions do not read.
"""

import inspect
import json
import os
import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tf_keras

import activated_dgp
from activated_dgp import ActivationFeature, ZonalArcCosine, eigen, saving
from activated_dgp.eigen import IKA, LinearisedLaplace, NeuralEF, Nystrom, activation_basis, neural_eigenfunction
from activated_dgp.kernel_machines import EigenPro2, EigenPro3

LEGACY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "laplace_format1")



def se_kernel():
    return gpflow.kernels.SquaredExponential(variance=1.7, lengthscales=[0.7, 1.3])


def data():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(24, 2))
    return X, np.column_stack([np.sin(2 * X[:, 0]), np.cos(X[:, 1])]), rng.normal(size=(6, 2))


# built identically here and in the fresh process: the kernel NeuralEF and EigenPro continue training with, the data
SHARED = inspect.getsource(se_kernel) + inspect.getsource(data)

SCRIPT = """
import json, sys
import gpflow
import numpy as np
import activated_dgp
from activated_dgp.eigen import LinearisedLaplace
SHARED
root = sys.argv[1]
meta = json.load(open(f"{root}/meta.json"))
X, Y, X_test = data()
out, info = {}, {}
for name in meta["eigen"]:
    approximation = activated_dgp.load(f"{root}/{name}")
    inputs = np.arange(12.0) if name == "nystrom_gram" else X_test
    out[name] = np.concatenate([approximation(inputs).numpy().ravel(), approximation.eigenvalues.numpy()])
    info[name] = type(approximation).__name__
kernel = activated_dgp.load(f"{root}/nystrom_sum").kernel
info["kernel_trainable"] = sorted(path for path, p in gpflow.utilities.parameter_dict(kernel).items() if p.trainable)
out["kernel_values"] = np.concatenate([p.numpy().ravel() for p in kernel.parameters])
for name in meta["laplace"]:
    la = LinearisedLaplace.load(f"{root}/{name}")
    out[name] = np.concatenate([t.numpy().ravel() for t in (*la.predict_f(X_test), *la.predict_y(X_test))])
    info[name] = [la.method, la.likelihood, float(la.prior_precision)]
for name in meta["machines"]:
    model = activated_dgp.load(f"{root}/{name}")
    out[name] = model.predict(X_test)
    out[f"{name}/history"] = model.history["loss"]
# training continued in this process: NeuralEF needs its kernel again, EigenPro its data
neuralef = activated_dgp.load(f"{root}/neuralef")
neuralef.fit(X, 5, kernel=se_kernel(), print_every=0)
out["continued/neuralef"] = np.concatenate([neuralef(X_test).numpy().ravel(), [neuralef.steps]])
for name in meta["machines"]:
    model = activated_dgp.load(f"{root}/{name}")
    model.fit(X, Y, epochs=meta["epochs"][name] + 2, progress=False)
    out[f"continued/{name}"] = model.predict(X_test)
np.savez(f"{root}/loaded.npz", **out)
json.dump(info, open(f"{root}/loaded.json", "w"))
"""


def _eigen_outputs(approximation, inputs):
    return np.concatenate([approximation(inputs).numpy().ravel(), approximation.eigenvalues.numpy()])


def _laplace_outputs(la, X_test):
    return np.concatenate([t.numpy().ravel() for t in (*la.predict_f(X_test), *la.predict_y(X_test))])


def mlp(outputs, seed):
    tf_keras.utils.set_random_seed(seed)
    return tf_keras.Sequential(
        [tf_keras.Input((2,), dtype="float64"), tf_keras.layers.Dense(4, activation="tanh", dtype="float64"), tf_keras.layers.Dense(outputs, dtype="float64")]
    )


def eigen_cases(X):
    se = se_kernel()
    matern = gpflow.kernels.Matern32(variance=0.8, lengthscales=0.6)
    zonal = ZonalArcCosine(2, 5, variance=0.6, lengthscales=[1.0, 2.0, 0.5])
    gpflow.set_trainable(zonal.variance, False)  # a frozen parameter comes back frozen
    G = se(X[:12]).numpy()
    networks = [neural_eigenfunction(2, width=4, hidden_layers=1, activation="sin", seed=j) for j in range(2)]
    return {
        "nystrom_se": Nystrom(3, kernel=se).fit(X[:16]),
        "nystrom_sum": Nystrom(3, kernel=gpflow.kernels.Sum([matern, zonal])).fit(X[:16]),
        "nystrom_gram": Nystrom(2, kernel=G).fit(np.arange(8)),
        "ika": IKA(2, activation_basis(X[:6], "tanh")).fit(X, se),
        "neuralef": NeuralEF(2, kernel=se, input_dim=2, width=6, hidden_layers=1, batch_size=12, oversampling=1, learning_rate=3e-3).fit(
            X, 15, schedule="cosine", print_every=0),
        "neuralef_networks": NeuralEF(2, kernel=se, networks=networks, batch_size=12).fit(X, 10, print_every=0),
    }


def laplace_cases(X, Y, ika):
    labels = (X[:, :1] > 0).astype(float)
    classes = np.digitize(X[:, :1], [-0.5, 0.5]).astype(float)
    X_val, Y_val = X[:8] + 0.1, Y[:8, :1]
    neuralef = dict(num_eigenpairs=2, neuralef_steps=10, neuralef_options={"width": 4, "hidden_layers": 1})
    return {
        "lla_exact": LinearisedLaplace(mlp(2, 0), noise_variance=0.3, prior_precision="marginal_likelihood", verbose=0).fit(X, Y),
        "lla_kron": LinearisedLaplace(mlp(3, 1), "softmax", method="kron", prior_precision=0.7, verbose=0).fit(X, classes),
        "lla_last_layer": LinearisedLaplace(mlp(1, 2), "bernoulli", method="last_layer", prior_precision=2.0, verbose=0).fit(X, labels),
        "lla_diagonal": LinearisedLaplace(mlp(1, 3), method="diagonal", prior_precision="validation", prior_precision_grid=[0.1, 1.0, 10.0],
                                          verbose=0).fit(X, Y[:, :1], validation_data=(X_val, Y_val)),
        "lla_neuralef": LinearisedLaplace(mlp(3, 4), "softmax", method="neuralef", prior_precision=0.5, verbose=0, **neuralef).fit(X, classes),
        "lla_eigenfunctions": LinearisedLaplace(mlp(1, 5), method="eigenfunctions", eigenfunctions=ika, prior_precision=0.2, verbose=0).fit(X, Y[:, :1]),
    }


def machine_cases(X, Y):
    exponential = gpflow.kernels.Exponential(variance=0.9, lengthscales=1.3)
    rng = np.random.default_rng(3)
    zonal = ZonalArcCosine(2, 6, variance=1.2, lengthscales=[1.0, 0.8, 1.5])
    feature = ActivationFeature(rng.normal(size=(5, 3)), "softplus", 6)
    centers = dict(num_centers=10, subsample_size=20, num_eigenpairs=3, projection_subsample=8, projection_eigenpairs=3, max_batch=8,
                   power_iterations=5, average_after=1)
    cases = {
        "eigenpro3": (EigenPro3(exponential, preconditioner=Nystrom(4, kernel=exponential).fit(X), **centers), 3),
        "eigenpro3_feature": (EigenPro3(zonal, feature=feature, preconditioner="span", subsample_size=24, num_eigenpairs=2, projection="exact",
                                        batch_size=12, power_iterations=5), 2),
        "eigenpro2": (EigenPro2(se_kernel(), subsample_size=16, num_eigenpairs=3, max_batch=8), 2),
    }
    return {name: (model.fit(X, Y, epochs=epochs, progress=False), epochs) for name, (model, epochs) in cases.items()}


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory, fresh_process):
    """Save every case, load them all in ONE script of the fresh process (tests/conftest.py); returns (expected,
    loaded, info, objects)."""
    gpflow.config.set_default_float(np.float64)
    root = tmp_path_factory.mktemp("saving_eigen")
    X, Y, X_test = data()
    expected, objects = {}, {}
    meta = {"eigen": [], "laplace": [], "machines": [], "epochs": {}}
    for name, approximation in eigen_cases(X).items():
        activated_dgp.save(approximation, root / name)
        expected[name] = _eigen_outputs(approximation, np.arange(12.0) if name == "nystrom_gram" else X_test)
        meta["eigen"].append(name)
        objects[name] = approximation
    expected["kernel_values"] = np.concatenate([p.numpy().ravel() for p in objects["nystrom_sum"].kernel.parameters])
    for name, la in laplace_cases(X, Y, objects["ika"]).items():
        la.save(root / name)
        expected[name] = _laplace_outputs(la, X_test)
        meta["laplace"].append(name)
        objects[name] = la
    for name, (model, epochs) in machine_cases(X, Y).items():
        activated_dgp.save(model, root / name)
        expected[name], expected[f"{name}/history"] = model.predict(X_test), model.history["loss"]
        meta["machines"].append(name)
        meta["epochs"][name] = epochs
        objects[name] = model
    # the same continued training here, after saving
    objects["neuralef"].fit(X, 5, print_every=0)
    expected["continued/neuralef"] = np.concatenate([objects["neuralef"](X_test).numpy().ravel(), [objects["neuralef"].steps]])
    for name in meta["machines"]:
        objects[name].fit(X, Y, epochs=meta["epochs"][name] + 2, progress=False)
        expected[f"continued/{name}"] = objects[name].predict(X_test)
    (root / "meta.json").write_text(json.dumps(meta))
    fresh_process.run(SCRIPT.replace("SHARED\n", SHARED), root)
    with np.load(root / "loaded.npz") as loaded:
        loaded = {key: loaded[key] for key in loaded.files}
    return expected, loaded, json.loads((root / "loaded.json").read_text()), objects


# ------------------------------------------------------------------------------------------------ round trips

EIGEN = ["nystrom_se", "nystrom_sum", "nystrom_gram", "ika", "neuralef", "neuralef_networks"]
LAPLACE = ["lla_exact", "lla_kron", "lla_last_layer", "lla_diagonal", "lla_neuralef", "lla_eigenfunctions"]
MACHINES = ["eigenpro3", "eigenpro3_feature", "eigenpro2"]


@pytest.mark.parametrize("name", EIGEN + LAPLACE + MACHINES)
def test_a_loaded_object_predicts_bit_for_bit_in_a_fresh_process(round_trips, name):
    expected, loaded, info, objects = round_trips
    np.testing.assert_array_equal(loaded[name], expected[name])
    if name in MACHINES:
        np.testing.assert_array_equal(loaded[f"{name}/history"], expected[f"{name}/history"])
    if name in LAPLACE:
        la = objects[name]
        assert info[name] == [la.method, la.likelihood, float(la.prior_precision)]
    else:
        assert info.get(name, type(objects[name]).__name__) == type(objects[name]).__name__


def test_state_is_away_from_what_the_constructors_make(round_trips):
    """So that a variable the loader dropped would show in the predictions."""
    _, _, _, objects = round_trips
    assert objects["neuralef"].optimizer.iterations.numpy() > 0 and not np.allclose(objects["neuralef"]._sigma.numpy(), 1.0)
    assert objects["lla_exact"].prior_precision != 1.0 and objects["lla_diagonal"].validation_nll is not None
    model = objects["eigenpro3"]
    assert not np.allclose(model.weights, model.state.weights.numpy())  # predicts with the average, not the iterate
    fresh = NeuralEF(2, input_dim=2, width=6, hidden_layers=1, batch_size=12, oversampling=1)
    X_test = data()[2]
    assert np.max(np.abs(fresh._normalised(X_test).numpy()[:, :2] - objects["neuralef"]._normalised(X_test).numpy()[:, :2])) > 1e-3


def test_the_kernel_comes_back_with_its_values_and_trainable_flags(round_trips):
    expected, loaded, info, _ = round_trips
    np.testing.assert_array_equal(loaded["kernel_values"], expected["kernel_values"])
    assert not np.allclose(expected["kernel_values"][:2], 1.0)  # moved off the defaults
    assert "kernels[1].variance" not in " ".join(info["kernel_trainable"]) and any("kernels[1].lengthscales" in p for p in info["kernel_trainable"])


@pytest.mark.parametrize("name", ["neuralef", "eigenpro3", "eigenpro3_feature", "eigenpro2"])
def test_training_continues_in_a_fresh_process_as_it_would_have_here(round_trips, name):
    expected, loaded, _, _ = round_trips
    np.testing.assert_array_equal(loaded[f"continued/{name}"], expected[f"continued/{name}"])


# ------------------------------------------------------------------------------------------------ refusals


class _Callable:
    def __call__(self, X):
        return np.tanh(X)


class _Subclassed(tf_keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = tf_keras.layers.Dense(1, dtype="float64")

    def call(self, inputs):
        return self.dense(inputs)


class _Basis(tf.Module):
    def __init__(self, seed):
        super().__init__()
        self.w = tf.Variable(np.random.default_rng(seed).normal(size=(2, 1)))

    def __call__(self, X):
        return tf.tanh(tf.matmul(tf.convert_to_tensor(X, tf.float64), self.w))


def _prior_kernel():
    kernel = se_kernel()
    kernel.variance.prior = __import__("tensorflow_probability").distributions.Gamma(np.float64(2.0), np.float64(2.0))
    return kernel


def _subclassed_laplace(X, Y):
    model = _Subclassed()
    model(X[:2])
    return LinearisedLaplace(model, verbose=0).fit(X, Y[:, :1])


REFUSALS = [
    ("IKA with a callable basis", lambda X, Y: IKA(2, _Callable()).fit(X, se_kernel()), r"IKA approximation: its basis is a _Callable callable"),
    ("ActivationBasis with an unnamed activation", lambda X, Y: IKA(2, activation_basis(X[:4], lambda h: h**2)).fit(X, se_kernel()),
     r"ActivationBasis: its activation '<lambda>' is a callable"),
    ("NeuralEF with a network that is not a tf-keras model", lambda X, Y: NeuralEF(2, kernel=se_kernel(), networks=[_Basis(0), _Basis(1)], batch_size=8),
     r"NeuralEF: its network 0 is a _Basis, not a tf-keras model"),
    ("NeuralEF with an unnamed activation", lambda X, Y: NeuralEF(2, input_dim=2, activation=lambda h: h, batch_size=8),
     r"NeuralEF's networks: its activation '<lambda>' is a callable"),
    ("Nystrom on a feature kernel", lambda X, Y: Nystrom(2, kernel=eigen.nngp_kernel(lambda seed: neural_eigenfunction(2, 4, 1, seed=seed), 3)).fit(X),
     r"Nystrom approximation: its kernel is a FeatureKernel"),
    ("Nystrom on an unsupported gpflow kernel", lambda X, Y: Nystrom(2, kernel=gpflow.kernels.Polynomial()).fit(X), r"a gpflow\..*Polynomial kernel"),
    ("a kernel parameter with a prior", lambda X, Y: Nystrom(2, kernel=_prior_kernel()).fit(X), r"parameter .*variance differs"),
    ("EigenPro3 on a kernel of a user's class", lambda X, Y: EigenPro3(type("Mine", (gpflow.kernels.SquaredExponential,), {})(), num_centers=4),
     r"a .*Mine kernel"),
    ("LinearisedLaplace before fit", lambda X, Y: LinearisedLaplace(mlp(1, 0), verbose=0), r"not fitted yet"),
    ("LinearisedLaplace of a subclassed network", _subclassed_laplace, r"cannot save the network .*Keras cannot rebuild it"),
    ("LinearisedLaplace with eigenfunctions of no saved kind", lambda X, Y: LinearisedLaplace(
        mlp(1, 0), method="eigenfunctions", eigenfunctions=_Eigenpairs(), verbose=0).fit(X, Y[:, :1]), r"eigenfunctions are a _Eigenpairs"),
]


class _Eigenpairs:
    eigenvalues = np.array([1.0, 0.5])

    def __call__(self, X):
        return np.column_stack([np.sin(X[:, 0]), np.cos(X[:, 1])])


@pytest.mark.parametrize("make, message", [case[1:] for case in REFUSALS], ids=[case[0] for case in REFUSALS])
def test_what_could_not_be_rebuilt_is_refused_at_save_time_by_name(tmp_path, make, message):
    X, Y, _ = data()
    obj = make(X, Y)
    with pytest.raises(ValueError, match=message):
        activated_dgp.save(obj, tmp_path / "saved")
    assert not saving.is_saved_directory(tmp_path / "saved")


# ------------------------------------------------------------------------------------------------ load-side checks


def test_a_tampered_kernel_or_laplace_config_is_refused_at_load(tmp_path, save_with_tampered_config):
    X, Y, _ = data()
    nystrom = Nystrom(2, kernel=se_kernel()).fit(X)
    directory = save_with_tampered_config(nystrom, "kernel", tmp_path / "kernel", lambda c: c["structure"].update(lengthscales_shape=[]))
    with pytest.raises(ValueError, match="lengthscales differs"):
        activated_dgp.load(directory)
    la = LinearisedLaplace(mlp(1, 0), prior_precision=2.0, verbose=0).fit(X, Y[:, :1])
    directory = save_with_tampered_config(la, "linearised_laplace", tmp_path / "lla", lambda c: c.update(parameter_fingerprint=1.0))
    with pytest.raises(ValueError, match="θ_MAP differs"):
        LinearisedLaplace.load(directory)
    with pytest.raises(ValueError, match="holds a saved 'nystrom', not a saved linearised_laplace"):
        LinearisedLaplace.load(activated_dgp.save(nystrom, tmp_path / "nystrom"))


def test_laplace_load_checks_a_given_model_against_the_saved_network(tmp_path):
    X, Y, X_test = data()
    model = mlp(1, 0)
    la = LinearisedLaplace(model, prior_precision=2.0, verbose=0).fit(X, Y[:, :1])
    la.save(tmp_path / "lla")
    again = LinearisedLaplace.load(tmp_path / "lla", model)
    assert again.model is not model  # the saved network comes back with it
    np.testing.assert_array_equal(again.predict_f(X_test)[1].numpy(), la.predict_f(X_test)[1].numpy())
    with pytest.raises(ValueError, match="θ_MAP differs"):
        LinearisedLaplace.load(tmp_path / "lla", mlp(1, 7))
    with pytest.raises(ValueError, match="eigenfunctions= is for directories saved by activated_dgp 0.1"):
        LinearisedLaplace.load(tmp_path / "lla", eigenfunctions=_Eigenpairs())
    with pytest.raises(ValueError, match="does not exist"):
        LinearisedLaplace.load(tmp_path / "missing")


# ------------------------------------------------------------------------------------------------ 0.1 directories


@pytest.mark.parametrize("method", ["exact", "kron", "neuralef"])
def test_a_laplace_directory_saved_by_0_1_still_loads_with_a_deprecation_warning(tmp_path, method):
    """tests/fixtures/laplace_format1 was written by the 0.1 writer (tests/fixtures/make_laplace_format1.py says
    how), with the network beside it and the predictions of the writing process."""
    reference = np.load(os.path.join(LEGACY, "reference.npz"))
    model = tf_keras.models.load_model(os.path.join(LEGACY, "network.keras"))
    with pytest.warns(DeprecationWarning, match="saved by activated_dgp 0.1 .*save it again"):
        la = LinearisedLaplace.load(os.path.join(LEGACY, method), model)
    mean, variance = (t.numpy() for t in la.predict_f(reference["X_test"]))
    np.testing.assert_allclose(mean, reference[f"{method}_mean"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(variance, reference[f"{method}_variance"], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(la.predict_y(reference["X_test"])[1].numpy(), reference[f"{method}_y_variance"], rtol=1e-12, atol=1e-14)
    la.save(tmp_path / "again")  # saved again, it loads without the model and without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        again = LinearisedLaplace.load(tmp_path / "again")
    np.testing.assert_array_equal(again.predict_f(reference["X_test"])[1].numpy(), variance)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(ValueError, match="without the network: pass model="):
            LinearisedLaplace.load(os.path.join(LEGACY, method))
