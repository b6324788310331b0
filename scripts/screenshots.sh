#!/usr/bin/env bash
# Regenerates the dashboard's pictures, docs/dashboard-light.png and
# docs/dashboard-dark.png: a storefront's protections (5 breakers and a
# registry of 4, 4 bulkheads, a worker pool, a retry budget, a throttler, a
# hedge policy, an adaptive limiter, a balancer) through a stall of its
# recommendation service, in headless Chromium, light then dark. It needs
# Debian's chromium (apt-get install chromium) and takes about 30 s.
#   bash scripts/screenshots.sh
set -euo pipefail
cd "$(dirname "$0")/.."
docs="$(pwd)/docs"
cd dashboard/browsertest
WATERTIGHT_REQUIRE_CHROMIUM=1 WATERTIGHT_SCREENSHOTS="$docs" \
	go test -count=1 -run '^TestScreenshots$' -v .
ls -l "$docs"/dashboard-light.png "$docs"/dashboard-dark.png
