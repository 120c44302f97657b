#!/usr/bin/env bash
# Session 27, call 6 (nvidia-h200): every GPU test of the final tree = docs/bench-data/s24/call7.sh.
exec bash docs/bench-data/s24/call7.sh
