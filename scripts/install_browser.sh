#!/bin/sh
# Headless Chromium for the report's browser test (tests/test_report_html.py).
# Installs Debian's `chromium` package when no Chromium is on PATH and apt-get can be used
# (as root, or with password-less sudo). Never fails the set-up: without a browser the
# browser test is skipped with a message saying how to install one.
for b in chromium chromium-browser google-chrome google-chrome-stable; do
    command -v "$b" >/dev/null 2>&1 && exit 0
done
if ! command -v apt-get >/dev/null 2>&1; then
    echo "install_browser: no apt-get here; install Chromium yourself to run the report's browser test." >&2
    exit 0
fi
if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
else
    echo "install_browser: not root and no password-less sudo; run 'sudo apt-get install -y chromium' to enable the browser test." >&2
    exit 0
fi
echo "install_browser: installing Debian's chromium (for the report's browser test) ..." >&2
{ $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium; } >/dev/null 2>&1 \
    || echo "install_browser: apt-get install chromium failed; the report's browser test will be skipped." >&2
exit 0
