# verify-decode --devices / --dcp / --comm through the tool's main (CPU stand-in: ranks on threads):
# the ranks' output equals the sequential sum, DCP the one-device decode within the BF16 bound, and
# bad combinations exit 1 with a message.
include(${CMAKE_CURRENT_LIST_DIR}/cli_run.cmake)
set(M ${SRC}/datasets/tiny-v2)
run(0 ${TOOLS}/mla-forward/mla-forward -q capture ${M} --out ${WORK}/cap.h5 --eval ${SRC}/docs/math.md
    --eval-seqs 2 --seq-len 40)
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 1 -o ${WORK}/tp1 ${M})
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 2 --reparam hadamard --seed 5 --norm exact -o ${WORK}/tp2 ${M})
set(V ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 24 --decode 8
      --sequences 2 --layers 0,5 --device cpu --max-rel-l2 1 --max-cos-diff 1)
run(0 ${V} --converted ${WORK}/tp2 --devices 2 --json ${WORK}/tpla.json)
file(READ ${WORK}/tpla.json j)
string(JSON runner GET "${j}" devices runner)
string(JSON rel GET "${j}" layers 1 devices_vs_sequential rel_l2)
if(NOT runner MATCHES "TPLA ranks on 2 CPU threads" OR NOT rel EQUAL 0)
  message(FATAL_ERROR "tpla.json: runner '${runner}', ranks vs sequential rel_l2 ${rel} (expected 0)")
endif()
run(0 ${V} --converted ${WORK}/tp1 --devices 2 --dcp --json ${WORK}/dcp.json)
file(READ ${WORK}/dcp.json j)
string(JSON rel GET "${j}" layers 0 devices_vs_sequential rel_l2)
if(NOT rel GREATER 0 OR NOT rel LESS 8e-3)
  message(FATAL_ERROR "dcp.json: DCP vs one device rel_l2 ${rel} (expected in (0, 8e-3))")
endif()
# End to end through the kernel path (twin): every layer's ranks checked against the sequential sum.
run(0 ${V} --converted ${WORK}/tp2 --devices 2 --perplexity --perplexity-path kernel)
run(0 ${V} --converted ${WORK}/tp1 --devices 2 --dcp --perplexity --perplexity-path kernel)
run(1 ${V} --converted ${WORK}/tp2 --devices 3)              # one rank per device
run(1 ${V} --converted ${WORK}/tp2 --devices 2 --dcp)        # DCP needs a tp = 1 conversion
run(1 ${V} --converted ${WORK}/tp1 --dcp)                    # DCP needs --devices
run(1 ${V} --converted ${WORK}/tp2 --devices 2 --comm nccl)  # NCCL needs --device cuda
