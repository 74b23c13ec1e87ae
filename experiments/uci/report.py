"""The UCI study's report: from the records alone, ``<out>/table.md``, ``<out>/summary.csv``, ``<out>/uci.png``
(Fig. 7) and the generated blocks of its pages; :data:`REPORT_RUNS` are the committed pages
``python -m experiments report`` rewrites."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Dict, Optional, Sequence

import matplotlib
import matplotlib.pyplot as plt

from experiments.harness.artifacts import atomic_write_text
from experiments.harness.blocks import write_block
from experiments.harness.store import ResultStore
from experiments.harness.study import page_path, records_path
from experiments.methods import LABELS
from experiments.uci.cells import (CALIBRATION_METRICS, GAP_OUT, KEY, METHOD_ORDER, METRICS, record_kind, splits_kind,
                                   upgrade)
from experiments.uci.gap import PUBLISHED_GAP_HEADING, gap_markdown, no_gap_records_markdown
from experiments.uci.sections import (dgp_start_noise_markdown, far_field_markdown, method_columns, metric_table,
                                      nlpd_gap_markdown, protocol_lines, published_dropout_markdown, seconds_table,
                                      stage2_effect_markdown, steps_used)
from experiments.uci.summary import select_records, summarise, view
from experiments.uci.verdicts import claims

BLOCK_COMMAND = "python -m experiments uci --report-only"  # the marker's command when no report run names the page
#: The committed pages, one report run each (``python -m experiments report``): the long run's page, and the
#: patience-500 run's records each under its method's own version (``--as-recorded``).
REPORT_RUNS = [  # v5's first: the last run's table.md, summary.csv and uci.png are the newest records'
    ["--only-version", "v5", "--out", "docs/results/uci_long", "--doc", "docs/results/uci_long.md"],
    ["--out", "docs/results/uci_long", "--doc", "docs/results/uci_tables.md", "--part", "tables"],
    ["--out", "docs/results/uci_long", "--doc", "docs/results/uci_analysis.md", "--part", "analysis"],
    ["--as-recorded", "--out", "docs/results/uci", "--doc", "docs/results/uci_patience500_tables.md"],
    ["--splits-kind", "gap", "--out", GAP_OUT.as_posix(), "--doc", f"{GAP_OUT.as_posix()}.md", "--part", "tables"],
    ["--splits-kind", "gap", "--out", GAP_OUT.as_posix(), "--doc", f"{GAP_OUT.as_posix()}_published.md", "--part", "analysis"],
]


#: where a page's block splits the report (``--part``): the metric tables before it, the analysis from it on; the gap
#: report splits at its published columns
CLAIMS_HEADING = "**The paper's claims on these records**"
PART_HEADINGS = (CLAIMS_HEADING, PUBLISHED_GAP_HEADING)


def page_part(text: str, part: str) -> str:
    """``text``, the whole report (:func:`markdown`), or its ``part``: "tables" (the metric, calibration and time
    tables) or "analysis" (the claims and every section after them; of the gap report, its published columns and the
    comparison with them), so that one run's report fills two pages."""
    if part == "all":
        return text
    if part not in ("tables", "analysis"):
        raise ValueError(f"unknown --part {part!r}; known: all, tables, analysis")
    tables, heading, analysis = text.partition(next((h for h in PART_HEADINGS if h in text), CLAIMS_HEADING))
    if part == "tables":
        return tables.rstrip() + "\n"
    return heading + analysis if heading else "No claims yet: no method has records on the splits another shares.\n"


def markdown(rows: Sequence[Dict], records: Sequence[Dict]) -> str:
    methods = [m for m in METHOD_ORDER if any(r["method"] == m for r in rows)]
    datasets = []
    for r in rows:
        if r["dataset"] not in datasets:
            datasets.append(r["dataset"])
    table = {(r["dataset"], r["method"]): r for r in rows}
    out = []
    for metric, title in (
        ("rmse", "RMSE (standardised targets)"),
        ("nlpd", "NLPD (standardised targets)"),
        ("rmse_original", "RMSE (original units)"),
        ("nlpd_original", "NLPD (original units)"),
    ):
        out += metric_table(table, datasets, methods, metric, title)
    if any(r["coverage_90_splits"] for r in rows):
        out += ["**Calibration**: coverage of the central 90 % predictive interval (0.90 when calibrated) / mean absolute "
                "gap of the PIT's CDF from uniform (`activated_dgp.metrics.regression_calibration`); mean over the splits "
                "whose records have them (their number in brackets; recorded since 2026-11-23)", ""]
        def calibration(d, m):
            row = table.get((d, m))
            return (f"{row['coverage_90_mean']:.3f} / {row['calibration_error_mean']:.3f} ({row['coverage_90_splits']})"
                    if row is not None and row["coverage_90_splits"] else "—")

        out += method_columns(datasets, methods, calibration)
    out += seconds_table(table, datasets, methods)
    lines = claims(records)
    if lines:
        out += [f"{CLAIMS_HEADING} (means over the splits both methods share)", ""] + lines + [""]
    out += nlpd_gap_markdown(records)
    out += stage2_effect_markdown(records)
    out += far_field_markdown(records)
    out += published_dropout_markdown(records)
    steps = steps_used(records)
    if steps:
        out += ["**Steps used** (mean over splits of the steps run and, in brackets, of the best step restored by early "
                "stopping or the stage-2 guard; network / ELBO)", ""]
        out += method_columns(datasets, methods, lambda d, m: steps.get((d, m), "—"))
    out += protocol_lines(records)
    return "\n".join(out) + "\n"


def write_csv(rows: Sequence[Dict], path: Path) -> None:
    fields = ["dataset", "method", "splits", "num_data", "input_dim"] + [f"{m}_{s}" for m in METRICS for s in ("mean", "se")]
    fields += ["rmse_q25", "rmse_median", "rmse_q75", "nlpd_q25", "nlpd_median", "nlpd_q75", "seconds_mean"]
    fields += [f"{m}_{s}" for m in CALIBRATION_METRICS for s in ("mean", "splits")]
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def figure(rows: Sequence[Dict], path: Path) -> None:
    """Fig. 7: per dataset, RMSE (top) and NLPD (bottom) per method — median with 25/75 % quantile bars."""
    matplotlib.use("Agg")

    datasets = []
    for r in rows:
        if r["dataset"] not in datasets:
            datasets.append(r["dataset"])
    methods = [m for m in METHOD_ORDER if any(r["method"] == m for r in rows)]
    table = {(r["dataset"], r["method"]): r for r in rows}
    palette = ("C0", "C1", "C2", "C4", "C5", "C3", "C7", "C6", "C8", "C9", "olive", "maroon", "teal", "navy", "orchid", "sienna")
    colours = {m: palette[i % len(palette)] for i, m in enumerate(METHOD_ORDER)}  # one per method, however many there are
    fig, axes = plt.subplots(2, len(datasets), figsize=(2.3 * len(datasets) + 1.5, 5.2), squeeze=False)
    for column, d in enumerate(datasets):
        for row_index, metric in enumerate(("rmse", "nlpd")):
            ax = axes[row_index, column]
            for position, m in enumerate(methods):
                r = table.get((d, m))
                if r is None:
                    continue
                median = r[f"{metric}_median"]
                ax.errorbar(
                    median, position,
                    xerr=[[median - r[f"{metric}_q25"]], [r[f"{metric}_q75"] - median]],
                    fmt="o", color=colours[m], capsize=3, markersize=4,
                )
            ax.set_yticks(range(len(methods)))
            ax.set_yticklabels([LABELS[m] for m in methods] if column == 0 else [])
            ax.set_ylim(-0.7, len(methods) - 0.3)
            ax.invert_yaxis()
            ax.tick_params(axis="x", labelsize=7)
            ax.grid(axis="x", alpha=0.3)
            if row_index == 0:
                first = next(table[(d, m)] for m in methods if (d, m) in table)
                ax.set_title(f"{d}\n({first['num_data']}, {first['input_dim']})", fontsize=8)
            if column == 0:
                ax.set_ylabel(metric.upper())
    fig.suptitle("UCI regression: median and 25/75 % quantiles over splits (standardised targets; lower is better)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(out: Path, records: Sequence[Dict], doc: Optional[str] = None, command: str = BLOCK_COMMAND,
                 render=markdown, part: str = "all") -> str:
    """Table, CSV and figure from ``records`` (one budget, :func:`select_records`), so that records of other
    settings never mix into a table; ``doc``: also the page's generated block, the report's ``part``
    (:func:`page_part`). ``render(rows, records)``: the block's Markdown (:func:`markdown`; the gap page's
    :func:`gap_markdown`)."""
    rows = summarise(records)
    text = render(rows, records)
    atomic_write_text(Path(out) / "table.md", text)
    write_csv(rows, Path(out) / "summary.csv")
    figure(rows, Path(out) / "uci.png")
    if doc:
        write_block(doc, "uci", page_part(text, part), command, create=True)
    return text


def report(records: Sequence[Dict], options) -> None:
    """The study's report: the records of the run's protocol (after a run) or, of every record in the file, those of
    the budget with the most records (``--report-only``, ``--rescore``), each method at its newest version
    (:func:`experiments.uci.summary.view`); ``--as-recorded``: each record under its method's own version."""
    every = ResultStore(records_path(options), KEY, upgrade=upgrade).all_records()  # every protocol, none carried
    if options.report_only or options.rescore or options.as_recorded:
        records = every
    kind = splits_kind(options)
    # gap and published cells never share a table
    records = view([r for r in records if record_kind(r) == kind], as_recorded=options.as_recorded)
    # the page's own report command (experiments.harness.cli.report_command: the REPORT_RUNS entry of its page)
    command = getattr(options, "report_command", None) or BLOCK_COMMAND + (f" --only-version {options.only_version}" if options.only_version else "")
    doc = options.doc or (page_path(options) if kind == "gap" else None)  # the gap page: <out>.md by default
    if kind == "gap" and not records:
        text = no_gap_records_markdown()
        atomic_write_text(Path(options.out) / "table.md", text)
        write_block(doc, "uci", text, command, create=True)
        if not options.quiet:
            print(text)
        return
    selected = select_records(records, records_path(options), version=options.only_version)
    text = write_report(Path(options.out), selected, doc, command, gap_markdown if kind == "gap" else markdown,
                        part=getattr(options, "part", "all"))
    if options.doc and options.only_version == "v5":  # the v5 page also shows what v5 changed, cell by cell
        write_block(options.doc, "uci_dgp_start_noise", dgp_start_noise_markdown(every), command, create=True)
    if not options.quiet:
        print(text)
        print(f"wrote {Path(options.out) / 'table.md'}, summary.csv and uci.png")
