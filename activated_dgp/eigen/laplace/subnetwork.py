"""The parameters a linearised Laplace posterior covers: the last Dense layer's kernel and bias
(``method="last_layer"``; Kristiadi et al. 2020, Daxberger et al. 2021) or a subnetwork's trainable variables
(``variables=``), the other weights fixed at θ_MAP."""

from __future__ import annotations

import tf_keras

def _last_dense_variables(model) -> list:
    """The kernel and bias of the model's last tf-keras Dense layer (searched through nested models)."""

    def dense_layers(layer):
        for inner in getattr(layer, "layers", []):
            yield from dense_layers(inner)
        if isinstance(layer, tf_keras.layers.Dense):
            yield layer

    layers = list(dense_layers(model))
    if not layers:
        raise ValueError("method='last_layer' needs a tf-keras Dense layer in the model; none was found")
    return list(layers[-1].trainable_variables)


def _variable_indices(model, variables, method: str) -> list:
    """The positions of ``variables`` in ``model.trainable_variables`` (a subnetwork), checked."""
    if method not in ("exact", "diagonal", "kron", "lowrank"):
        raise ValueError(f"variables= (a subnetwork) is for methods exact, diagonal, kron and lowrank, not {method!r}")
    position = {v.ref(): i for i, v in enumerate(model.trainable_variables)}
    variables = list(variables)
    if not variables:
        raise ValueError("variables= must name at least one of the model's trainable variables")
    indices = []
    for v in variables:
        if not hasattr(v, "ref") or v.ref() not in position:
            raise ValueError(f"variables= must hold the model's trainable variables; {getattr(v, 'name', v)!r} is not one of them")
        indices.append(position[v.ref()])
    if len(set(indices)) != len(indices):
        raise ValueError("variables= names a variable twice")
    return sorted(indices)
