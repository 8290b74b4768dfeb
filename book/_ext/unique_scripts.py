"""Each script once per page: a workaround for Sphinx 7.4 (used by Jupyter Book 1).

An inline script that an extension adds after the HTML builder starts (sphinx-thebe's
``const THEBE_JS_URL = ...``, sphinx-togglebutton's selector) is kept twice, once with the
file name ``None`` and once with ``""``, so every page declared ``THEBE_JS_URL`` twice and the
browser reported "SyntaxError: Identifier 'THEBE_JS_URL' has already been declared"
(tests/test_browser.py fails on any page error). This keeps the first of each.
"""

from __future__ import annotations

from typing import Any


def _unique(app: Any, pagename: str, templatename: str, context: dict, doctree: Any) -> None:
    seen: set[tuple] = set()
    kept = []
    for script in context.get("script_files", []):
        key = (script.filename or "", script.priority, tuple(sorted(script.attributes.items())))
        if key not in seen:
            seen.add(key)
            kept.append(script)
    if "script_files" in context:
        context["script_files"] = kept


def setup(app: Any) -> dict[str, Any]:
    app.connect("html-page-context", _unique, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
