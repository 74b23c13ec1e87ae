"""The library's imports only go down: no import cycle among activated_dgp's modules, counting imports inside
functions (read from the source with ast, not by importing), and validation is a leaf."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "activated_dgp"


def _modules() -> dict:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _graph(modules: dict) -> dict:
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[: len(parts) - node.level + 1] + ([node.module] if node.module else []))
                # ``from package import submodule`` depends on the submodule; ``from package import name`` on the
                # package's __init__ (also when the package is the importing module's own: ``from . import f``)
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def _cycles(graph: dict) -> list:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles():
    assert _cycles(_graph(_modules())) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_a_name_taken_from_the_own_package_init_is_an_edge_to_it(tmp_path, monkeypatch):
    """``from . import f`` inside pkg/sub.py, with pkg/__init__.py importing .sub, is the cycle pkg ↔ pkg.sub (the one
    activated_dgp.data had with resolve_data_dir); ``from . import sub`` alone is an edge to the submodule only."""
    package = tmp_path / "activated_dgp"
    (package / "pkg").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "pkg" / "__init__.py").write_text("def f():\n    pass\n\nfrom .sub import g\n")
    (package / "pkg" / "sub.py").write_text("from . import f\n\ndef g():\n    pass\n")
    (package / "pkg" / "other.py").write_text("from . import sub\n")
    monkeypatch.setitem(globals(), "PACKAGE", package)
    graph = _graph(_modules())
    assert _cycles(graph) == [["activated_dgp.pkg", "activated_dgp.pkg.sub"]]
    assert graph["activated_dgp.pkg.other"] == {"activated_dgp.pkg.sub"}


def test_validation_is_a_leaf():
    assert _graph(_modules())["activated_dgp.validation"] == set()


def test_saving_is_a_leaf():
    """The one saving mechanism knows no kind: each subpackage registers its own."""
    assert _graph(_modules())["activated_dgp.saving"] == set()


def test_training_package_imports_go_down():
    """activated_dgp.training's modules, lowest first; each imports only modules before it (function-level
    imports counted)."""
    order = ["callbacks", "schedule", "distributed", "recipes", "fitters", "extractor", "mean_kl_penalty", "convertible", "two_stage"]
    graph = _graph(_modules())
    modules = [f"activated_dgp.training.{name}" for name in order]
    for position, name in enumerate(modules):
        inside = {target for target in graph[name] if target.startswith("activated_dgp.training")}
        assert inside <= set(modules[:position]), f"{name} imports {sorted(inside - set(modules[:position]))}"


NAMESPACES = ("activated_dgp", "activated_dgp.zonal", "activated_dgp.deep")


def test_namespaces_are_imported_by_no_implementation_module():
    """The top level and the namespaces of the zonal and deep packages sit above every implementation module: they import
    the modules, never the reverse (function-level imports counted)."""
    graph = _graph(_modules())
    for name in NAMESPACES:
        assert name in graph
    offenders = {name: sorted(graph[name] & set(NAMESPACES)) for name in graph if name not in NAMESPACES}
    assert {name: targets for name, targets in offenders.items() if targets} == {}


#: The subpackages, lowest first: each may import only the top-level leaves and the subpackages before it.
SUBPACKAGES = ["zonal", "deep", "data", "training", "eigen", "kernel_machines"]
LEAVES = {"activated_dgp._deprecation", "activated_dgp.validation", "activated_dgp.metrics", "activated_dgp.saving"}


def _subpackage(module: str):
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in SUBPACKAGES) else None


def test_subpackages_import_only_downwards():
    graph = _graph(_modules())
    offenders = {}
    for name, targets in graph.items():
        own = _subpackage(name)
        if own is None:
            continue
        allowed = set(SUBPACKAGES[: SUBPACKAGES.index(own) + 1])
        bad = sorted(t for t in targets if t not in LEAVES and _subpackage(t) not in allowed)
        if bad:
            offenders[name] = bad
    assert offenders == {}


def test_zonal_modules_import_in_order():
    """The zonal core bottom-up: Gegenbauer machinery, Funk–Hecke quadrature, activations and spectra, kernels,
    inducing variables, covariances, conditional, the activated layers' owned step."""
    order = ["spherical", "funk_hecke", "spectra", "kernels", "inducing_variables", "covariances", "conditionals", "owned_conditional"]
    graph = _graph(_modules())
    modules = [f"activated_dgp.zonal.{name}" for name in order]
    assert set(modules) == {name for name in graph if name.startswith("activated_dgp.zonal.")}
    for position, name in enumerate(modules):
        inside = {target for target in graph[name] if target.startswith("activated_dgp.zonal")}
        assert inside <= set(modules[:position]), f"{name} imports {sorted(inside - set(modules[:position]))}"


def _assert_package_imports_go_down(package: str, order: list) -> None:
    """``order`` names every module of ``package``, lowest first; each imports only the package's modules before it
    (its __init__ excluded: the package's namespace sits above them)."""
    graph = _graph(_modules())
    modules = [f"{package}.{name}" for name in order]
    assert set(modules) == {name for name in graph if name.startswith(f"{package}.")}
    for position, name in enumerate(modules):
        inside = {target for target in graph[name] if target == package or target.startswith(f"{package}.")}
        assert inside <= set(modules[:position]), f"{name} imports {sorted(inside - set(modules[:position]))}"


def test_laplace_modules_import_in_order():
    """The linearised Laplace package bottom-up: settings, the subnetwork, the (x, c) pairs, the network's features,
    the posterior covariances, the predictives, the evidence, the curvature fits, saving, the class; its __init__
    above them all."""
    order = ["settings", "subnetwork", "pairs", "network", "covariance", "predictive", "evidence", "curvature",
             "persistence", "approximation"]
    _assert_package_imports_go_down("activated_dgp.eigen.laplace", order)


def test_neuralef_modules_import_in_order():
    """The NeuralEF package bottom-up: the networks, the minibatch objective, the minibatch order, training, the
    fitted eigenpairs, the class, saving; its __init__ above them all."""
    order = ["networks", "objective", "minibatches", "training", "eigenpairs", "model", "persistence"]
    _assert_package_imports_go_down("activated_dgp.eigen.neuralef", order)


def test_few_modules_sit_flat_in_the_package():
    flat = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(flat) <= 8, flat
