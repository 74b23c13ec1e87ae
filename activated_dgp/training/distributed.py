"""Data-parallel ELBO training of a gpflux DeepGP under a ``tf.distribute.Strategy``.

With R replicas in sync and a global batch of G rows, replica r holds a local batch B_r of G/R rows
(:func:`activated_dgp.data.streaming.replica_batches`) and computes gpflux's per-replica loss; Keras scales
every replica's loss by 1/R before the gradients are summed across replicas (all-reduce):

    L_r = −(1/(G/R)) Σ_(i∈B_r) E_q[log p(y_i | f_i)] + (1/N) Σ_ℓ KL_ℓ,
    Σ_r L_r / R = −(1/G) Σ_(i∈B) E_q[log p(y_i | f_i)] + (1/N) Σ_ℓ KL_ℓ = L_B,

the single-device loss of the global batch B = ∪_r B_r, so −N·L_B is still an unbiased estimate of the
ELBO with the data term scaled by N/G and the KL counted once. This needs equal local batches: G must be
divisible by R, and an epoch has ⌊N/G⌋ full global batches (the remainder rows are reshuffled into the
next epoch). The variables (inducing directions, q(u), kernel and likelihood parameters) are mirrored:
every replica holds a copy and applies the same summed gradient.

GPflow and GPflux create their variables when a model is built, usually outside any strategy scope;
:func:`replicate` rebuilds an activated DGP from its architecture in the strategy's scope (mirrored
variables) with the same parameter values, and :func:`copy_values` writes the trained values back.
"""

from __future__ import annotations

import gpflow
import gpflux
import tensorflow as tf

from ..data.streaming import global_batches, replica_batches

__all__ = ["check_global_batch", "replicate", "copy_values", "distributed_dataset"]


def check_global_batch(batch_size: int, strategy: tf.distribute.Strategy) -> int:
    """The local (per-replica) batch G/R; a ValueError unless R divides the global batch G."""
    replicas = strategy.num_replicas_in_sync
    if batch_size % replicas:
        raise ValueError(
            f"the global batch size {batch_size} is not divisible by the strategy's {replicas} replicas; "
            f"use a multiple of {replicas} so that every replica gets an equal share"
        )
    return batch_size // replicas


def replicate(dgp: gpflux.models.DeepGP, strategy: tf.distribute.Strategy) -> gpflux.models.DeepGP:
    """An activated DGP of the same architecture built in ``strategy.scope()`` (mirrored variables)
    with the values of ``dgp``. (A deep copy will not do: Keras layers keep call wrappers bound to the
    original layer, so the copy would compute with the original's variables.)"""
    from ..deep.far_field import far_field_record
    from ..deep.introspection import architecture_of_dgp, mean_functions_of_dgp, rebuild_dgp

    with strategy.scope():
        replica = rebuild_dgp(architecture_of_dgp(dgp), int(dgp.num_data), mean_functions_of_dgp(dgp), far_field_record(dgp))
    flags = {path: (p.trainable, _parameters(replica)[path].trainable) for path, p in _parameters(dgp).items()}
    frozen = [path for path, (mine, built) in flags.items() if mine != built]
    if frozen:
        raise ValueError(f"parameters with a changed trainable flag cannot be mirrored yet: {frozen[:3]}")
    copy_values(dgp, replica)
    return replica


def _parameters(module) -> dict:
    return {k: v for k, v in gpflow.utilities.parameter_dict(module).items() if isinstance(v, gpflow.Parameter)}


def copy_values(source: tf.Module, target: tf.Module) -> None:
    """Assign every gpflow Parameter of ``target`` the value of the one at the same path in ``source``
    (training adds metric variables to the layers, so variables are matched by parameter path)."""
    sources, targets = _parameters(source), _parameters(target)
    if set(sources) != set(targets):
        raise ValueError(f"the models' parameters differ: {sorted(set(sources) ^ set(targets))}")
    for path, parameter in targets.items():
        parameter.unconstrained_variable.assign(sources[path].unconstrained_variable.read_value())


def distributed_dataset(source, batch_size: int, strategy: tf.distribute.Strategy, seed: int = 0) -> tf.distribute.DistributedDataset:
    """Per-replica batches of ``source`` (see :func:`activated_dgp.data.streaming.replica_batches`) as
    {"inputs", "targets"} dicts, one input pipeline per worker; full global batches only."""
    check_global_batch(batch_size, strategy)

    def dataset_fn(context: tf.distribute.InputContext) -> tf.data.Dataset:
        batches = global_batches(source, batch_size, seed=seed, drop_remainder=True)
        local = replica_batches(batches, batch_size, context.num_replicas_in_sync, context.input_pipeline_id, context.num_input_pipelines)
        return local.map(lambda x, y: {"inputs": x, "targets": y}).prefetch(2)

    options = tf.distribute.InputOptions(experimental_fetch_to_device=True)
    return strategy.distribute_datasets_from_function(dataset_fn, options)
