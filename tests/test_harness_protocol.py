"""The harness's one protocol mechanism: a Protocol's digest, the store's stamp, the carry-over rule, older strings."""

import argparse
import hashlib
import json
import types
from pathlib import Path

import pytest

from experiments.harness import cli, registry
from experiments.harness.protocol import Protocol, from_legacy, integers, relabel
from experiments.harness.store import ResultStore
from experiments.harness.study import run_study


def test_the_digest_is_the_sha256_of_the_sorted_json_whatever_the_order_of_the_settings():
    """Written out by hand: the compact JSON of {"settings": …, "version": …} with sorted keys, nested ones too."""
    canonical = '{"settings":{"a":1,"b":{"x":[2,3],"y":"z"}},"version":"2"}'
    expected = hashlib.sha256(canonical.encode()).hexdigest()[:12]
    one = Protocol("2", {"a": 1, "b": {"x": [2, 3], "y": "z"}})
    other = Protocol("2", {"b": {"y": "z", "x": [2, 3]}, "a": 1})
    assert one.digest == other.digest == expected and one.key == other.key == f"2:{expected}"
    assert Protocol("3", {"a": 1, "b": {"x": [2, 3], "y": "z"}}).digest != expected  # the version counts
    assert Protocol("2", {"a": 1.5, "b": {"x": [2, 3], "y": "z"}}).digest != expected  # and every setting
    with_methods = '{"methods":{"m":{"steps":5}},"settings":{},"version":"1"}'
    assert Protocol("1", {}, methods={"m": {"steps": 5}}).digest == hashlib.sha256(with_methods.encode()).hexdigest()[:12]


@pytest.mark.parametrize("version, settings, problem", [("", {}, "version"), ("v1:x", {}, "version"), (2, {}, "version"),
                                                        ("1", [1, 2], "dict"), ("1", {"f": object()}, "JSON")])
def test_a_bad_protocol_is_refused(version, settings, problem):
    with pytest.raises(ValueError, match=problem):
        Protocol(version, settings)


def method_study(protocol, calls):
    """Cells (method, split) -> record {"value": split}; the report is not looked at."""
    study = types.ModuleType("methods_toy")
    study.KEY, study.PROTOCOL = ("method", "split"), protocol
    study.cells = lambda options: [{"method": m, "split": s} for m in ("a", "b") for s in (0, 1)]
    study.run_cell = lambda cell, options, context: calls.append((cell["method"], cell["split"])) or {"value": cell["split"]}
    study.report = lambda records, options: None
    return study


def options(folder):
    return argparse.Namespace(out=folder, report_only=False, quiet=True, data_dir=None, artifacts=None)


def lines(folder):
    return [json.loads(line) for line in (Path(folder) / "records.jsonl").read_text().splitlines()]


def test_a_change_to_one_methods_settings_reruns_that_method_only_and_mixes_nothing_in(tmp_path):
    """Protocol 1 made every cell; protocol 2 changes method b's steps: a's records carry over (carried_from names
    the key they were made under), b's cells run again, b's old records stay in the file and out of the table. A new
    version carries nothing over, and a record of another version is not mixed in."""
    first = Protocol("1", {"n": 10}, methods={"a": {"steps": 5}, "b": {"steps": 5}})
    calls = []
    run_study(method_study(first, calls), options(tmp_path))
    assert calls == [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    made = lines(tmp_path)
    assert {r["protocol"] for r in made} == {first.key}
    assert [r["protocol_settings"] for r in made[:1]] == [{"shared": {"n": 10}, "method": {"steps": 5}}]

    second = Protocol("1", {"n": 10}, methods={"a": {"steps": 5}, "b": {"steps": 6}})
    calls.clear()
    records = run_study(method_study(second, calls), options(tmp_path))
    assert calls == [("b", 0), ("b", 1)]
    assert sorted((r["method"], r["split"], r.get("carried_from")) for r in records) == [
        ("a", 0, first.key), ("a", 1, first.key), ("b", 0, None), ("b", 1, None)]
    assert {r["protocol"] for r in records} == {second.key}
    assert len(lines(tmp_path)) == 6  # the file keeps b's first records, unchanged
    assert sum(r["protocol"] == first.key for r in lines(tmp_path)) == 4

    calls.clear()
    third = Protocol("2", {"n": 10}, methods={"a": {"steps": 5}, "b": {"steps": 6}})
    run_study(method_study(third, calls), options(tmp_path))
    assert len(calls) == 4  # a new version: nothing carried over
    assert [r["value"] for r in ResultStore(tmp_path / "records.jsonl", ("method", "split"), protocol=second).records()] == [0, 1, 0, 1]


def test_a_shared_setting_change_carries_nothing_and_the_store_refuses_another_protocols_record(tmp_path):
    path = tmp_path / "records.jsonl"
    old, new = Protocol("1", {"n": 10}), Protocol("1", {"n": 11})
    ResultStore(path, ("x",), protocol=old).append({"x": 0})
    store = ResultStore(path, ("x",), protocol=new)
    assert store.records() == [] and not store.done(x=0)
    with pytest.raises(ValueError, match="protocol"):
        store.append({"x": 1, "protocol": old.key})
    assert store.append({"x": 0})["protocol_settings"] == {"n": 11}
    assert [r["protocol"] for r in ResultStore(path, ("x",)).all_records()] == [old.key, new.key]


def test_an_older_protocol_string_names_the_protocol_it_was_made_under():
    """The banana study's string form: each field is the setting's prefix and value, in order."""
    fields = [("num_points", "n", int), ("learning_rate", "lr", float), ("ranks", "ranks", integers)]
    made = from_legacy("v2:n500:lr0.03:ranks8-16", fields)
    assert made == Protocol("2", {"num_points": 500, "learning_rate": 0.03, "ranks": [8, 16]})
    assert made.key == Protocol("2", {"ranks": [8, 16], "learning_rate": 0.03, "num_points": 500}).key
    for other in ("v2:n500:lr0.03", "2:n500:lr0.03:ranks8", "v2:n500:x0.03:ranks8", "v2:nfive:lr0.03:ranks8", None, 3):
        assert from_legacy(other, fields) is None
    record = {"x": 1, "protocol": "v2:n500:lr0.03:ranks8-16"}
    stamped = relabel(record, made)
    assert stamped["protocol"] == made.key and stamped["protocol_settings"] == made.settings and stamped["x"] == 1
    assert relabel(stamped, Protocol("9")) == stamped and relabel(record, None) == record


#: The studies without a Protocol: rotated MNIST's records follow a scheme of their own (configuration digests);
#: the recipe screen has no records (it reads UCI's and rotated MNIST's).
OLDER_SCHEMES = {"rotated_mnist", "recipes"}


def test_every_other_study_declares_a_protocol_for_each_of_its_report_runs():
    checked = 0
    for name in sorted(set(registry.STUDIES) - OLDER_SCHEMES):
        study = registry.study(name)
        for extra in cli.report_runs(study):
            options = cli.parse(name, study, ["--report-only", "--quiet", *extra])
            protocol = study.PROTOCOL(options) if callable(study.PROTOCOL) else study.PROTOCOL
            assert isinstance(protocol, Protocol), f"{name} {extra}: {protocol!r}"
            checked += 1
    assert checked >= len(registry.STUDIES) - len(OLDER_SCHEMES)
