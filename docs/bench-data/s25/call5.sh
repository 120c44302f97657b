#!/usr/bin/env bash
# Session 25, call 5: call1.sh's script (peers and ours built, peer_fp8.py over issue 11's suite) on the
# final tree, a second process replicating call 1's vLLM comparison (it ran with a 300 s peer timeout
# and without the nvidia-smi line; the run took seconds). Carry [".peer"].
# Usage (GPU machine, repo root): OUT=dir bash docs/bench-data/s25/call5.sh
exec bash "$(dirname "$0")/call1.sh"
