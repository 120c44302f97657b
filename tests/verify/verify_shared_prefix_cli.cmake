# verify-decode --shared-prefix on the trained tiny-v3 through the CPU twins of the mixed
# (TyphoonMLA) path: passes within the default thresholds, exits 2 under a threshold below its own
# error (so the check can fail), and refuses what the mixed path does not run (exit 1) rather
# than ignoring it.
include(${CMAKE_CURRENT_LIST_DIR}/cli_run.cmake)
set(M ${SRC}/datasets/tiny-v3)
run(0 ${TOOLS}/mla-forward/mla-forward -q capture ${M} --out ${WORK}/cap.h5 --eval ${SRC}/docs/math.md
    --eval-seqs 4 --seq-len 48)
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 1 -o ${WORK}/tp1 ${M})
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 2 -o ${WORK}/tp2 ${M})
set(V ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 40 --decode 8
      --sequences 4 --layers 0,5 --device cpu)
run(0 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --json ${WORK}/sp.json)
file(READ ${WORK}/sp.json j)
string(JSON n LENGTH "${j}" layers)
string(JSON pass GET "${j}" pass)
string(JSON mixed GET "${j}" layers 1 mixed_vs_original rel_l2)
string(JSON kern GET "${j}" layers 1 kernel_vs_f64_path rel_l2)
if(NOT n EQUAL 2 OR NOT pass OR NOT mixed GREATER 0 OR NOT kern GREATER 0)
  message(FATAL_ERROR "sp.json: ${n} layers, pass ${pass}, mixed vs original ${mixed}, kernel vs f64 ${kern}")
endif()
run(2 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --kernel-rel-l2 1e-6)  # below the twin's bf16 error
run(0 ${V} --converted ${WORK}/tp1 --shared-prefix 40)                         # the whole prompt shared
run(1 ${V} --converted ${WORK}/tp1 --shared-prefix 41)
run(1 ${V} --converted ${WORK}/tp2 --shared-prefix 33)                         # tp = 1 conversions only
run(1 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --no-kernel)
run(1 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --kv fp8)
run(1 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --devices 2)
run(1 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --perplexity)
run(1 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --calib ${WORK}/cap.h5)
run(1 ${V} --converted ${WORK}/tp1 --shared-prefix 33 --kv4-route bf16)
