"""The EigenPro MNIST study's records: those made before it declared its protocol count under the protocol their own
fields name, and its table shows the records of every protocol (nothing is trained here)."""

import json

from experiments import eigenpro_mnist as study
from experiments.harness import blocks, cli
from experiments.harness.store import pending
from experiments.harness.study import open_store

SCORES = {"n": 5000, "ep3_accuracy": [80.0, 85.0], "ep3_seconds": [1.0, 3.0], "peak_rss_mb": 100.0}


def _options(out, *argv):
    return cli.parse("eigenpro_mnist", study, ["--out", str(out), "--page", str(out / "page.md"), "--quiet", *argv])


def test_older_records_count_under_the_protocol_of_their_own_fields(tmp_path):
    """Written before the fields existed (the old update S P S, the last iterate, one projection epoch), with only
    the averaging, and with every field of the consistent update S P Sᵀ: only the last is done under the default
    options; none under --average-after 1 (the averaged record used the old update); the table shows all three;
    a new record is stamped with the consistent update's version and its two settings."""
    out = tmp_path / "eigenpro_mnist"
    out.mkdir()
    lines = [{"p": 100, "centers": "random", **SCORES},
             {"p": 100, "centers": "kmeans", "average_after": 1, **SCORES},
             {"p": 1000, "centers": "random", "average_after": None, "update": "S P S^T", "projection_epochs": 1, **SCORES}]
    (out / "records.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    options = _options(out)
    store = open_store(study, options)
    todo = {(cell["p"], cell["centers"]) for cell in pending(store, study.cells(options))}
    assert todo == set(study.CELLS) - {(1000, "random")}
    averaged = _options(out, "--average-after", "1")
    assert {(c["p"], c["centers"]) for c in pending(open_store(study, averaged), study.cells(averaged))} == set(study.CELLS)
    study.report(store.records(), options)
    rows = [row for row in blocks.read_block(out / "page.md", "eigenpro_mnist").splitlines() if row.startswith("| 1")]
    assert [row.split(" | ")[1:4] for row in rows] == [["kmeans", "S P S (1)", "mean after epoch 1"],
                                                        ["random", "S P S (1)", "last"], ["random", "S P S^T (1)", "last"]]
    stamped = store.append({"p": 5000, "centers": "random", "average_after": None, "update": "S P S^T",
                            "projection_epochs": 1, **SCORES})
    assert stamped["protocol"].startswith("2:") and stamped["protocol_settings"] == {"average_after": None, "projection_epochs": 1}
