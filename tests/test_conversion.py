"""Plain tf-keras MLPs → activated DGPs (dgp_from_keras) and the mean functions' persistence.

Every network here is also evaluated by a NumPy forward pass written in this file from the Keras weights
(``numpy_forward``), and the DGP's mean propagation is compared with that, not with the converter's own
report. Mean-function round trips are checked in a fresh process.
"""

import inspect
import json

import gpflow
import numpy as np
import pytest
import tf_keras

from activated_dgp import build_activated_dgp, build_activated_nn, dgp_from_keras, load_dgp, propagate_means, save_dgp
from activated_dgp.zonal import register_activation
from activated_dgp.deep.twin import ActivatedLayer
from test_persistence import layerwise  # each layer's mean and variance at the previous layer's mean

L = tf_keras.layers

NUMPY_ACTIVATIONS = {
    "relu": lambda z: np.maximum(z, 0.0),
    "softplus": lambda z: np.logaddexp(0.0, z),
    "swish": lambda z: z / (1.0 + np.exp(-z)),
    "linear": lambda z: z,
    "leaky": lambda z: np.where(z > 0, z, 0.2 * z),
}


def leaky(t):
    """Leaky ReLU max(t, 0.2 t), written so that it runs on NumPy, mpmath and TensorFlow values alike."""
    return 0.6 * t + 0.4 * abs(t)


@pytest.fixture(autouse=True)
def _seeded_keras():
    tf_keras.utils.set_random_seed(0)  # Keras' initialisers: every network here is the same in every run


def numpy_forward(layers, X):
    """The forward pass of a chain of Dense / Activation / Dropout layers in NumPy (float64), from the weights."""
    h = np.asarray(X, dtype=np.float64)
    for layer in layers:
        if isinstance(layer, L.Dropout):
            continue
        if isinstance(layer, L.Dense):
            h = h @ layer.kernel.numpy().astype(np.float64)
            if layer.use_bias:
                h = h + layer.bias.numpy().astype(np.float64)
        name = "relu" if isinstance(layer, L.ReLU) else getattr(getattr(layer, "activation", None), "__name__", "linear")
        h = NUMPY_ACTIVATIONS[name](h)
    return h


def randomise_biases(network, rng, scale=0.5):
    """Keras initialises biases at 0; move them, so a dropped bias shows."""
    for layer in network.layers:
        if isinstance(layer, L.Dense) and layer.use_bias:
            layer.bias.assign(scale * rng.normal(size=layer.bias.shape))


def relu_layers(dtype="float64"):
    """Dense(relu) straight into Dense + Activation(relu) (no bottleneck: V = I), Dropout between, biases on all."""
    return [
        L.Dense(8, "relu", dtype=dtype, name="first"),
        L.Dropout(0.3, dtype=dtype),
        L.Dense(6, dtype=dtype, name="pre"),
        L.Activation("relu", dtype=dtype, name="act"),
        L.Dense(1, dtype=dtype, name="out"),
    ]


def sequential(layers, input_dim=2, dtype="float64"):
    return tf_keras.Sequential([tf_keras.Input((input_dim,), dtype=dtype)] + layers)


def functional(layers, input_dim=2, dtype="float64"):
    inputs = tf_keras.Input((input_dim,), dtype=dtype)
    h = inputs
    for layer in layers:
        h = layer(h)
    return tf_keras.Model(inputs, h)


def dense_layers(network):
    return [layer for layer in network.layers if not isinstance(layer, tf_keras.layers.InputLayer)]


# ------------------------------------------------------------------------------------------------ ReLU: truncation only


@pytest.mark.parametrize("build", [sequential, functional], ids=["sequential", "functional"])
def test_biased_relu_mlp_matches_its_forward_pass_up_to_the_truncation(build, rng):
    """ReLU is positively homogeneous, so the zonal unit ‖w‖‖x̃‖ relu(ŵ·x̂) is relu(w·x̃) exactly; what is left is
    the Gegenbauer truncation at Ñ levels, which smooths the kink, with an error falling roughly like 1/Ñ
    (docs/results/conversion.json: relative RMS 5.6 %, 2.1 %, 1.0 % at Ñ = 10, 20, 40 for a 2-input MLP).
    Tolerance: at Ñ = 60 the relative RMS error must be below 1 %, and at most a third of Ñ = 10's (a 1/Ñ
    rate gives a sixth): an error that is not the truncation's (a lost bias, a wrong B) does not fall with Ñ."""
    network = build(relu_layers())
    randomise_biases(network, rng)
    X = rng.normal(size=(150, 2))
    truth = numpy_forward(dense_layers(network), X)
    errors = {}
    for level in (10, 60):
        conversion = dgp_from_keras(network, 150, truncation_level=level)
        error = propagate_means(conversion.dgp, X)[-1].numpy() - truth
        errors[level] = np.sqrt(np.mean(error**2)) / np.sqrt(np.mean(truth**2))
        assert not conversion.exact
    assert errors[60] < 0.01, errors
    assert errors[60] < errors[10] / 3, errors
    dgp = conversion.dgp
    # the architecture: units 8 with B = I (the next units follow directly), then 6 units with the output Dense
    assert [layer.num_latent_gps for layer in dgp.f_layers] == [8, 1]
    assert type(dgp.f_layers[0].mean_function) is gpflow.mean_functions.Zero
    np.testing.assert_array_equal(dgp.f_layers[1].mean_function.c.numpy(), network.get_layer("out").bias.numpy())


def test_constant_mean_shifts_the_layer_mean_by_exactly_the_bias(rng):
    """The output Dense's bias c is the last GP layer's Constant mean: replacing it by Zero moves the predicted
    mean by exactly c (hand-set here) and leaves the variance alone."""
    network = sequential(relu_layers())
    randomise_biases(network, rng)
    c = np.array([1.2345])
    network.get_layer("out").bias.assign(c)
    layer = dgp_from_keras(network, 50).dgp.f_layers[1]
    H = rng.normal(size=(20, 8))
    mean, var = (t.numpy() for t in layer.predict(H, full_cov=False))
    layer.mean_function = gpflow.mean_functions.Zero()
    mean0, var0 = (t.numpy() for t in layer.predict(H, full_cov=False))
    np.testing.assert_allclose(mean - mean0, np.broadcast_to(c, mean.shape), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(var, var0)


def test_registered_callable_and_relu_layer_convert(rng):
    """A Keras activation that is a registered callable maps to itself; a positively homogeneous one (leaky ReLU)
    then matches up to the truncation alone, like ReLU (the same 1 % bound at Ñ = 60). The ReLU layer class is
    read as relu."""
    register_activation("leaky", leaky, breakpoints=(0.0,))
    layers = [L.Dense(8, activation=leaky, dtype="float64"), L.Dense(6, dtype="float64"), L.ReLU(dtype="float64"),
              L.Dense(1, dtype="float64")]
    network = sequential(layers)
    randomise_biases(network, rng)
    X = rng.normal(size=(100, 2))
    dgp = dgp_from_keras(network, 100, truncation_level=60).dgp
    names = [layer.inducing_variable.inducing_variable.activation.name for layer in dgp.f_layers]
    assert names == ["leaky", "relu"]
    truth = numpy_forward(layers, X)
    error = propagate_means(dgp, X)[-1].numpy() - truth
    assert np.sqrt(np.mean(error**2)) < 0.01 * np.sqrt(np.mean(truth**2))
    with pytest.raises(ValueError, match="plain ReLU"):
        dgp_from_keras(sequential([L.Dense(4), L.ReLU(max_value=6.0), L.Dense(1)]), 10)


# ------------------------------------------------------------------------------------------------ approximate maps


def _layer_errors(dgp, blocks, X):
    """(propagated, local) errors per GP layer, from the NumPy outputs of each block of Keras layers."""
    propagated, local, h_net, h_dgp = [], [], X, X
    for layer, block in zip(dgp.f_layers, blocks):
        target = numpy_forward(block, h_net)
        h_dgp = layer.predict(h_dgp, full_cov=False)[0].numpy()
        propagated.append(h_dgp - target)
        local.append(layer.predict(h_net, full_cov=False)[0].numpy() - target)
        h_net = target
    return propagated, local


@pytest.mark.parametrize("activation", ["softplus", "swish"])
def test_approximate_map_reports_the_per_layer_mismatch_it_has(activation, rng):
    """Softplus / swish units become the zonal Softplus / Swish (an approximation). The reported per-layer
    mismatch must equal the one computed here from NumPy outputs of the same Keras layers; refitting on X
    (B and c by ridge) must do better than the direct map without data."""
    layers = [
        L.Dense(8, activation, dtype="float64"), L.Dense(3, dtype="float64"),
        L.Dense(6, dtype="float64"), L.Activation(activation, dtype="float64"), L.Dense(1, dtype="float64"),
    ]
    network = sequential(layers)
    randomise_biases(network, rng)
    X = rng.normal(size=(200, 2))
    conversion = dgp_from_keras(network, 200, X=X)
    blocks = [layers[:2], layers[2:]]
    propagated, local = _layer_errors(conversion.dgp, blocks, X)
    assert [r.keras_layers for r in conversion.layers] == [[l.name for l in b] for b in blocks]
    for record, p, q in zip(conversion.layers, propagated, local):
        assert record.map == "approximate" and record.refitted and record.activation == activation
        np.testing.assert_allclose([record.max_abs, record.rms], [np.abs(p).max(), np.sqrt(np.mean(p**2))], rtol=1e-6)
        np.testing.assert_allclose([record.local_max_abs, record.local_rms], [np.abs(q).max(), np.sqrt(np.mean(q**2))], rtol=1e-6)
    final = propagate_means(conversion.dgp, X)[-1].numpy() - numpy_forward(layers, X)
    np.testing.assert_allclose(conversion.rms_mismatch, np.sqrt(np.mean(final**2)), rtol=1e-6)
    direct = dgp_from_keras(network, 200)
    direct_error = propagate_means(direct.dgp, X)[-1].numpy() - numpy_forward(layers, X)
    assert conversion.rms_mismatch < np.sqrt(np.mean(direct_error**2))
    scale = np.sqrt(np.mean(numpy_forward(layers, X) ** 2))
    assert conversion.rms_mismatch < 0.3 * scale, (conversion.rms_mismatch, scale)


def test_float32_network_converts_with_float64_weights(rng):
    """A float32 network (Keras' default) converts; its weights are cast, so the DGP computes in float64."""
    layers = relu_layers(dtype="float32")
    network = sequential(layers, dtype="float32")
    randomise_biases(network, rng)
    X = rng.normal(size=(60, 2))
    conversion = dgp_from_keras(network, 60, X=X, truncation_level=60)
    W = conversion.dgp.f_layers[0].inducing_variable.inducing_variable.W.numpy()
    assert W.dtype == np.float64
    np.testing.assert_array_equal(W[:, :2], network.get_layer("first").kernel.numpy().T.astype(np.float64))
    truth = numpy_forward(dense_layers(network), X)
    error = propagate_means(conversion.dgp, X)[-1].numpy() - truth
    assert np.sqrt(np.mean(error**2)) < 0.01 * np.sqrt(np.mean(truth**2))  # the truncation's, as in the float64 test


# ------------------------------------------------------------------------------------------------ twin: exact


def test_twin_with_biases_and_consecutive_activated_layers_stays_exact(rng):
    """ActivatedLayer twins convert exactly, also with a biased Dense (Constant mean) and an ActivatedLayer
    directly after another (B = I): mean propagation equals the Keras forward pass to 1e-8 in float64."""
    network = tf_keras.Sequential([
        tf_keras.Input((3,), dtype="float64"),
        ActivatedLayer(6, "relu", truncation_level=8, seed=1),
        L.Dense(2, dtype="float64"),
        ActivatedLayer(5, "softplus", truncation_level=6, seed=2),
        ActivatedLayer(4, "swish", truncation_level=5, seed=3),
        L.Dense(1, dtype="float64"),
    ])
    randomise_biases(network, rng)
    X = rng.normal(size=(40, 3))
    conversion = dgp_from_keras(network, 40, X=X)
    assert conversion.exact and [r.map for r in conversion.layers] == ["exact"] * 3
    np.testing.assert_allclose(propagate_means(conversion.dgp, X)[-1].numpy(), network(X).numpy(), rtol=0, atol=1e-8)
    plain_twin = build_activated_nn(3, num_layers=2, num_units=6, truncation_level=8, seed=0)
    result = dgp_from_keras(plain_twin, 40, X=X)
    np.testing.assert_allclose(propagate_means(result.dgp, X)[-1].numpy(), plain_twin(X).numpy(), rtol=0, atol=1e-8)
    assert result.max_abs_mismatch < 1e-8


# ------------------------------------------------------------------------------------------------ refusals


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: tf_keras.Sequential([tf_keras.Input((6, 6, 1)), L.Conv2D(2, 3, name="conv"), L.Flatten(), L.Dense(1)]),
         r"layer 0 'conv' \(Conv2D\)"),
        (lambda: sequential([L.Dense(4, "relu"), L.BatchNormalization(name="bn"), L.Dense(1)]), r"layer 1 'bn' \(BatchNormalization\)"),
        (lambda: sequential([L.Dense(4, "tanh", name="tanh_units"), L.Dense(1)]), r"layer 0 'tanh_units' \(Dense\).*'tanh'"),
        (lambda: sequential([L.Dense(4), L.Activation("elu", name="elu"), L.Dense(1)]), r"layer 1 'elu' \(Activation\).*'elu'"),
        (lambda: sequential([L.Dense(4, "relu"), L.Activation("relu", name="twice"), L.Dense(1)]), r"layer 1 'twice'.*follow a linear Dense"),
        (lambda: sequential([L.Dense(3, name="leading"), L.Dense(4, "relu"), L.Dense(1)]), r"layer 0 'leading'.*before the first activation"),
    ],
    ids=["conv2d", "batchnorm", "unknown_activation", "unknown_activation_layer", "activation_twice", "leading_linear"],
)
def test_unsupported_layers_are_named(make, message):
    with pytest.raises(ValueError, match=message) as error:
        dgp_from_keras(make(), 10)
    assert "dgp_from_keras converts" in str(error.value)  # and says what is supported


def test_non_chain_functional_graph_is_refused_by_layer():
    inputs = tf_keras.Input((2,))
    h = L.Dense(4, "relu")(inputs)
    skip = L.Add(name="residual")([h, L.Dense(4, "relu")(h)])
    network = tf_keras.Model(inputs, L.Dense(1)(skip))
    with pytest.raises(ValueError, match=r"'residual' \(Add\)|not a chain"):
        dgp_from_keras(network, 10)


# ------------------------------------------------------------------------------------------------ persistence


LOADER = """
import sys, json
import numpy as np
from activated_dgp import load_dgp
""" + inspect.getsource(layerwise) + """
X = np.load(sys.argv[2])
out = {}
for name in json.loads(sys.argv[3]):
    dgp = load_dgp(f"{sys.argv[1]}/{name}")
    out[name] = layerwise(dgp, X).tolist()
    out[name + "/types"] = [type(layer.mean_function).__name__ for layer in dgp.f_layers]
print(json.dumps(out))
"""


def test_mean_functions_save_and_load_in_a_fresh_process(tmp_path, rng, fresh_process):
    """Zero, Constant, Identity and Linear (and a converted biased MLP) come back with their values: the fresh
    process's layer-by-layer predictions equal the saving process's."""
    X = rng.normal(size=(15, 2))
    M = gpflow.mean_functions
    makers = {
        "zero": lambda: M.Zero(),
        "constant": lambda: M.Constant(rng.normal(size=2)),
        "identity": lambda: M.Identity(),
        "linear": lambda: M.Linear(A=rng.normal(size=(2, 2)), b=rng.normal(size=2)),
    }
    models = {}
    for name, make in makers.items():
        dgp = build_activated_dgp(2, 30, num_layers=2, num_units=5, layer_widths=[2], truncation_level=6, seed=4)
        dgp.f_layers[0].mean_function = make()
        dgp.f_layers[1].mean_function = M.Constant(np.array([0.7])) if name != "zero" else M.Zero()
        for parameter in dgp.trainable_parameters:  # away from the builders' values, so a dropped one shows
            parameter.unconstrained_variable.assign(parameter.unconstrained_variable + 0.2 * rng.normal(size=parameter.unconstrained_variable.shape))
        models[name] = dgp
    network = sequential(relu_layers())
    randomise_biases(network, rng)
    models["converted_mlp"] = dgp_from_keras(network, 30).dgp
    for name, dgp in models.items():
        save_dgp(dgp, tmp_path / name)
    names = list(models)
    np.save(tmp_path / "x.npy", X)
    loaded = json.loads(fresh_process.run(LOADER, tmp_path, tmp_path / "x.npy", json.dumps(names)).strip().splitlines()[-1])
    for name in names:
        np.testing.assert_allclose(loaded[name], layerwise(models[name], X), rtol=1e-12, atol=1e-14, err_msg=name)
        assert loaded[name + "/types"] == [type(layer.mean_function).__name__ for layer in models[name].f_layers]
    assert loaded["identity/types"][0] == "Identity" and loaded["linear/types"][0] == "Linear"
    # the mean functions matter: without them the predictions would differ
    assert not np.allclose(layerwise(models["linear"], X), layerwise(models["zero"], X))


def test_unsupported_mean_function_is_refused_at_save_time(tmp_path):
    dgp = build_activated_dgp(2, 30, num_layers=1, num_units=4, truncation_level=4, seed=0)
    dgp.f_layers[0].mean_function = gpflow.mean_functions.Additive(gpflow.mean_functions.Zero(), gpflow.mean_functions.Constant())
    with pytest.raises(ValueError, match=r"layer 0.*mean function .*only Zero, Constant, Identity, Linear"):
        save_dgp(dgp, tmp_path / "refused")


def test_load_refuses_a_tampered_mean_function_record(tmp_path, save_with_tampered_config):
    dgp = build_activated_dgp(2, 30, num_layers=1, num_units=4, truncation_level=4, seed=0)
    dgp.f_layers[0].mean_function = gpflow.mean_functions.Constant(np.array([0.5]))
    for index, tampered in enumerate(([{"type": "Polynomial"}], [{"type": "Constant"}], [])):
        directory = save_with_tampered_config(dgp, "dgp", tmp_path / str(index), lambda config: config.update(mean_functions=tampered))
        with pytest.raises(ValueError, match="the saved DGP's mean functions are corrupt"):
            load_dgp(directory)


def test_a_legacy_directory_without_mean_functions_loads_with_zero_means(tmp_path):
    """Directories written before mean functions were recorded (no ``mean_functions`` entry in config.json)
    load with Zero means: the format-2 fixture with the entry removed equals it with the entry."""
    import shutil

    from test_persistence import FORMAT_2

    shutil.copytree(FORMAT_2, tmp_path / "legacy")
    config = json.loads((tmp_path / "legacy" / "config.json").read_text())
    assert all(spec["type"] == "Zero" for spec in config["mean_functions"])
    del config["mean_functions"]
    (tmp_path / "legacy" / "config.json").write_text(json.dumps(config))
    with pytest.warns(DeprecationWarning, match="saved by activated_dgp 0.1"):
        without, with_entry = load_dgp(tmp_path / "legacy"), load_dgp(FORMAT_2)
    X = np.random.default_rng(0).normal(size=(7, without.f_layers[0].inducing_variable.inducing_variable.W.shape[1] - 1))
    assert [type(layer.mean_function).__name__ for layer in without.f_layers] == ["Zero"] * len(without.f_layers)
    np.testing.assert_array_equal(layerwise(without, X), layerwise(with_entry, X))


# ------------------------------------------------------------------------------------------------ the converted means' KL


@pytest.mark.parametrize("whiten", [True, False], ids=["whitened", "unwhitened"])
def test_mean_kl_is_the_part_of_gpflows_prior_kl_that_the_mean_carries(whiten, rng):
    """KL[N(μ, S) ‖ N(0, K)] = ½ μᵀK⁻¹μ + (terms in S alone), so GPflow's own prior KL of each converted layer,
    minus the same KL with q_μ set to zero, is the report's mean_kl (GPflow's gauss_kl is the independent truth)."""
    network = sequential(relu_layers())
    randomise_biases(network, rng)
    X = rng.normal(size=(40, 2))
    conversion = dgp_from_keras(network, 40, X=X, whiten=whiten, truncation_level=6)
    assert len(conversion.mean_kl) == len(conversion.dgp.f_layers)
    for layer, reported in zip(conversion.dgp.f_layers, conversion.mean_kl):
        full = float(layer.prior_kl())
        q_mu = layer.q_mu.numpy()
        layer.q_mu.assign(np.zeros_like(q_mu))
        without_mean = float(layer.prior_kl())
        layer.q_mu.assign(q_mu)
        assert reported > 0
        np.testing.assert_allclose(reported, full - without_mean, rtol=1e-6)


def test_a_wide_relu_layer_warns_that_its_means_kl_dwarfs_the_data(rng):
    """A ReLU unit's RKHS norm grows with the level multiplicities N_n^d (Dutordoir et al., 2021, Fig. 4), so in a
    40-unit second layer (d = 41) the converted means' KL keeps growing with Ñ, while a softplus unit's norm is
    bounded and its KL levels off. At Ñ = 20 the ReLU layer's KL is above one nat per data point and the
    conversion says so, naming the layer; below that threshold (Ñ = 2) it says nothing."""
    import warnings

    X = rng.normal(size=(100, 2))

    def network(activation):
        return sequential([L.Dense(40, activation), L.Dense(40, activation), L.Dense(1)])

    relu, smooth = network("relu"), network("softplus")
    with pytest.warns(UserWarning, match=r"GP layer 1, input dimension 41, relu units"):
        wide = dgp_from_keras(relu, 100, X=X, truncation_level=20)
    assert wide.mean_kl[1] > 100
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        wider = dgp_from_keras(relu, 100, X=X, truncation_level=40)
        smooth_kls = [dgp_from_keras(smooth, 100, X=X, truncation_level=level).mean_kl[1] for level in (20, 40)]
    assert wider.mean_kl[1] > 1e3 * wide.mean_kl[1]
    np.testing.assert_allclose(smooth_kls[1], smooth_kls[0], rtol=0.01)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        low = dgp_from_keras(relu, 100, X=X, truncation_level=2)
    assert sum(low.mean_kl) <= 100


# ------------------------------------------------------------------------------------------------ a mean Kuu cannot hold


def duplicated_unit_network():
    """[Dense(40, relu), Dense(40, relu), Dense(1)] whose second layer's units come in 20 identical pairs: its
    inducing features span 20 dimensions fewer than there are, and where Kuu's diagonal times float64's round-off
    exceeds the jitter ε (≈ 1e17 on the diagonal at Ñ = 20, d = 41) each of the 20 zero eigenvalues of Kuu + εI
    comes out of the Cholesky with a random sign, so the factorisation fails (20 coin flips, not one)."""
    network = sequential([L.Dense(40, "relu"), L.Dense(40, "relu"), L.Dense(1)])
    kernel = network.layers[1].kernel.numpy()
    kernel[:, 1::2] = kernel[:, 0::2]
    network.layers[1].kernel.assign(kernel)
    return network


def test_a_mean_kuu_cannot_hold_is_a_clear_error_naming_the_layer_and_the_parallel_units(rng):
    from activated_dgp.deep.posterior_mean import UnrepresentableMean

    with pytest.raises(UnrepresentableMean, match=r"GP layer 1 \(Keras layers \['dense_\d+', 'dense_\d+'\]\).*units are \d+ "
                       r"and \d+ \(\|cosine\| 1\.000000\)"):
        dgp_from_keras(duplicated_unit_network(), 50, X=rng.normal(size=(50, 2)), truncation_level=20)


def test_a_kernel_variance_the_mean_cannot_hold_leaves_the_layer_and_is_never_chosen(rng):
    """Kuu ∝ 1/v: at Ñ = 10 (Kuu's diagonal ≈ 6e6 at v = 1) the duplicated layer converts at v = 1, where ε
    dominates the round-off, but not at v = 1e-9. Rescaling there raises
    and leaves the layer as it was; the variance search records such a v with −inf, chooses a v it could solve,
    and keeps the mean propagation (the network's, measured by the NumPy forward pass written in this file)."""
    import warnings

    from activated_dgp.deep.posterior_mean import UnrepresentableMean
    from activated_dgp.training import rescale_kernel_variance, select_kernel_variances

    network = duplicated_unit_network()
    X = rng.normal(size=(60, 2))
    Y = numpy_forward(dense_layers(network), X) + 0.1 * rng.normal(size=(60, 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the KL warning
        conversion = dgp_from_keras(network, 60, X=X, truncation_level=10)
    dgp, layer = conversion.dgp, conversion.dgp.f_layers[1]
    before = propagate_means(dgp, X)[-1].numpy()
    q_mu = layer.q_mu.numpy()
    with pytest.raises(UnrepresentableMean, match=r"at kernel variance 1e-09 .* keeps v = 1"):
        rescale_kernel_variance(layer, 1e-9)
    assert float(layer.kernel.kernel.variance.numpy()) == 1.0
    np.testing.assert_array_equal(layer.q_mu.numpy(), q_mu)

    selection = select_kernel_variances(dgp, X, Y, objective="validation", candidates=[1.0, 1e-3, 1e-6, 1e-9])
    refused = [v for index, v, value in selection.evaluations if index == 1 and value == -np.inf]
    assert 1e-9 in refused
    assert selection.variances[1] not in refused
    after = propagate_means(dgp, X)[-1].numpy()
    truth = numpy_forward(dense_layers(network), X)
    np.testing.assert_allclose(after, before, rtol=1e-6, atol=1e-8 * np.abs(truth).max())
    assert np.sqrt(np.mean((after - truth) ** 2)) < 0.1 * np.sqrt(np.mean(truth**2))
