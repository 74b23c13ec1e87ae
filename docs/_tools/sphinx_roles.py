"""A griffe extension for the API reference: Sphinx cross-reference roles in docstrings become links.

The library's docstrings use Sphinx roles (:class:`ZonalArcCosine`, :func:`~activated_dgp.deep.predict_y`,
:meth:`predict_y`, :mod:, :attr:, :data:, :obj:, :exc:, :const:), which Markdown would show as literal text. Before
mkdocstrings renders a docstring, each role becomes an optional mkdocs-autorefs reference to the object it names,
resolved the way Sphinx resolves it: a dotted path as written, else a name in the scope of the documented object
(its members, its module's imports, then the enclosing scopes). The reference renders as a link when the object
is rendered somewhere on the site and as a code span otherwise (a name of TensorFlow or GPflow, say).

Display text follows Sphinx: ``~a.b.C`` shows ``C``, ``text <a.b.C>`` shows ``text``, ``!name`` is never a link.
Configured in mkdocs.yml (the python handler's ``extensions``).
"""

from __future__ import annotations

import html
import re

import griffe

ROLES = ("class", "func", "meth", "mod", "attr", "data", "obj", "exc", "const")
ROLE = re.compile(r":(?:py:)?(?P<role>" + "|".join(ROLES) + r"):`(?P<content>[^`]+)`")
EXPLICIT_TARGET = re.compile(r"^(?P<text>.*?)\s*<(?P<target>[^<>]+)>$", flags=re.S)


def _canonical(path: str, loader: griffe.GriffeLoader) -> str:
    """The canonical path of ``path`` when it names an object griffe loaded (following re-exports), else ``path``."""
    for _ in range(8):
        try:
            found = loader.modules_collection[path]
        except Exception:  # not loaded (another package), or not a member path at all
            return path
        if not found.is_alias:
            return found.path
        path = found.target_path
    return path


def resolve(target: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    """The full path a role's ``target`` names, seen from ``obj``: resolved in ``obj``'s scope by its first part,
    the rest appended; the target itself when nothing in scope matches."""
    target = target.lstrip(".")
    head, _, rest = target.partition(".")
    try:
        path = obj.resolve(head)
    except Exception:  # griffe.NameResolutionError, or an alias whose target is not loaded
        path = head if head == obj.module.package.name or not rest else None
        if path is None:
            return target
    return _canonical(f"{path}.{rest}" if rest else path, loader)


def role_to_reference(match: re.Match, obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    """One role, as an optional autorefs reference (``<autoref identifier=… optional>``) around a code span."""
    content = match["content"].strip()
    explicit = EXPLICIT_TARGET.match(content)
    if explicit:
        text, target = explicit["text"], explicit["target"].strip()
    else:
        target = content
        text = None
    no_link = target.startswith("!")
    target = target.lstrip("!")
    if text is None:
        text = target.lstrip("~.").rsplit(".", 1)[-1] if target.startswith("~") else target.lstrip(".")
    target = target.lstrip("~")
    code = f"<code>{html.escape(text)}</code>"
    if no_link:
        return code
    identifier = html.escape(resolve(target, obj, loader), quote=True)
    return f'<autoref identifier="{identifier}" optional>{code}</autoref>'


def rewrite_roles(text: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> str:
    return ROLE.sub(lambda match: role_to_reference(match, obj, loader), text)


class SphinxRoles(griffe.Extension):
    """Rewrites every loaded docstring's Sphinx roles (module docstring) once the object tree is complete."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs) -> None:
        if obj.docstring is not None and ":`" in obj.docstring.value:
            obj.docstring.value = rewrite_roles(obj.docstring.value, obj, loader)

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        self.on_object(obj=pkg, loader=loader)  # griffe calls on_object for the package's members only
