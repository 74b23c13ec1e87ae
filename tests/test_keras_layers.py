"""tf-keras' own saving of an activated DeepGP's Keras models (activated_dgp/layers.py).

``save_weights("….weights.h5")`` must carry every parameter, the nested GPflow ones included; whole-model saving
(.keras, SavedModel), which tf-keras cannot do for gpflux layers, must fail with a message that names the way out.
The round trip is checked in a fresh process against the values the saving process wrote down with numpy.
"""

import json
import textwrap

import numpy as np
import pytest


BUILD = textwrap.dedent(
    """
    import numpy as np, gpflow
    import activated_dgp as ad
    from activated_dgp.deep.far_field import add_far_field

    def build(seed):
        config = ad.deep.ArchitectureConfig(2, num_layers=2, num_units=6, activation="swish")
        dgp = ad.build_activated_dgp(config, num_data=40, seed=seed)
        add_far_field(dgp, far_variance=2.0, far_radius=3.0, far_centre=np.zeros(2))
        return dgp
    """
)




def test_weights_h5_of_the_training_model_restores_every_parameter_in_a_fresh_process(tmp_path, monkeypatch, fresh_process):
    monkeypatch.chdir(tmp_path)  # saved here, in the test's process; loaded in a fresh one
    exec(
        BUILD
        + textwrap.dedent(
            """
        import json
        dgp = build(seed=0)
        model = dgp.as_training_model()
        rng = np.random.default_rng(7)
        for v in model.weights:  # every variable off its initial value, the nested GPflow ones included
            v.assign(np.asarray(v.numpy()) + rng.uniform(0.1, 0.3, size=v.shape))
        model.save_weights("m.weights.h5")
        np.savez("truth.npz", *[v.numpy() for v in model.weights])
        json.dump([v.name for v in model.weights], open("names.json", "w"))
        """
        ),
        {},
    )
    names = json.loads((tmp_path / "names.json").read_text())
    assert any("softplus" in n for n in names) and any(n.startswith("Variable") for n in names)  # kernel params and W
    out = fresh_process.run(BUILD + textwrap.dedent(
        """
        dgp = build(seed=1)  # another seed: every value differs before loading
        model = dgp.as_training_model()
        truth = np.load("truth.npz")
        before = max(float(np.max(np.abs(v.numpy() - truth[f"arr_{i}"]))) for i, v in enumerate(model.weights))
        model.load_weights("m.weights.h5")
        after = max(float(np.max(np.abs(v.numpy() - truth[f"arr_{i}"]))) for i, v in enumerate(model.weights))
        print(len(model.weights), before, after)
        """
    ), cwd=tmp_path)
    count, before, after = out.split()
    assert int(count) == len(names) and float(before) > 0.05 and float(after) == 0.0


def test_weights_of_another_architecture_are_refused_naming_the_layer(tmp_path):
    import activated_dgp as ad

    small = ad.build_activated_dgp(ad.deep.ArchitectureConfig(2, num_layers=2, num_units=6), num_data=40, seed=0)
    small.as_training_model().save_weights(str(tmp_path / "m.weights.h5"))
    other = ad.build_activated_dgp(ad.deep.ArchitectureConfig(2, num_layers=2, num_units=6), num_data=40, seed=0)
    from activated_dgp.deep.far_field import add_far_field

    add_far_field(other, far_variance=1.0, far_radius=1.0, far_centre=np.zeros(2))  # three more variables
    with pytest.raises(ValueError, match="cannot load layer .*holds .* variables, the layer has"):
        other.as_training_model().load_weights(str(tmp_path / "m.weights.h5"))


@pytest.mark.parametrize("target", ["m.keras", "saved_model_dir"])
def test_whole_model_saving_gives_a_clear_error(tmp_path, target):
    import activated_dgp as ad

    dgp = ad.build_activated_dgp(ad.deep.ArchitectureConfig(2, num_layers=2, num_units=6), num_data=40, seed=0)
    for model in (dgp.as_training_model(), dgp.as_prediction_model()):
        with pytest.raises(Exception, match="cannot be saved whole") as raised:
            model.save(str(tmp_path / target))
        assert "save_dgp" in str(raised.value)
