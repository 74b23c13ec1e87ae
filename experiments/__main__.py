"""``python -m experiments <study> [options]`` runs a study; ``python -m experiments list`` names the studies;
``python -m experiments report`` regenerates every results page under docs/ from the committed records, training
nothing (a fresh clone stays clean: the pages equal what the records give)."""

from __future__ import annotations

import sys

from experiments.harness import cli, registry


def report_all() -> None:
    """Every study's report runs (:func:`experiments.harness.cli.report_runs`), then the blocks the benchmarks write
    from their committed records (:func:`experiments.harness.registry.report_benchmarks`: the registry names them,
    experiments/ imports no benchmark)."""
    for name in registry.STUDIES:
        study = registry.study(name)
        for extra in cli.report_runs(study):
            cli.main(name, study, ["--report-only", "--quiet"] + extra)
    registry.report_benchmarks()


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        print("studies:", ", ".join(registry.STUDIES))
        return 0
    command, rest = argv[0], argv[1:]
    if command == "list":
        for name, module in registry.STUDIES.items():
            doc = (registry.study(name).__doc__ or "").strip().splitlines()
            print(f"{name:24s} {doc[0] if doc else module}")
        return 0
    if command == "report":
        report_all()
        return 0
    cli.main(command, registry.study(command), rest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
