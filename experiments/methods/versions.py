"""Each method's own version, and the :class:`~experiments.harness.protocol.Protocol` its records are made under.

A record of a method fitted under a :class:`~experiments.methods.protocol.Budget` depends on the budget's settings
(:func:`budget_settings`: its steps, MC samples and stopping rule, and the split protocol, ``"published"`` or
``"gap"``) and on the definition of its own method, named by the method's own version: the newest of the protocol
versions that changed it (:data:`METHOD_VERSIONS`). :func:`budget_protocol` is that protocol, the budget's settings
shared and every method's version its own settings, so the harness's one carry-over rule
(:meth:`experiments.harness.protocol.Protocol.carry`) keeps a record counting for as long as its method is unchanged:
a change to one method (a new version in its entry of :data:`METHOD_VERSIONS`) reruns that method's cells only.

The protocol versions are numbered on one scale, ``v2`` … :func:`current_version`: a record counts under every
version from the one it was made under up to the version before its method's next change
(:func:`counted_version`), which is how a report names it (:func:`protocol_label`,
``converged:nn10000:dgp3000:mc32:early-stopping(val 0.1, check 50, patience 500):v6``; ``gap:`` in front for the gap
splits). Records made before the methods declared a :class:`~experiments.harness.protocol.Protocol` carry that label
as their protocol string; :func:`relabel_record` names the protocol they were made under.
"""

from __future__ import annotations

import re
from typing import Dict, Mapping, Optional

from experiments.harness.protocol import SETTINGS_FIELD, Protocol, relabel
from experiments.methods.protocol import CHECK_STEPS, VALIDATION_FRACTION, Budget

#: The harness version of every method's protocol: what changes a method is a new version in its own entry below.
HARNESS_VERSION = "1"
#: The splits a budget's records are made on (:func:`activated_dgp.data.load_uci`'s ``splits``).
SPLIT_PROTOCOLS = ("published", "gap")
#: The stage-2 recipe candidates, the ADGP ensemble and the methods on a plain ReLU MLP first exist in v6.
RECIPE_METHODS = ("adgp_paper", "adgp_elbo", "adgp_floor")
ENSEMBLE_METHODS = ("adgp_ensemble",)
RELU_METHODS = ("relu", "relu_ts", "relu_tuned_ts", "relu_bare", "relu_adgp", "relu_adgp_kl")
#: the shifted-validation screen: the twin stopped, and ADGP's v and noise (or NN+TS's temperature) chosen, on a
#: covariate-shifted slab of the training split instead of a random part
SLAB_METHODS = ("adgp_slab", "nn_slab_ts")
#: the half-shifted validation screen: as SLAB_METHODS, on a part that is half a slab and half random rows
MIXED_METHODS = ("adgp_mixed", "nn_mixed_ts")
#: the methods of the shifted-validation screens, tabled apart from the study's methods
SHIFTED_VALIDATION_METHODS = SLAB_METHODS + MIXED_METHODS
_FIRST = 2  # v2: every method as first recorded (no record of an earlier version counts)
#: Each method's versions: the protocol versions that changed its definition (or, for a method added later, the one
#: that introduced it); ``"network"`` is stage-1 training, which keys the saved networks. Why each version changed
#: is told on docs/protocol_history.md: v3 and v4 ADGP's output layer (v and the noise chosen on the validation
#: part); v5 the classic DGP's initial noise; v6 the twin's zonal Swish (every twin-based network) and ADGP's
#: stage-2 ramp and far-field residual. Add the new version to a method's entry when its definition changes.
METHOD_VERSIONS: Dict[str, tuple] = {
    "network": (_FIRST, 6),
    "nn": (_FIRST, 6), "nn_ts": (_FIRST, 6), "dropout": (_FIRST, 6), "ensemble": (_FIRST, 6),
    "adgp": (_FIRST, 3, 4, 6), "plain_adgp": (_FIRST, 3, 4, 6),
    "dgp": (_FIRST, 5),
    "plain": (_FIRST,), "lla_last_layer": (_FIRST,), "lla_exact": (_FIRST,), "lla_neuralef": (_FIRST,),
    "lla_neuralef_evidence": (_FIRST,),
    "ensemble_nll": (_FIRST,), "relu_lla_kron": (_FIRST,), **{name: (_FIRST,) for name in SHIFTED_VALIDATION_METHODS},
    **{name: (6,) for name in RECIPE_METHODS + ENSEMBLE_METHODS + RELU_METHODS},
}
_LEGACY = re.compile(r"^(?P<gap>gap:)?(?P<budget>[^:]+):nn(?P<nn>\d+):dgp(?P<dgp>\d+):mc(?P<mc>\d+):"
                     r"(?:early-stopping\(val (?P<val>[0-9.]+), check (?P<check>\d+), patience (?P<patience>\d+)\)|fixed-steps)"
                     r":v(?P<version>\d+)$")


def current_version() -> int:
    """The newest protocol version: the newest in :data:`METHOD_VERSIONS`."""
    return max(max(versions) for versions in METHOD_VERSIONS.values())


def method_version(name: str, at: Optional[int] = None) -> Optional[int]:
    """The version of ``name``'s definition (a method or ``"network"``) under protocol version ``at`` (default
    :func:`current_version`): the newest of its :data:`METHOD_VERSIONS` up to ``at``; None before it existed."""
    if name not in METHOD_VERSIONS:
        raise ValueError(f"no version is declared for method {name!r}; add it to METHOD_VERSIONS")
    at = current_version() if at is None else at
    earlier = [version for version in METHOD_VERSIONS[name] if version <= at]
    return max(earlier) if earlier else None


def budget_settings(budget: Budget, splits: str = "published") -> Dict:
    """The settings every record of ``budget`` on ``splits`` depends on: the budget's name, steps and MC samples,
    and its stopping rule (a converged budget's validation fraction, check interval and patience; None for a fixed
    number of steps)."""
    if splits not in SPLIT_PROTOCOLS:
        raise ValueError(f"unknown splits {splits!r}; known: {', '.join(SPLIT_PROTOCOLS)}")
    stopping = ({"validation_fraction": VALIDATION_FRACTION, "check_steps": CHECK_STEPS,
                 "patience_steps": budget.patience_steps} if budget.converged else None)
    return {"budget": budget.name, "nn_steps": budget.nn_steps, "dgp_steps": budget.dgp_steps,
            "mc_samples": budget.mc_samples, "early_stopping": stopping, "splits": splits}


def settings_protocol(settings: Mapping, version: Optional[int] = None) -> Protocol:
    """The protocol of protocol version ``version`` (default :func:`current_version`) for ``settings``
    (:func:`budget_settings`): each method that existed then has its version of that time (:func:`method_version`)
    as its own settings."""
    versions = {name: method_version(name, version) for name in METHOD_VERSIONS if name != "network"}
    return Protocol(HARNESS_VERSION, dict(settings),
                    methods={name: {"version": v} for name, v in versions.items() if v is not None})


def budget_protocol(budget: Budget, splits: str = "published") -> Protocol:
    """The current protocol of ``budget``'s records on ``splits``: what the store stamps on a new record."""
    return settings_protocol(budget_settings(budget, splits))


def settings_label(settings: Mapping, version: int) -> str:
    """The settings and a protocol version as one line, ``[gap:]<budget>:nn<steps>:dgp<steps>:mc<samples>:<stopping>:v<version>``."""
    stopping = settings["early_stopping"]
    rule = ("fixed-steps" if stopping is None else
            f"early-stopping(val {stopping['validation_fraction']}, check {stopping['check_steps']}, patience {stopping['patience_steps']})")
    gap = "gap:" if settings["splits"] == "gap" else ""
    return f"{gap}{settings['budget']}:nn{settings['nn_steps']}:dgp{settings['dgp_steps']}:mc{settings['mc_samples']}:{rule}:v{version}"


def network_key(budget: Budget) -> str:
    """The stage-1 networks' protocol in their cache keys: the budget (published splits) and the version that last
    changed stage 1 (:data:`METHOD_VERSIONS` ``"network"``), so saved networks outlive versions that did not."""
    return settings_label(budget_settings(budget), method_version("network"))


def record_method_version(record: Mapping) -> Optional[int]:
    """The version of its method's definition that a stamped record was made with; None for an unstamped record."""
    method = (record.get(SETTINGS_FIELD) or {}).get("method")
    return method.get("version") if isinstance(method, Mapping) else None


def counted_version(record: Mapping) -> Optional[int]:
    """The newest protocol version a stamped record counts under: the version before its method's next change
    after the record's own version, or :func:`current_version` when there is none (the carry-over rule at every
    version); None for an unstamped record."""
    own = record_method_version(record)
    if own is None:
        return None
    later = [version for version in METHOD_VERSIONS.get(record.get("method"), ()) if version > own]
    return min(later) - 1 if later else current_version()


def record_settings(record: Mapping) -> Optional[Dict]:
    """A stamped record's shared settings (:func:`budget_settings`); None for an unstamped record."""
    return (record.get(SETTINGS_FIELD) or {}).get("shared")


def protocol_label(record: Mapping, version: Optional[int] = None) -> str:
    """How a report names a stamped record's protocol: :func:`settings_label` of its settings at ``version`` (default
    :func:`counted_version`)."""
    return settings_label(record_settings(record), counted_version(record) if version is None else version)


def parse_label(text) -> Optional[tuple]:
    """(settings, version) from a protocol line of :func:`settings_label`'s form; None for anything else."""
    match = _LEGACY.match(text) if isinstance(text, str) else None
    if match is None:
        return None
    stopping = None if match["val"] is None else {
        "validation_fraction": float(match["val"]), "check_steps": int(match["check"]), "patience_steps": int(match["patience"])}
    settings = {"budget": match["budget"], "nn_steps": int(match["nn"]), "dgp_steps": int(match["dgp"]),
                "mc_samples": int(match["mc"]), "early_stopping": stopping, "splits": "gap" if match["gap"] else "published"}
    return settings, int(match["version"])


def relabel_record(record: Mapping) -> Dict:
    """``record`` stamped with the protocol it was made under when it carries a protocol line
    (:func:`parse_label`) of a version up to :func:`current_version` in which its method existed, as records made
    before the methods declared a :class:`~experiments.harness.protocol.Protocol` do; unchanged otherwise (a record
    stamped already, or one no protocol of these methods made, which then never counts)."""
    parsed = parse_label(record.get("protocol"))
    made_under = None
    if parsed is not None and parsed[1] <= current_version() and str(record.get("method")) in METHOD_VERSIONS:
        settings, version = parsed
        if method_version(str(record.get("method")), version) is not None:
            made_under = settings_protocol(settings, version)
    return relabel(record, made_under)
