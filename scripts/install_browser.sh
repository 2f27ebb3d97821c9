#!/usr/bin/env bash
# What the real-browser test (tests/notebooks/test_browser.py) needs: Debian's chromium and the
# playwright Python package. Playwright's own browser download does not work everywhere, so the test
# drives /usr/bin/chromium through `executable_path`. Safe to run again; never fails the build: the
# test skips with its reason when something is missing.
set -u
VENV="${1:-.venv}"

if [ ! -x /usr/bin/chromium ]; then
    if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = "0" ]; then
        echo "installing chromium (apt)"
        apt-get update -qq && apt-get install -y -qq chromium || echo "warning: could not install chromium; the browser test will skip"
    else
        echo "warning: /usr/bin/chromium is missing and apt-get is unavailable here (or not root); the browser test will skip"
    fi
fi

if ! "$VENV/bin/python" -c "import playwright" 2>/dev/null; then
    "$VENV/bin/python" -m pip install --quiet "playwright>=1.50" || echo "warning: could not install playwright; the browser test will skip"
fi
exit 0
