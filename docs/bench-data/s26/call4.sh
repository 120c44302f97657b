#!/usr/bin/env bash
# (The .carry patches are archived here: s26T = v6-p-before-rs-C2.patch; it applies on 4b8c76c. To rerun:
# cp it to .carry/s26T.patch with the tree's kernels at C2.)
# Session 26, call 4 (nvidia-h200, carry .carry): call2.sh's timelines for C2 (P stored before the register-A
# P.V, then fence and mbarrier arrive; C2 of call 3: 1-1.4% slower) beside the base (this tree with
# .carry/s26T.patch reversed).
PATCH=.carry/s26T.patch bash "$(dirname "$0")/call2.sh"
