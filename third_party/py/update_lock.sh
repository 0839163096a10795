#!/usr/bin/env bash
# Regenerates requirements_lock.txt from requirements.in: the newest versions that resolve together,
# every file pinned by sha256. Run from anywhere; needs the network to PyPI. Commit both files.
set -euo pipefail
cd "$(dirname "$0")"
venv=$(mktemp -d)
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet "pip-tools==7.6.2"
# --allow-unsafe pins setuptools too (tensorflow and tensorboard need it); otherwise it would stay
# unpinned and --require-hashes would reject the lock. The index/find-links of this machine's pip
# config are not written into the lock.
CUSTOM_COMPILE_COMMAND="third_party/py/update_lock.sh" "$venv/bin/pip-compile" --quiet --generate-hashes --allow-unsafe --strip-extras \
  --no-emit-index-url --no-emit-find-links \
  --output-file requirements_lock.txt requirements.in
echo "wrote $(pwd)/requirements_lock.txt: $(grep -c '^[a-z]' requirements_lock.txt) pinned distributions"
