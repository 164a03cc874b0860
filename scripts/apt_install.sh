#!/bin/sh
# apt_install.sh PACKAGE WHAT: install Debian's PACKAGE where apt-get can be used (as root, or with
# password-less sudo). Never fails the set-up: otherwise it says how to install it and what needs it.
pkg="$1"; what="$2"
if ! command -v apt-get >/dev/null 2>&1; then
    echo "set-up: no apt-get here; install $pkg yourself for $what." >&2
    exit 0
fi
if [ "$(id -u)" = 0 ]; then SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"
else
    echo "set-up: not root and no password-less sudo; run 'sudo apt-get install -y $pkg' for $what." >&2
    exit 0
fi
echo "set-up: installing Debian's $pkg (for $what) ..." >&2
{ $SUDO apt-get install -y -qq "$pkg" || { $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$pkg"; }; } \
    >/dev/null 2>&1 || echo "set-up: apt-get install $pkg failed; $what will be skipped." >&2
exit 0
