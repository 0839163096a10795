#!/usr/bin/env bash
# The tree is clean under the formatter and linter: `ruff check` and `ruff format --check` (ruff.toml
# says what each covers) and clang-format on profiling/'s C++. Fix what it reports with
# tools/format.sh. Argument: the path of the locked ruff binary.
set -uo pipefail
ruff="$PWD/$1"
cd "${TEST_SRCDIR}/${TEST_WORKSPACE}" || exit 1  # The tree's files, as runfiles.
status=0
echo "== ruff check"
"$ruff" check --no-cache --output-format=concise . || status=1
echo "== ruff format --check"
"$ruff" format --no-cache --check . || status=1
echo "== clang-format"
if ! command -v clang-format >/dev/null; then
  echo "clang-format is not installed: run ./bazelw once (it installs Debian's clang-format)."
  status=1
else
  mapfile -t cc < <(find -L profiling -name '*.cc' -o -name '*.h' | sort)
  clang-format --dry-run -Werror "${cc[@]}" || status=1
fi
if ((status)); then
  echo "FAIL: run tools/format.sh (it formats and applies the safe fixes), then fix what remains."
fi
exit "$status"
