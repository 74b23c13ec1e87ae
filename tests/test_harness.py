"""The study harness: resume, protocol versioning, the generated-block writer, atomic artifacts, report purity."""

import argparse
import ast
import hashlib
import importlib
import json
from pathlib import Path
import re
import types

import numpy as np
import pytest

from benchmarks import _report
from experiments import uci
from experiments.harness import blocks, cli, registry
from experiments.harness.artifacts import ArtifactCache, ArtifactMissing, atomic_write
from experiments.harness.store import ResultStore
from experiments.harness.study import check_study, load_records, newest_protocol, run_study
from experiments.neuralef_mnist import NEURALEF, NYSTROM_KERNELS, markdown, upgrade as neuralef_upgrade


def toy_study(fail_after=None, protocol="p1", calls=None):
    """A study of squares: cell x -> record x²; its report writes the sum of the squares to the page."""
    study = types.ModuleType("toy")
    study.KEY = ("x",)
    study.PROTOCOL = protocol
    calls = [] if calls is None else calls

    def run_cell(cell, options, context):
        if fail_after is not None and len(calls) == fail_after:
            raise KeyboardInterrupt("interrupted")
        calls.append(cell["x"])
        return {"square": cell["x"] ** 2}

    def report(records, options):
        total = sum(r["square"] for r in records)
        Path(options.out, "page.md").write_text(f"sum {total} over {sorted(r['x'] for r in records)}\n")

    study.cells = lambda options: [{"x": x} for x in range(options.n)]
    study.run_cell, study.report, study.calls = run_cell, report, calls
    return study


def options(tmp_path, n=6, report_only=False):
    return argparse.Namespace(out=tmp_path, n=n, report_only=report_only, quiet=True, data_dir=None, artifacts=None)


def lines(tmp_path):
    return [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]


def test_an_interrupted_study_loses_no_finished_cell_and_duplicates_none(tmp_path):
    first = toy_study(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        run_study(first, options(tmp_path))
    assert first.calls == [0, 1, 2]
    assert [r["x"] for r in lines(tmp_path)] == [0, 1, 2]  # every finished cell was recorded before the failure

    second = toy_study()
    run_study(second, options(tmp_path))
    assert second.calls == [3, 4, 5]  # finished cells are not rerun
    recorded = lines(tmp_path)
    assert sorted(r["x"] for r in recorded) == list(range(6)) and len(recorded) == 6
    assert all(r["square"] == r["x"] ** 2 for r in recorded)
    assert (tmp_path / "page.md").read_text() == f"sum {sum(x * x for x in range(6))} over {list(range(6))}\n"

    third = toy_study()
    run_study(third, options(tmp_path))
    assert third.calls == [] and len(lines(tmp_path)) == 6


def test_a_torn_last_line_is_ignored_and_replaced(tmp_path):
    run_study(toy_study(), options(tmp_path, n=2))
    with open(tmp_path / "records.jsonl", "a") as handle:
        handle.write('{"x": 2, "squ')  # killed mid-write
    again = toy_study()
    run_study(again, options(tmp_path, n=3))
    assert again.calls == [2]
    assert [r["x"] for r in lines(tmp_path)] == [0, 1, 2]


def test_records_past_the_shard_size_continue_in_numbered_shards_read_in_order(tmp_path):
    """Each file stays within shard_bytes (one record never split), the records read back in the order appended
    across records.jsonl, records.2.jsonl, ..., and a torn last line of the last shard is dropped on the next append."""
    path = tmp_path / "records.jsonl"
    line = len(json.dumps({"pad": "p" * 20, "x": 0}, sort_keys=True)) + 1  # every record's line has this length
    store = ResultStore(path, ["x"], shard_bytes=3 * line + 1)  # three lines fit in a file
    for x in range(7):
        store.append({"x": x, "pad": "p" * 20})
    files = sorted(tmp_path.glob("records*.jsonl"))
    assert [f.name for f in files] == ["records.2.jsonl", "records.3.jsonl", "records.jsonl"]
    assert [path.stat().st_size, (tmp_path / "records.2.jsonl").stat().st_size, (tmp_path / "records.3.jsonl").stat().st_size] == [3 * line, 3 * line, line]
    with open(tmp_path / "records.3.jsonl", "a") as handle:
        handle.write('{"x": 9, "pa')  # killed mid-write
    assert [r["x"] for r in ResultStore(path, ["x"]).records()] == list(range(7))
    store.append({"x": 7, "pad": "p" * 20})
    assert (tmp_path / "records.3.jsonl").read_text().count("\n") == 2 and not (tmp_path / "records.4.jsonl").exists()
    with pytest.raises(ValueError, match="already exists"):
        store.append({"x": 4, "pad": ""})  # a key recorded in an earlier shard is done


def test_a_protocol_change_never_mixes_records(tmp_path):
    run_study(toy_study(protocol="p1"), options(tmp_path, n=3))
    changed = toy_study(protocol="p2")
    run_study(changed, options(tmp_path, n=2))
    assert changed.calls == [0, 1]  # p1 records do not count as done under p2
    assert (tmp_path / "page.md").read_text() == "sum 1 over [0, 1]\n"  # p2's report sees p2's records only
    by_protocol = {}
    for r in lines(tmp_path):
        by_protocol.setdefault(r["protocol"], []).append(r["x"])
    assert by_protocol == {"p1": [0, 1, 2], "p2": [0, 1]}  # the old records are kept, not overwritten
    store = ResultStore(tmp_path / "records.jsonl", ("x",), protocol="p1")
    assert [r["x"] for r in store.records()] == [0, 1, 2]
    with pytest.raises(ValueError, match="protocol"):
        store.append({"x": 9, "protocol": "p2"})


def test_a_protocol_may_depend_on_the_options(tmp_path):
    study = toy_study()
    study.PROTOCOL = lambda o: f"n{o.n}"
    run_study(study, options(tmp_path, n=2))
    assert {r["protocol"] for r in lines(tmp_path)} == {"n2"}


def test_report_is_a_pure_function_of_the_records(tmp_path):
    run_study(toy_study(), options(tmp_path, n=4))
    page = (tmp_path / "page.md").read_text()
    (tmp_path / "page.md").write_text("stale\n")
    refuser = toy_study(fail_after=0)  # would raise if any cell ran
    run_study(refuser, options(tmp_path, n=10, report_only=True))
    assert refuser.calls == [] and (tmp_path / "page.md").read_text() == page
    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "records.jsonl").write_text((tmp_path / "records.jsonl").read_text())
    run_study(toy_study(fail_after=0), options(copy, n=10, report_only=True))
    assert (copy / "page.md").read_text() == page  # same records, same page, wherever they are


def test_write_block_replaces_only_its_block(tmp_path):
    doc = tmp_path / "page.md"
    doc.write_text("intro\n\n" + blocks.render_block("a", "cmd a", "old a") + "\nmiddle\n"
                   + blocks.render_block("b", "cmd b", "old b") + "\nend\n")
    assert blocks.write_block(doc, "a", "new a\n", "cmd a")
    text = doc.read_text()
    assert text.startswith("intro\n\n<!-- BEGIN GENERATED a: cmd a -->\nnew a\n<!-- END GENERATED a -->\nmiddle\n")
    assert "old b" in text and text.endswith("end\n")
    assert not blocks.write_block(doc, "a", "new a", "cmd a")  # same content: file untouched
    assert blocks.read_block(doc, "a") == "new a\n"
    with pytest.raises(ValueError, match="no generated block 'c'"):
        blocks.write_block(doc, "c", "x", "cmd")
    with pytest.raises(ValueError, match="block name"):
        blocks.write_block(doc, "bad name", "x", "cmd")


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path):
    target = tmp_path / "net.weights.h5"
    target.write_text("old")

    def broken(temporary):
        assert temporary.name.endswith(".weights.h5")  # the extension writers look at is kept
        temporary.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        atomic_write(target, broken)
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["net.weights.h5"]


def test_artifact_cache_builds_once_and_can_refuse_to_build(tmp_path):
    built = []
    cache = ArtifactCache(tmp_path)

    def get(c):
        return c.get_or_build("net", {"split": 1}, ".txt", build=lambda: built.append(1) or "weights",
                              save=lambda a, p: p.write_text(a), load=lambda p: p.read_text())

    assert get(cache) == "weights" and get(ArtifactCache(tmp_path)) == "weights" and built == [1]
    with pytest.raises(ArtifactMissing):
        ArtifactCache(tmp_path / "empty", saved_only=True).get_or_build(
            "net", 1, ".txt", build=lambda: "x", save=None, load=None)


def test_in_memory_builds_once_per_key_and_keeps_only_the_current_groups_values():
    """A run's shared values: one build per (kind, key) whatever the key's dict order; a value of another kind or
    key is built apart; naming another group drops the grouped values of the old one (rebuilt when asked again)
    and keeps the ungrouped ones; nothing is written to the cache's folder."""
    builds = []
    cache = ArtifactCache(None)

    def get(kind, key, group=None):
        return cache.in_memory(kind, key, lambda: builds.append((kind, str(key))) or f"{kind}{len(builds)}", group=group)

    assert get("data", {"a": 1, "b": 2}) == "data1" and get("data", {"b": 2, "a": 1}) == "data1"
    assert get("data", {"a": 2, "b": 2}) == "data2" and get("net", {"a": 1, "b": 2}) == "net3"
    assert get("net", 0, group=0) == "net4" and get("net", 0, group=0) == "net4"
    assert get("net", 1, group=1) == "net5"  # seed 1 starts: seed 0's network is dropped
    assert get("net", 0, group=0) == "net6" and get("data", {"a": 1, "b": 2}) == "data1"  # ungrouped values stay
    assert len(builds) == 6


def test_load_records_reads_another_studys_records_through_its_key_and_upgrade(tmp_path, monkeypatch):
    """UCI's records read by another study. Versions: "a" changed in v5, "b" in v6 (current v6): a v5 record of "a"
    (its protocol a line, as written before UCI declared a Protocol) is carried to v6's protocol (a did not change
    since), one of "b" is not. Asking for v6's protocol gives exactly the carried "a" record, once (a repeated line
    and a torn last line are ignored); the records as made keep their lines; a folder without records gives [] and
    is not created."""
    from experiments.methods import versions

    monkeypatch.setattr(versions, "METHOD_VERSIONS", {"a": (2, 5), "b": (2, 6)})
    line = "h:nn1:dgp1:mc1:fixed-steps"
    lines = [json.dumps({"dataset": "yacht", "method": m, "split": 0, "protocol": f"{line}:v5"}) for m in ("a", "b", "a")]
    (tmp_path / "records.jsonl").write_text("\n".join(lines) + '\n{"dataset": "yac')
    current = versions.settings_protocol(versions.parse_label(f"{line}:v6")[0])
    made_under = versions.settings_protocol(versions.parse_label(f"{line}:v5")[0], 5)
    carried = load_records("uci", tmp_path, protocol=current)
    assert carried == [{"dataset": "yacht", "method": "a", "split": 0, "protocol": current.key, "carried_from": made_under.key,
                        "protocol_settings": {"shared": made_under.settings, "method": {"version": 5}}}]
    assert load_records("uci", tmp_path / "records.jsonl", protocol=current) == carried
    as_made = load_records("uci", tmp_path, upgrade=False)
    assert sorted((r["method"], r["protocol"]) for r in as_made) == [("a", f"{line}:v5"), ("b", f"{line}:v5")]
    assert load_records("uci", tmp_path / "nowhere") == [] and not (tmp_path / "nowhere").exists()
    with pytest.raises(ValueError, match="unknown study"):
        load_records("not_a_study", tmp_path)


def test_newest_protocol_is_the_last_records_as_its_study_reads_it(tmp_path):
    from experiments.rotated_mnist.config import protocol_of as rotated_mnist_protocol

    """The protocol of the file's last complete record after the owning study's upgrade: a rotated-MNIST record made
    before the harness (no protocol field) reads as made under Protocol("seed-group", its config), so it
    is newer than the seed-model record above it; load_records with it gives that record alone; no file gives None."""

    config = {"epochs": 1, "dataset": "mnist"}
    lines = [{"dataset": "mnist", "model": "nn", "seed": 0, "protocol": "seed-model/1:abc", "config": config},
             {"dataset": "mnist", "model": "nn", "seed": 0, "config": config}]
    (tmp_path / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"dataset": "mn')
    legacy = rotated_mnist_protocol(config, "study-fit", "seed-group").key
    assert newest_protocol("rotated_mnist", tmp_path) == newest_protocol("rotated_mnist", tmp_path / "records.jsonl") == legacy
    assert [r["protocol"] for r in load_records("rotated_mnist", tmp_path, protocol=legacy)] == [legacy]
    assert newest_protocol("rotated_mnist", tmp_path / "nowhere") is None and not (tmp_path / "nowhere").exists()


def test_a_study_reads_another_studys_labels_through_the_registry_only():
    """record_labels gives a registered study's LABELS (a copy), {} for a study without; no study module imports
    another study's modules (the harness and the shared methods aside)."""
    from experiments.harness.study import record_labels
    from experiments.rotated_mnist.config import LABELS

    labels = record_labels("rotated_mnist")
    assert labels == LABELS and labels is not LABELS
    root = Path(__file__).resolve().parents[1] / "experiments"
    studies = {path.stem if path.is_file() else path.name for path in root.iterdir()
               if (path.suffix == ".py" or (path / "__init__.py").exists()) and path.stem not in ("__init__", "__main__", "harness", "methods")}
    for path in root.rglob("*.py"):
        own = path.relative_to(root).parts[0].removesuffix(".py")
        others = {m.split(".")[1] for m in _imported_modules(path) if m.startswith("experiments.") and m.split(".")[1] in studies} - {own}
        assert not others, f"{path.relative_to(root)} imports the study modules {others}"


def _imported_modules(path: Path) -> set:
    tree = ast.parse(path.read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    return imported | {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}


def test_benchmarks_import_only_the_harness_of_experiments_and_experiments_no_benchmark():
    """No import cycle: a benchmark imports from experiments/ only experiments.harness (and its modules); no module
    of experiments/ imports benchmarks/ (the report finds the benchmarks through the harness registry's names)."""
    root = Path(__file__).resolve().parents[1]
    for path in root.glob("benchmarks/*.py"):
        outside = {m for m in _imported_modules(path) if m.split(".")[0] == "experiments"
                   and not (m == "experiments.harness" or m.startswith("experiments.harness."))}
        assert not outside, f"{path.name} imports {outside}"
        assert "sys.path.insert" not in path.read_text(), f"{path.name} patches sys.path"
    for path in root.glob("experiments/**/*.py"):
        benchmarks = {m for m in _imported_modules(path) if m.split(".")[0] == "benchmarks"}
        assert not benchmarks, f"{path.relative_to(root)} imports {benchmarks}"
    assert all(name.startswith("benchmarks.") and (root / (name.replace(".", "/") + ".py")).is_file()
               for name in registry.BENCHMARKS)


def test_every_registered_study_has_the_study_shape():
    for name in registry.STUDIES:
        check_study(registry.study(name))


def test_every_generated_block_is_rewritten_by_report():
    """``python -m experiments report`` rewrites every generated block under docs/: a block whose marker names a
    study lies on a page one of that study's report runs writes (cli.report_pages), and a benchmark's block is in
    the REPORT_BLOCKS of one benchmark of experiments.harness.registry.BENCHMARKS (a block whose record is not committed yet is
    left as it is by that benchmark's report_from_records).
    Nothing is run: the pages come from parsing each report run's arguments."""

    root = Path(__file__).resolve().parents[1]
    writers = {}  # page -> studies whose report runs write it
    for name in registry.STUDIES:
        for page in cli.report_pages(name, registry.study(name)):
            writers.setdefault(Path(page).as_posix(), set()).add(name)
    owned = [block for module in registry.BENCHMARKS for block in registry.benchmark(module).REPORT_BLOCKS]
    owned += [block for module in registry.DIAGNOSES for block in importlib.import_module(module).REPORT_BLOCKS]
    reported = set(owned)
    assert len(owned) == len(reported), "a block in the REPORT_BLOCKS of two benchmarks"
    unreported, seen = [], 0
    for path in sorted(root.glob("docs/**/*.md")):
        page = path.relative_to(root).as_posix()
        for block, command in re.findall(r"<!-- BEGIN GENERATED ([A-Za-z0-9_.\-]+): (.*?) -->", path.read_text()):
            seen += 1
            study = re.search(r"python -m experiments[ .](\w+)", command)
            if "python -m benchmarks." in command or any(f"python -m {module} " in command for module in registry.DIAGNOSES):
                covered = (page, block) in reported
            else:
                covered = study is not None and study.group(1) in writers.get(page, set())
            if not covered:
                unreported.append(f"{page}: {block} ({command})")
    assert seen > 20 and not unreported, unreported


@pytest.mark.parametrize("module, record", [("covariances", "OUTPUT"), ("dgp_epoch", "OUTPUT"), ("prediction", "OUTPUT"),
                                            ("streaming", "OUTPUT"), ("eigenpro", "SCALING_RECORD")])
def test_a_benchmark_block_without_its_record_is_left_as_it_is(tmp_path, monkeypatch, capsys, module, record):
    """Until a benchmark's record is committed, ``python -m experiments report`` (its report_from_records) leaves
    the block and its page untouched and prints one line naming the command that measures it."""

    pages = {page: page.read_bytes() for page in set(_report.SECTION_PAGES.values())}
    monkeypatch.setattr(importlib.import_module(f"benchmarks.{module}"), record, tmp_path / "missing.json")
    importlib.import_module(f"benchmarks.{module}").report_from_records()
    notice = [line for line in capsys.readouterr().out.splitlines() if "no record yet" in line]
    assert len(notice) == 1 and f"run python -m benchmarks.{module}" in notice[0]
    assert all(page.read_bytes() == text for page, text in pages.items())


def test_report_commands_name_the_committed_pages():
    """The marker of a page written by a report run names that run's report command (cli.report_command), and a
    run with other paths falls back to naming its own --out and --doc."""
    for extra in uci.REPORT_RUNS:
        options = cli.parse("uci", uci, ["--report-only", "--quiet", *extra])
        assert options.report_command == "python -m experiments uci --report-only " + " ".join(extra)
        page = Path(__file__).resolve().parents[1] / extra[extra.index("--doc") + 1]
        assert f"<!-- BEGIN GENERATED uci: {options.report_command} -->" in page.read_text()
    options = cli.parse("uci", uci, ["--out", "elsewhere/uci", "--doc", "elsewhere/page.md"])
    assert options.report_command == "python -m experiments uci --report-only --out elsewhere/uci --doc elsewhere/page.md"
    assert blocks.without_commands("<!-- BEGIN GENERATED a: x y -->\nz\n") == "<!-- BEGIN GENERATED a:  -->\nz\n"


def test_the_neuralef_table_has_a_row_per_budget_rung_and_shows_a_running_rung_as_missing():
    """experiments/neuralef_mnist.py tables every protocol (rung of the budget ladder) of its records: a rung whose
    NeuralEF cell has not finished shows "–" there, and the count of eigenvalues within 10 % is the one computed
    here from the record's numbers. The records are read as the study reads them: the rung's protocol string, in the
    older form, names the rung's settings."""
    poly, rbf = NYSTROM_KERNELS
    mu, reference = [1.0, 0.5, 0.3, 0.2], [1.0, 0.52, 0.4, 0.21]  # relative errors 0, 0.038, 0.25, 0.048
    done = [{"protocol": "v1:S200:steps1000:os5", "projection": poly, "accuracy": 80.0},
            {"protocol": "v1:S200:steps1000:os5", "projection": rbf, "accuracy": 79.0},
            {"protocol": "v1:S200:steps1000:os5", "projection": NEURALEF, "accuracy": 75.0, "eigenvalues": mu,
             "reference_eigenvalues": reference, "seconds": 10.0, "features_seconds": 5.0}]
    running = [{"protocol": "v1:S2000:steps10000:os5:cnn16-32-64", "projection": poly, "accuracy": 80.0}]
    lines = markdown([neuralef_upgrade(r) for r in done + running]).splitlines()
    finished = next(line for line in lines if line.startswith("| MLPs 784-128-128-1, S = 200, 1000 steps, 15 networks"))
    within = int(np.sum(np.abs(np.array(mu) - reference) / np.array(reference) <= 0.1))
    assert finished.split(" | ")[1:5] == ["75.00", "80.00", "79.00", str(within)] and within == 3
    cnn = next(line for line in lines if line.startswith("| CNNs 16/32/64, S = 2000, 10000 steps, 15 networks"))
    assert cnn.split(" | ")[1:4] == ["–", "80.00", "–"]
    assert not any(line.startswith("| eigh of the MC Gram (S = 2000)") for line in lines)
