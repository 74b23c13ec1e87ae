"""Save anything the library makes to a directory and load it in another process: one mechanism for all of it.

A saved directory is a ``tf.train.CheckpointManager`` directory: checkpoints ``ckpt-<n>.index`` /
``ckpt-<n>.data-…`` and the manager's ``checkpoint`` file naming the latest, the one pointer to a consistent
save. Each checkpoint holds, besides the object's variables (read back by ``tf.train.Checkpoint``, so a restored
model predicts bit-identically):

* ``header``: a JSON string with ``format`` (``activated_dgp/4``) and the object's *kind* and *config*, what
  rebuilds an empty object of the same structure (a DGP's :class:`~activated_dgp.deep.config.ArchitectureConfig`,
  a network's Keras JSON, an eigenfunction approximation's settings), with the kinds and configs of the saved
  objects it holds (a Laplace approximation's network, its eigenfunctions), and, when one was saved, the optimiser's
  Keras serialisation;
* ``state``: a JSON string (e.g. the epoch and the logs), for resuming;
* ``saved``: the object's own tracked state (its ``tf.Module`` or Keras model), arrays that do not live in a
  variable, and its children, each under its own node;
* optionally ``optimizer``: a tf-keras optimiser's variables (step count, slots).

Loading reads the header, rebuilds each object from its kind's config (children first), restores its variables
and checks that every one of them was in the checkpoint. A kind registers how it is described and rebuilt with
:func:`register_saved_kind`; the library registers ``dgp`` and ``network`` (:mod:`activated_dgp.deep.persistence`),
``kernel`` (:mod:`activated_dgp.eigen.saved_kernels`) and, in the modules of their classes, ``nystrom``, ``ika``,
``activation_basis``, ``neuralef``, ``linearised_laplace``, ``eigenpro2`` and ``eigenpro3``. Saving a directory
again writes a new checkpoint and then moves the pointer, so an interrupted save leaves the previous one readable
(``max_to_keep`` checkpoints are kept).

This is GPflow's recommended way of saving (``tf.train.Checkpoint``, through ``tf.train.CheckpointManager``), with
what GPflow leaves to the user (rebuilding the object before restoring) written into the checkpoint itself.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tf_keras

__all__ = [
    "FORMAT",
    "SavedKind",
    "Description",
    "register_saved_kind",
    "saved_kinds",
    "save",
    "load",
    "load_optimizer",
    "load_training_state",
    "saved_header",
    "is_saved_directory",
    "SaveEveryEpochs",
]

FORMAT = "activated_dgp/4"
CHECKPOINT_NAME = "ckpt"
_HEADER_KEY = "header/.ATTRIBUTES/VARIABLE_VALUE"
_STATE_KEY = "state/.ATTRIBUTES/VARIABLE_VALUE"


@dataclass
class Description:
    """What :func:`save` writes for one object.

    :param config: JSON-serialisable; what the kind's ``rebuild`` needs to build an empty object of the same structure.
    :param trackable: the object's own tracked state (a ``tf.Module`` or Keras model), restored by the checkpoint;
        None if it has none.
    :param arrays: state that lives in no variable (numpy arrays), handed to ``rebuild`` as numpy arrays.
    :param children: saveable objects it holds (saved as their own kinds, rebuilt before it and handed to ``rebuild``).
    """

    config: dict
    trackable: Any = None
    arrays: Dict[str, np.ndarray] = field(default_factory=dict)
    children: Dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SavedKind:
    """How one kind of object is saved.

    :param name: the kind's name in the header.
    :param matches: whether an object is of this kind.
    :param describe: ``object → Description``; raises ValueError, naming the part, for what could not be rebuilt.
    :param rebuild: ``(config, arrays, children) → (object, trackable)``: an object of the saved structure and the
        trackable to restore into (the same structure as the described one).
    :param training_variables: the variables, in order, that an optimiser training the object is built over
        (default: its ``trainable_variables``).
    """

    name: str
    matches: Callable[[Any], bool]
    describe: Callable[[Any], Description]
    rebuild: Callable[[dict, Dict[str, np.ndarray], Dict[str, Any]], Tuple[Any, Any]]
    training_variables: Optional[Callable[[Any], List[tf.Variable]]] = None


_KINDS: Dict[str, SavedKind] = {}


def register_saved_kind(kind: SavedKind) -> SavedKind:
    """Register ``kind`` (replacing one of the same name); the most recently registered matching kind is used."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", kind.name):
        raise ValueError(f"a saved kind's name is lowercase letters, digits and underscores, got {kind.name!r}")
    _KINDS.pop(kind.name, None)
    _KINDS[kind.name] = kind
    return kind


def saved_kinds() -> Tuple[str, ...]:
    """The registered kinds' names."""
    return tuple(_KINDS)


def _kind_of(obj) -> SavedKind:
    for kind in reversed(list(_KINDS.values())):
        if kind.matches(obj):
            return kind
    raise ValueError(
        f"cannot save an object of type {type(obj).__name__}: activated_dgp.save saves {', '.join(sorted(saved_kinds()))} "
        "(register another kind with activated_dgp.saving.register_saved_kind)"
    )


class _Node(tf.Module):
    """One saved object in the checkpoint: its tracked state, its arrays and its children."""

    def __init__(self, trackable=None, arrays: Sequence[tf.Variable] = (), children: Optional[Dict[str, "_Node"]] = None):
        super().__init__(name="saved")
        if trackable is not None:
            self.object = trackable
        self.arrays = list(arrays)
        self.children = dict(children or {})


def _json(value, what: str) -> str:
    def default(item):
        if isinstance(item, (np.generic, np.ndarray)):
            return item.tolist()
        raise TypeError(f"{type(item).__name__} is not JSON serialisable")

    try:
        return json.dumps(value, default=default, sort_keys=True)
    except (TypeError, ValueError) as error:
        raise ValueError(f"cannot save: the {what} is not JSON-serialisable ({error})") from None


def _describe(obj, path: str) -> Tuple[dict, _Node]:
    kind = _kind_of(obj)
    description = kind.describe(obj)
    for name in [*description.arrays, *description.children]:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"cannot save {path}: the name {name!r} is not an identifier")
    children, headers = {}, {}
    for name, child in description.children.items():
        headers[name], children[name] = _describe(child, f"{path}.{name}")
    arrays = {}
    for name, value in description.arrays.items():
        value = np.asarray(value)
        if value.dtype == object:
            raise ValueError(f"cannot save {path}: the array {name!r} has dtype object")
        arrays[name] = value
    header = dict(kind=kind.name, config=description.config, arrays=list(arrays), children=headers)
    node = _Node(description.trackable, [tf.Variable(value, trainable=False) for value in arrays.values()], children)
    return header, node


def _training_variables(obj) -> List[tf.Variable]:
    kind = _kind_of(obj)
    return list(kind.training_variables(obj) if kind.training_variables else obj.trainable_variables)


def _same_layout(probe, optimizer) -> bool:
    """Whether ``optimizer``'s variables match ``probe``'s in order, shape, dtype and name (up to the name scope
    that Keras adds when it builds an optimiser inside ``apply_gradients``, e.g. ``Adam/m/<variable>``)."""
    ours, theirs = list(probe.variables), list(optimizer.variables)
    return len(ours) == len(theirs) and all(
        a.shape == b.shape and a.dtype == b.dtype and (b.name == a.name or b.name.endswith("/" + a.name)) for a, b in zip(ours, theirs)
    )


def _optimizer_record(optimizer, obj) -> dict:
    """The optimiser's Keras serialisation, checked by building one of the same class over the object's training
    variables: it must have the same variables (a tf-keras optimiser keeps its slots in a list, in the order of the
    variables it was built over, so that order is what restoring relies on)."""
    if not isinstance(optimizer, tf_keras.optimizers.Optimizer):
        raise ValueError(
            f"cannot save the optimizer {type(optimizer).__name__}: only tf-keras optimizers (tf_keras.optimizers.Optimizer, "
            "not the legacy ones) are supported"
        )
    variables = _training_variables(obj)
    serialized = tf_keras.optimizers.serialize(optimizer)
    probe = tf_keras.optimizers.deserialize(serialized)
    probe.build(variables)
    if not _same_layout(probe, optimizer):
        raise ValueError(
            f"cannot save the optimizer: its {len(optimizer.variables)} variables are not those of a {type(optimizer).__name__} "
            f"built over the object's {len(variables)} training variables in order ({len(probe.variables)} variables): "
            "it has not taken a step yet, was built over other variables, or a trainable flag changed after it was built"
        )
    return dict(serialized=serialized, num_variables=len(variables))


def save(obj, directory, *, optimizer=None, state: Optional[dict] = None, max_to_keep: int = 1) -> Path:
    """Save ``obj`` (anything :func:`saved_kinds` lists) to ``directory`` as a new checkpoint, with optionally the
    tf-keras ``optimizer`` training it (restored by :func:`load_optimizer`) and a JSON ``state`` dict (returned by
    :func:`load_training_state`). Keeps the latest ``max_to_keep`` checkpoints. Returns the directory.

    Raises ValueError, naming the part, for anything that would not load back exactly."""
    if not isinstance(max_to_keep, int) or isinstance(max_to_keep, bool) or max_to_keep < 1:
        raise ValueError(f"max_to_keep must be a positive integer, got {max_to_keep!r}")
    header, node = _describe(obj, type(obj).__name__)
    header = dict(format=FORMAT, root=header, optimizer=None if optimizer is None else _optimizer_record(optimizer, obj))
    header_text, state_text = _json(header, "config"), _json(dict(state or {}), "state")
    items = dict(header=tf.Variable(header_text), state=tf.Variable(state_text), saved=node)
    if optimizer is not None:
        items["optimizer"] = optimizer
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manager = tf.train.CheckpointManager(tf.train.Checkpoint(**items), str(directory), max_to_keep=max_to_keep, checkpoint_name=CHECKPOINT_NAME)
    latest = manager.latest_checkpoint
    number = int(latest.rsplit("-", 1)[1]) + 1 if latest and re.search(r"-\d+$", latest) else 1
    manager.save(checkpoint_number=number)
    return directory


def is_saved_directory(directory) -> bool:
    """Whether ``directory`` holds a checkpoint written by :func:`save`."""
    return tf.train.latest_checkpoint(str(directory)) is not None


def _latest(directory) -> str:
    directory = Path(directory)
    path = tf.train.latest_checkpoint(str(directory))
    if path is None:
        if not directory.is_dir():
            raise ValueError(f"{directory} does not exist")
        raise ValueError(
            f"{directory} holds no checkpoint written by activated_dgp.save (no 'checkpoint' file, or the checkpoint it "
            "names has lost its files)"
        )
    return path


def _read_string(path: str, key: str, what: str) -> dict:
    try:
        value = tf.train.load_checkpoint(path).get_tensor(key)
        return json.loads(value.decode() if isinstance(value, bytes) else value)
    except Exception as error:  # NotFoundError, DataLossError, ValueError: a checkpoint that is not ours or is damaged
        raise ValueError(f"{path} is not a readable activated_dgp checkpoint: its {what}: {_first_line(error)}") from None


def saved_header(directory) -> dict:
    """The header of the latest checkpoint in ``directory``: ``format``, ``root`` (kind, config, arrays, children)
    and ``optimizer``."""
    path = _latest(directory)
    header = _read_string(path, _HEADER_KEY, "header")
    found = header.get("format") if isinstance(header, dict) else None
    if found != FORMAT:
        raise ValueError(
            f"{directory} holds a save in format {found!r}, which this version of activated_dgp does not read "
            f"(it reads {FORMAT}; a later format needs a later activated_dgp)"
        )
    return header


def _key(parts: Sequence[str]) -> str:
    return "/".join(parts) + "/.ATTRIBUTES/VARIABLE_VALUE"


def _rebuild(path: str, header: dict, parts: List[str], where: str, expected_kind: Optional[str] = None):
    """Rebuild the object of ``header`` (children first) and restore its own state from the checkpoint ``path``."""
    try:
        kind_name, config, array_names, child_headers = header["kind"], header["config"], header["arrays"], header["children"]
    except (KeyError, TypeError) as error:
        raise ValueError(f"{where}: the checkpoint's header is corrupt ({error!r} missing)") from None
    if expected_kind is not None and kind_name != expected_kind:
        raise ValueError(f"{where} holds a saved {kind_name!r}, not a saved {expected_kind}")
    if kind_name not in _KINDS:
        raise ValueError(f"{where} holds a saved {kind_name!r}, a kind this version of activated_dgp does not know ({', '.join(sorted(saved_kinds()))})")
    children = {name: _rebuild(path, child, parts + ["children", name], f"{where}.{name}")[0] for name, child in child_headers.items()}
    reader = tf.train.load_checkpoint(path)
    arrays = {}
    for index, name in enumerate(array_names):
        try:
            arrays[name] = reader.get_tensor(_key(parts + ["arrays", str(index)]))
        except Exception:
            raise ValueError(f"{where}: the checkpoint has no array {name!r}") from None
        if arrays[name].dtype.kind == "f" and not np.all(np.isfinite(arrays[name])):
            raise ValueError(f"{where}: the array {name!r} contains NaN or inf")
    try:
        obj, trackable = _KINDS[kind_name].rebuild(config, arrays, children)
    except (KeyError, TypeError) as error:
        raise ValueError(f"{where}: the saved {kind_name}'s config is corrupt ({type(error).__name__}: {error})") from None
    if trackable is not None:
        node = _Node(trackable)
        for name in reversed(parts[1:]):
            node = _Node(children={name: node}) if name != "children" else node
        try:
            status = tf.train.Checkpoint(saved=node).read(path)
            status.expect_partial()
            status.assert_existing_objects_matched()
        except AssertionError as error:  # a variable of the rebuilt object that the checkpoint lacks
            raise ValueError(f"{where}: the checkpoint does not hold every variable of the rebuilt {kind_name} ({_first_line(error)})") from None
        except (tf.errors.OpError, ValueError, IndexError) as error:  # a damaged file
            raise ValueError(f"{where}: the checkpoint {path} is damaged ({_first_line(error)})") from None
        _check_finite(trackable, where)
    return obj, trackable


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _check_finite(trackable, where: str) -> None:
    variables = getattr(trackable, "variables", None) or []
    bad = [v.name for v in variables if v.dtype.is_floating and not np.all(np.isfinite(v.numpy()))]
    if bad:
        raise ValueError(f"{where}: restored NaN or inf into {bad[:3]}")


def load(directory, *, kind: Optional[str] = None):
    """The object saved in ``directory`` by :func:`save` (its latest checkpoint), rebuilt and restored. With ``kind``,
    a ValueError unless it is of that kind."""
    path = _latest(directory)
    header = saved_header(directory)
    return _rebuild(path, header.get("root"), ["saved"], str(directory), kind)[0]


def load_training_state(directory) -> dict:
    """The ``state`` dict saved with :func:`save` (empty if none)."""
    return dict(_read_string(_latest(directory), _STATE_KEY, "state") or {})


def load_optimizer(directory, obj):
    """The optimiser saved with ``save(…, optimizer=…)``, built over ``obj``'s training variables (``obj`` from
    :func:`load`) with its state (step count, learning rate, slots) restored; None if none was saved. Compile the
    training model with it, e.g. ``dgp.as_training_model().compile(optimizer)``: the resumed fit continues the
    interrupted one's trajectory."""
    path = _latest(directory)
    record = saved_header(directory).get("optimizer")
    if record is None:
        return None
    try:
        optimizer = tf_keras.optimizers.deserialize(record["serialized"])
        expected = int(record["num_variables"])
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{directory} holds a corrupt optimizer record: {error}") from None
    variables = _training_variables(obj)
    if len(variables) != expected:
        raise ValueError(f"{directory}: the optimiser was built over {expected} variables, this object trains {len(variables)}")
    with tf.name_scope(optimizer.name):  # as Keras' apply_gradients builds it: slots named e.g. Adam/m/<variable>
        optimizer.build(variables)
    try:
        status = tf.train.Checkpoint(optimizer=optimizer).read(path)
        status.expect_partial()
        status.assert_existing_objects_matched()
    except (AssertionError, tf.errors.OpError, ValueError, IndexError) as error:  # unmatched, or a damaged file
        raise ValueError(f"{directory}: the optimizer's checkpoint does not restore into a {type(optimizer).__name__} built over this object: {_first_line(error)}") from None
    _check_finite(optimizer, f"{directory}: the optimizer")
    return optimizer


class SaveEveryEpochs(tf_keras.callbacks.Callback):
    """Save ``obj`` (e.g. the DGP a training model trains), the fit's optimiser and ``{"epoch": e, "logs": …}`` to
    ``directory`` every ``every`` epochs, keeping ``max_to_keep`` checkpoints. Resume, in any process, with
    ``obj = load(directory)``, ``load_optimizer(directory, obj)`` and
    ``fit(…, initial_epoch=load_training_state(directory)["epoch"])``.

    Unlike Keras' ``BackupAndRestore``, the checkpoint carries the config that rebuilds the object, so the resuming
    process needs no code that built it, and it is kept when the fit ends."""

    def __init__(self, directory, obj, every: int = 1, max_to_keep: int = 1):
        super().__init__()
        if not isinstance(every, int) or isinstance(every, bool) or every < 1:
            raise ValueError(f"every must be a positive integer, got {every!r}")
        self.directory, self.obj, self.every, self.max_to_keep = Path(directory), obj, every, max_to_keep

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every == 0:
            logs = {key: float(value) for key, value in (logs or {}).items()}
            save(self.obj, self.directory, optimizer=self.model.optimizer, state=dict(epoch=epoch + 1, logs=logs), max_to_keep=self.max_to_keep)
