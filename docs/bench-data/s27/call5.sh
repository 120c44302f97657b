#!/usr/bin/env bash
# Session 27, call 5 (nvidia-h200): session 26's call 7 again (v6 with fewer CTAs streaming), read from every CTA's
# span (MLA_TL_SPAN) instead of CTA (0, 0)'s events, which call 4 found slow the instrumented CTA by ~14%.
# 128 rows 8K at 64 / 32 / 16 parts, 256 rows 8K at 33 / 16 / 8 parts.
OUT=${OUT:-/tmp/mla-out} SHAPES="128 1 64 32 16;128 2 33 16 8" TAG=tl bash docs/bench-data/s26/call7.sh 2>&1 |
  grep -E "^===|CTA spans|period|built|total"
