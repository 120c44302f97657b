#!/usr/bin/env bash
# Sets up, builds and runs every test (GPU tests skip cleanly without a device).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" ${CTEST_ARGS:-}
# The unit tests again under ASan + UBSan, and every fuzz target for 30 s (MLA_SANITIZE_CI=0 skips).
if [ "${MLA_SANITIZE_CI:-1}" = 1 ]; then bash scripts/sanitize.sh; fi
