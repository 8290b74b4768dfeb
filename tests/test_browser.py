"""The built book in a real browser: headless Chromium (Debian's), driven by Playwright, offline.

Every HTML page of the book is opened from file:// with every request to any other address
blocked and recorded: its maths must be typeset by the local MathJax (no raw ``$$``, ``\\(`` or
``\\[`` left in the visible text outside code), every image must load, and the console must
stay free of errors. The in-page speedup calculator (book/_static/calculator.js) must show the
numbers of :mod:`specdec.theory.speedup` and ``specdec plan`` for a grid of inputs, and answer bad
input with a message, never NaN. Screenshots of a few pages are kept in
``_build/browser-screenshots/`` as artefacts.

Playwright (PyPI, the ``dev`` extra) drives the system's Chromium through ``executable_path``
and never downloads a browser of its own. Without Chromium or Playwright the tests are skipped,
with the reason, except under CI (``CI`` set), where that is a failure: ``make test`` installs
Chromium with apt-get there.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specdec.theory import speedup as theory
from specdec.theory.plan import plan

ROOT = Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "_build" / "browser-screenshots"
#: Debian's Chromium (apt-get install -y chromium); SPECDEC_CHROMIUM names another binary.
CHROMIUM = os.environ.get("SPECDEC_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
#: Pages photographed for the artefacts (path in the built book -> file name).
SHOTS = {
    "book/intro.html": "index",
    "notebooks/speedup.html": "speedup",
    "notebooks/hardware.html": "hardware",
}
#: How long a page may take to load and typeset its maths (ms); a local page needs about 1 s.
PAGE_TIMEOUT_MS = 30_000
#: Decimals the calculator shows (as `specdec plan` prints: f"{x:.4f}").
DECIMALS = 4
#: The calculator's search range for the optimal gamma (specdec.theory.speedup.optimal_gamma's default).
MAX_GAMMA = 64
ALPHAS = [0.0, 0.3, 0.6, 0.8, 0.95]
COSTS = [0.0, 0.05, 0.5, 1.0]
GAMMAS = [1, 3, 7]
VERIFY = [None, 1.3, 3.0]
GRID = list(itertools.product(ALPHAS, COSTS, GAMMAS, VERIFY))
#: Raw TeX that MathJax would have replaced: display and inline delimiters, environments.
RAW_TEX = r"/\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{|\\end\{/"
#: Elements whose text may legitimately hold TeX: code, and MathJax's own output.
NOT_PROSE = "pre, code, kbd, samp, script, style, textarea, mjx-container, .highlight"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _browser_or_skip():
    """Playwright's sync API, or a skip (a failure under CI) naming what is missing."""
    missing = []
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
        missing.append("the Python package playwright (pip install -c constraints.txt -e '.[dev]')")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        missing.append(f"Chromium at {CHROMIUM} (apt-get install -y chromium, or set SPECDEC_CHROMIUM)")
    if missing:
        reason = "the browser test needs " + " and ".join(missing)
        if _in_ci():
            pytest.fail(reason + "; under CI (CI is set) that is a failure, not a skip", pytrace=False)
        pytest.skip(reason)
    return sync_playwright


@pytest.fixture(scope="module")
def browser():
    sync_playwright = _browser_or_skip()
    with sync_playwright() as pw:
        # Never a browser of Playwright's own: the system's Chromium, headless. Playwright adds
        # --no-sandbox (needed as root), --disable-background-networking and friends.
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def html(tmp_path_factory) -> Path:
    """The book, built strictly into a temporary folder (tests/test_book.py checks the build)."""
    out = tmp_path_factory.mktemp("book")
    jb = Path(sys.executable).with_name("jupyter-book")
    cmd = [str(jb if jb.exists() else shutil.which("jupyter-book")), "build", str(ROOT)]
    cmd += ["--path-output", str(out), "--warningiserror", "--keep-going"]
    run = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    return out / "_build" / "html"


class Page:
    """One page in a fresh browser context, with every request outside file:// blocked."""

    def __init__(self, browser, url: str):
        self.outside: list[str] = []
        self.failed: list[str] = []
        self.console: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")
        self.context.route("**/*", self._route)
        self.page = self.context.new_page()
        self.page.set_default_timeout(PAGE_TIMEOUT_MS)
        self.page.on("request", self._request)
        self.page.on("requestfailed", self._failed)
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        self.page.on("websocket", lambda ws: self.outside.append(ws.url))
        self.page.goto(url, wait_until="load")

    @staticmethod
    def _local(url: str) -> bool:
        return url.split(":", 1)[0] in ("file", "data", "blob", "about")

    def _route(self, route) -> None:
        url = route.request.url
        if self._local(url):
            route.continue_()
        else:
            if url not in self.outside:
                self.outside.append(url)
            route.abort("blockedbyclient")

    def _request(self, request) -> None:
        if not self._local(request.url) and request.url not in self.outside:
            self.outside.append(request.url)

    def _failed(self, request) -> None:
        if self._local(request.url):
            self.failed.append(f"{request.url}: {request.failure}")

    def _console(self, message) -> None:
        if message.type == "error":
            self.console.append(message.text)

    def close(self) -> None:
        self.context.close()


def _page_report(page) -> dict:
    """MathJax's state, raw TeX left in prose, and images that did not load, read in the page."""
    mathjax = page.evaluate(
        """() => {
          const s = document.querySelector('script[src*="mathjax"]');
          return {
            script: s ? s.src : null,
            started: !!(window.MathJax && window.MathJax.startup && window.MathJax.startup.promise),
            math: document.querySelectorAll('.math').length,
          };
        }"""
    )
    if mathjax["started"]:
        page.evaluate("() => MathJax.startup.promise.then(() => true)")
    checks = page.evaluate(
        """async ([rawTex, notProse]) => {
          const raw = [];
          const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
          while (walker.nextNode()) {
            const node = walker.currentNode;
            const parent = node.parentElement;
            if (!parent || parent.closest(notProse)) continue;
            const m = node.data.match(rawTex);
            if (m) raw.push(node.data.slice(Math.max(0, m.index - 40), m.index + 40).trim());
          }
          const images = Array.from(document.images);
          await Promise.all(images.map(img => {
            img.loading = 'eager';
            return img.complete ? null : new Promise(done => {
              img.addEventListener('load', done);
              img.addEventListener('error', done);
              setTimeout(done, 10000);
            });
          }));
          return {
            raw: raw,
            typeset: document.querySelectorAll('mjx-container').length,
            mathErrors: document.querySelectorAll('mjx-merror').length,
            images: images.length,
            badImages: images.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src),
          };
        }""",
        [RAW_TEX, NOT_PROSE],
    )
    return {**mathjax, **checks}


def _problems(p: Page, report: dict) -> list[str]:
    out = []
    if report["math"] and not report["script"]:
        out.append(f"{report['math']} maths elements but no MathJax script")
    if report["script"] and not report["script"].startswith("file://"):
        out.append(f"MathJax loaded from outside the book: {report['script']}")
    if report["script"] and not report["started"]:
        out.append(f"MathJax did not start (script {report['script']})")
    if report["math"] and not report["typeset"]:
        out.append(f"{report['math']} maths elements, none typeset")
    if report["mathErrors"]:
        out.append(f"{report['mathErrors']} MathJax errors (mjx-merror)")
    out += [f"raw TeX in the text: {t!r}" for t in report["raw"][:5]]
    out += [f"image not loaded: {src}" for src in report["badImages"]]
    out += [f"request outside the book: {u}" for u in p.outside]
    out += [f"local file failed: {f}" for f in p.failed]
    out += [f"console error: {m}" for m in p.console]
    out += [f"page error: {e}" for e in p.errors]
    return out


def test_every_page_offline_typeset_and_clean(browser, html: Path):
    pages = sorted(p.relative_to(html).as_posix() for p in html.rglob("*.html"))
    pages = [p for p in pages if not p.startswith("_static/")]  # the theme's templates
    assert "notebooks/speedup.html" in pages and len(pages) >= 10, pages
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    problems: dict[str, list[str]] = {}
    typeset = 0
    for rel in pages:
        p = Page(browser, (html / rel).as_uri())
        try:
            if rel == "index.html":  # a redirect to the first page, which is checked itself
                p.page.wait_for_url("**/book/intro.html")
            report = _page_report(p.page)
            typeset += report["typeset"]
            found = _problems(p, report)
            if found:
                problems[rel] = found
            if rel in SHOTS:
                p.page.screenshot(path=str(SCREENSHOTS / f"{SHOTS[rel]}.png"))
            if rel == "notebooks/speedup.html":
                calc = p.page.locator("div.specdec-calc").first
                calc.scroll_into_view_if_needed()
                calc.screenshot(path=str(SCREENSHOTS / "speedup-calculator.png"))
        finally:
            p.close()
    assert not problems, "\n".join(f"{page}:\n  " + "\n  ".join(found) for page, found in problems.items())
    assert typeset > 100, f"only {typeset} formulas typeset over {len(pages)} pages"


# --------------------------------------------------------------------------- the calculator
@pytest.fixture(scope="module")
def speedup_page(browser, html: Path):
    p = Page(browser, (html / "notebooks" / "speedup.html").as_uri())
    p.page.wait_for_selector("div.specdec-calc[data-ready] [data-out='speedup']")
    yield p
    assert not (p.console or p.errors or p.outside), (p.console, p.errors, p.outside)
    p.close()


def _expected(alpha: float, c: float, gamma: int, v: float | None) -> dict:
    """What the calculator must show, from specdec.theory.speedup (and `specdec plan` with a verify cost)."""
    # at c = 0 (alpha > 0) E[T] rises with gamma: the limit, as `specdec plan` (not a floating tie)
    g_star = int(theory.optimal_gamma(alpha, c, max_gamma=MAX_GAMMA))  # the limit at c = 0, alpha > 0
    out = {
        "expected_tokens": float(theory.expected_tokens(alpha, gamma)),
        "speedup": float(theory.walltime_speedup(alpha, gamma, c)),
        "optimal_gamma": g_star,
        "optimal_speedup": float(theory.walltime_speedup(alpha, g_star, c)),
        "optimal_at_max_gamma": g_star == MAX_GAMMA,
        "break_even": alpha > c,
        "break_even_gamma1_speedup": float(theory.walltime_speedup(alpha, 1, c)),
        "ceiling": float(theory.speedup_ceiling(alpha)),
        "speedup_with_verify": None,
        "optimal_gamma_with_verify": None,
        "optimal_speedup_with_verify": None,
    }
    # `specdec plan` reports the same numbers (its optimum is Theorem 3.8's without V)
    r = plan(alpha, c, gamma, verify_cost=v, max_gamma=MAX_GAMMA)
    for key in ("expected_tokens", "speedup", "break_even", "break_even_gamma1_speedup", "ceiling"):
        assert r[key] == out[key], key
    if v is None:
        assert (r["optimal_gamma"], r["optimal_speedup"]) == (g_star, out["optimal_speedup"])
    else:
        out["speedup_with_verify"] = float(theory.walltime_speedup_measured(alpha, gamma, c, v))
        assert r["speedup_with_verify"] == out["speedup_with_verify"]
        out["optimal_gamma_with_verify"] = r["optimal_gamma"]
        out["optimal_speedup_with_verify"] = r["optimal_speedup"]
    return out


def _close(js, py) -> bool:
    if isinstance(py, bool) or py is None or isinstance(py, int):
        return js == py and type(js) is type(py)
    return isinstance(js, float | int) and math.isclose(js, py, rel_tol=1e-12, abs_tol=0.0)


def _shown(key: str, value) -> str:
    if isinstance(value, bool):
        return "holds" if value else "fails"
    if isinstance(value, int):
        return str(value)
    return f"{value:.{DECIMALS}f}"


def test_calculator_numbers_equal_specdec_theory(speedup_page):
    """window.specdecCalc.compute, on the grid, against specdec.theory.speedup (rel. 1e-12; integers
    exact)."""
    got = speedup_page.page.evaluate(
        "grid => grid.map(([a, c, g, v]) => window.specdecCalc.compute(a, c, g, v))", [list(x) for x in GRID]
    )
    bad = []
    for (alpha, c, gamma, v), js in zip(GRID, got, strict=True):
        want = _expected(alpha, c, gamma, v)
        for key, py in want.items():
            if not _close(js[key], py):
                bad.append(f"alpha={alpha} c={c} gamma={gamma} V={v}: {key} JS {js[key]!r} != {py!r}")
    assert not bad, f"{len(bad)} differences:\n" + "\n".join(bad[:40])


SET_AND_READ = """grid => {
  const root = document.querySelector('div.specdec-calc');
  const set = (key, value) => {
    const input = root.querySelector(`[data-in="${key}"]`);
    input.value = value;
    input.dispatchEvent(new Event('input', {bubbles: true}));
  };
  return grid.map(([a, c, g, v]) => {
    set('alpha', a); set('c', c); set('gamma', g); set('verify', v);
    const shown = {};
    root.querySelectorAll('[data-out]').forEach(el => {
      if (el.closest('[hidden]') === null && el.tagName !== 'svg') shown[el.dataset.out] = el.textContent;
    });
    shown.widget = root.textContent;
    const path = cls => (root.querySelector(`path.${cls}`) || {getAttribute: () => ''}).getAttribute('d');
    shown.curve = path('specdec-calc-curve');
    shown.curveV = path('specdec-calc-curve-v');
    return shown;
  });
}"""


def test_calculator_displays_specdec_theory(speedup_page):
    """The page, driven through its inputs, shows Python's formatting of the theory's values."""
    grid = [[repr(a), repr(c), str(g), "" if v is None else repr(v)] for a, c, g, v in GRID]
    shown = speedup_page.page.evaluate(SET_AND_READ, grid)
    bad = []
    curves = set()
    for (alpha, c, gamma, v), page in zip(GRID, shown, strict=True):
        want = _expected(alpha, c, gamma, v)
        label = f"alpha={alpha} c={c} gamma={gamma} V={v}"
        if page.get("error"):
            bad.append(f"{label}: error shown: {page['error']}")
        for bad_word in ("NaN", "Infinity", "undefined", "null"):
            if bad_word in page["widget"]:
                bad.append(f"{label}: {bad_word} in the widget")
        for key, value in want.items():
            if key == "optimal_at_max_gamma":
                continue
            if value is None:
                if key in page:
                    bad.append(f"{label}: {key} shown without a verify cost")
            elif page.get(key) != _shown(key, value):
                bad.append(f"{label}: {key} shows {page.get(key)!r}, Python formats {_shown(key, value)!r}")
        # the curve: one point per gamma in the plotted range, redrawn for each input
        if not page["curve"] or page["curve"].count("L") < 12:
            bad.append(f"{label}: curve not drawn ({page['curve'][:40]!r})")
        if bool(page["curveV"]) != (v is not None):
            bad.append(f"{label}: the verify-priced curve is {'drawn' if page['curveV'] else 'missing'}")
        curves.add(page["curve"])
    assert not bad, f"{len(bad)} differences:\n" + "\n".join(bad[:40])
    # each (alpha, c) has its own curve (gamma moves the marker and may widen the plotted range)
    assert len(curves) >= len(ALPHAS) * len(COSTS), "the curve is not redrawn for new inputs"


def test_calculator_typed_input(speedup_page):
    """Typed into the boxes as a reader would (key events, not scripted values)."""
    page = speedup_page.page
    calc = page.locator("div.specdec-calc").first
    for key, text in (("alpha", "0.62"), ("c", "0.1"), ("gamma", "5"), ("verify", "1.25")):
        calc.locator(f"[data-in='{key}']").fill(text)
    want = _expected(0.62, 0.1, 5, 1.25)
    for key in ("expected_tokens", "speedup", "speedup_with_verify", "optimal_gamma", "optimal_speedup"):
        assert calc.locator(f"[data-out='{key}']").text_content() == _shown(key, want[key]), key
    calc.locator("[data-in='verify']").fill("")
    assert calc.locator("[data-out='speedup_with_verify']").count() == 0


@pytest.mark.parametrize(
    ("key", "text", "message"),
    [
        ("alpha", "1", "alpha must lie in [0, 1)"),
        ("alpha", "-0.1", "alpha must lie in [0, 1)"),
        ("alpha", "", "alpha is empty"),
        ("c", "-0.5", "c must be a finite number >= 0"),
        ("gamma", "0", "gamma must be an integer >= 1"),
        ("gamma", "2.5", "gamma must be an integer >= 1"),
        ("verify", "0", "V must be a finite number > 0"),
        ("verify", "-2", "V must be a finite number > 0"),
        ("alpha", "1e400", "alpha is not a finite number"),
    ],
)
def test_calculator_bad_input_says_why(speedup_page, key, text, message):
    page = speedup_page.page
    calc = page.locator("div.specdec-calc").first
    good = {"alpha": "0.8", "c": "0.05", "gamma": "4", "verify": ""}
    for k, t in good.items():
        calc.locator(f"[data-in='{k}']").fill(t)
    calc.locator(f"[data-in='{key}']").fill(text)
    error = calc.locator("[data-out='error']")
    assert error.is_visible()
    assert message in error.text_content()
    widget = calc.text_content()
    for bad_word in ("NaN", "Infinity", "undefined"):
        assert bad_word not in widget
    assert calc.locator("[data-out='speedup']").count() == 0  # no stale number left on show
    calc.locator(f"[data-in='{key}']").fill(good[key])  # fixing the input clears the message
    assert not error.is_visible()
    want = _shown("speedup", theory.walltime_speedup(0.8, 4, 0.05))
    assert calc.locator("[data-out='speedup']").text_content() == want


@pytest.mark.parametrize("x", [0.03125, 0.09375, 1.96875, 2.5, 0.5, 1 / 3, 2 / 3, 12345.678951, 1.00005, 0.0])
def test_calculator_rounds_like_python(speedup_page, x):
    """Ties (exact binary halves such as 0.03125) go to even, as Python's format does."""
    for d in (0, 1, 2, 4, 6):
        js = speedup_page.page.evaluate("([x, d]) => window.specdecCalc.formatFixed(x, d)", [x, d])
        assert js == f"{x:.{d}f}", (x, d)
