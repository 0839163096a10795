#!/usr/bin/env bash
# Formats the whole tree and applies the linter's safe fixes, with the locked ruff (ruff.toml) and
# Debian's clang-format (.clang-format). Run from anywhere; then `./bazelw test //tools:lint_test`.
#
# It first deletes the "pending" blocks of ruff.toml (paths that were not formatted yet when the
# formatter arrived), so that from then on lint_test checks the whole tree.
set -euo pipefail
cd "$(dirname "$0")/.."
./bazelw build --ui_event_filters=-info @pypi//:site/bin/ruff >/dev/null
ruff="$(./bazelw info output_base 2>/dev/null)/external/pypi/site/bin/ruff"
sed -i '/BEGIN pending/,/END pending/d' ruff.toml
"$ruff" check --fix --quiet . || true  # What is left is reported below.
"$ruff" format --quiet .
mapfile -t cc < <(git ls-files '*.cc' '*.h')
clang-format -i "${cc[@]}"
"$ruff" check --output-format=concise .
