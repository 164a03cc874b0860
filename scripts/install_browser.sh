#!/bin/sh
# Headless Chromium for the report's browser test (tests/test_report_html.py).
# Installs Debian's `chromium` package when no Chromium is on PATH and apt-get can be used
# (as root, or with password-less sudo). Never fails the set-up: without a browser the
# browser test is skipped with a message saying how to install one.
for b in chromium chromium-browser google-chrome google-chrome-stable; do
    command -v "$b" >/dev/null 2>&1 && exit 0
done
exec sh "$(dirname "$0")/apt_install.sh" chromium "the report's browser test"
