# verify-decode --no-kernel on a tp 8 conversion of the trained tiny-v3 (d_c 128 -> 16-wide slices,
# which no decode kernel or twin supports): without the flag the run stops with the kernel's
# error; with it the per-layer figures are the float64 path's (kernel column 0) and equal, layer
# by layer, the float64 path of the normal run on a conversion the kernels support (tp 4), so the
# flag changes what runs, not what is computed. Bad combinations exit 1.
include(${CMAKE_CURRENT_LIST_DIR}/cli_run.cmake)
set(M ${SRC}/datasets/tiny-v3)
run(0 ${TOOLS}/mla-forward/mla-forward -q capture ${M} --out ${WORK}/cap.h5 --eval ${SRC}/docs/math.md
    --eval-seqs 2 --seq-len 40)
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 8 -o ${WORK}/tp8 ${M})
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 4 -o ${WORK}/tp4 ${M})
set(V ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 24 --decode 8
      --sequences 2 --layers 0,3 --device cpu --max-rel-l2 1 --max-cos-diff 1)
run(1 ${V} --converted ${WORK}/tp8)                                    # d_c = 16: no kernel
run(0 ${V} --converted ${WORK}/tp8 --no-kernel --json ${WORK}/tp8.json)
run(0 ${V} --converted ${WORK}/tp4 --json ${WORK}/tp4.json)
run(0 ${V} --converted ${WORK}/tp4 --no-kernel --json ${WORK}/tp4-nk.json)
file(READ ${WORK}/tp8.json j8)
string(JSON backend GET "${j8}" backend)
string(JSON k8 GET "${j8}" layers 1 kernel_vs_f64_path rel_l2)
string(JSON c8 GET "${j8}" layers 1 converted_vs_original rel_l2)
string(JSON f8 GET "${j8}" layers 1 f64_path_vs_original rel_l2)
if(NOT backend MATCHES "^none" OR NOT k8 EQUAL 0 OR NOT c8 EQUAL f8 OR NOT c8 GREATER 0)
  message(FATAL_ERROR "tp8.json: backend '${backend}', kernel vs f64 ${k8}, converted ${c8}, f64 path ${f8}")
endif()
expect_layers(${WORK}/tp4.json EQUAL ${WORK}/tp4-nk.json f64_path_vs_original rel_l2)
run(1 ${V} --converted ${WORK}/tp8 --no-kernel --kv fp8)
run(1 ${V} --converted ${WORK}/tp8 --no-kernel --devices 8)
run(1 ${V} --converted ${WORK}/tp8 --no-kernel --perplexity --perplexity-path kernel)
