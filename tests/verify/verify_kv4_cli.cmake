# verify-decode --kv fp4 | codebook on the shipped tiny model through the CPU twins: a capture and
# calibration (the fitted c and codebooks), a tp = 1 Hadamard conversion: both formats pass their
# thresholds; calib.h5's protected layers are really BF16 (their errors equal the --kv bf16 run's
# to the last digit) while the others differ; the study options (--fp4-c 0.156, --fp4-rule) run;
# refusals exit 1 with a message: no --calib, --calib with --kv bf16, a tp = 8
# slice of d_c / g = 16 (not a 4-bit width). --kv4-route fp8 (the FP8-tensor-core route's twin)
# passes its thresholds, keeps the protected layers' BF16 errors and changes the others; it is
# refused for the codebook, for --kv bf16 and for a slice it has no kernel for (d_c / g = 64). A --kv fp4 conversion needs no --calib: verify-decode
# reads the recorded parameters and gets the same errors; --kv codebook on it is refused; with
# --devices 2 the ranks (each its own FP4 cache) equal the sequential decode bit for bit.
include(${CMAKE_CURRENT_LIST_DIR}/cli_run.cmake)
set(M ${SRC}/datasets/tiny-v2)
run(0 ${TOOLS}/mla-forward/mla-forward -q capture ${M} --out ${WORK}/cap.h5 --calib ${SRC}/docs/math.md
    --calib-seqs 10 --seq-len 64 --eval ${SRC}/docs/math.md --eval-seqs 2)
run(0 ${TOOLS}/mla-calibrate/mla-calibrate -q --model ${M} --activations ${WORK}/cap.h5 --pair-sequences 2
    --queries 4 --tp 2,8 -o ${WORK}/calib.h5 --json ${WORK}/calib.json)
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 1 --reparam hadamard --seed 0 -o ${WORK}/tp1 ${M})
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 8 -o ${WORK}/tp8 ${M})
set(V ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 40 --decode 12
      --sequences 2 --device cpu)
set(T1 --converted ${WORK}/tp1)
run(0 ${V} ${T1} --kv bf16 --json ${WORK}/bf16.json)
run(0 ${V} ${T1} --kv fp4 --calib ${WORK}/calib.h5 --json ${WORK}/fp4.json)
run(0 ${V} ${T1} --kv codebook --calib ${WORK}/calib.h5)
run(0 ${V} ${T1} --kv fp4 --calib ${WORK}/calib.h5 --fp4-c 0.156 --no-protect --json ${WORK}/c0156.json)
run(0 ${V} ${T1} --kv fp4 --calib ${WORK}/calib.h5 --no-protect --json ${WORK}/fitted.json)
# Through the real decode path, layer by layer: the constant fitted with the power-of-two rounding
# in the loop (mla-calibrate's c_rounded, ~0.19) beats UltraQuant's 0.156 (docs/benchmarks.md).
expect_layers(${WORK}/fitted.json LESS ${WORK}/c0156.json kernel_vs_f64_path rel_l2)
run(0 ${V} ${T1} --kv fp4 --calib ${WORK}/calib.h5 --fp4-rule rceil)
# Protected layers (calib.h5 protect_bf16) decode from a BF16 cache: identical errors; others not.
file(READ ${WORK}/bf16.json jb)
file(READ ${WORK}/fp4.json jf)
file(READ ${WORK}/calib.json jc)
string(JSON n LENGTH "${jf}" layers)
math(EXPR last "${n} - 1")
set(protected 0)
foreach(i RANGE ${last})
  string(JSON eb GET "${jb}" layers ${i} converted_vs_original rel_l2)
  string(JSON ef GET "${jf}" layers ${i} converted_vs_original rel_l2)
  string(JSON prot GET "${jc}" layers ${i} protect_bf16)
  if(prot)
    math(EXPR protected "${protected} + 1")
    if(NOT eb STREQUAL ef)
      message(FATAL_ERROR "layer ${i} is protected but its fp4 error ${ef} differs from bf16 ${eb}")
    endif()
  elseif(eb STREQUAL ef)
    message(FATAL_ERROR "layer ${i} is not protected but its fp4 error equals bf16's (${eb}): not quantised?")
  endif()
  message(STATUS "layer ${i}: bf16 ${eb}, fp4 ${ef}")
endforeach()
if(protected EQUAL 0)
  message(FATAL_ERROR "calib.h5 protects no layer: the protected-layer check checked nothing")
endif()
# The fp8 route: protected layers are the same BF16 cache (the bf16 route's errors to the last
# digit); the others go through fp4_cache_to_fp8 and the FP8 decode twin (different errors).
run(0 ${V} ${T1} --kv fp4 --calib ${WORK}/calib.h5 --kv4-route fp8 --json ${WORK}/fp4-fp8route.json)
file(READ ${WORK}/fp4-fp8route.json jr)
string(JSON backend GET "${jr}" backend)
string(JSON route GET "${jr}" kv4 route)
if(NOT backend MATCHES "fp8 route" OR NOT route STREQUAL "fp8")
  message(FATAL_ERROR "--kv4-route fp8: backend '${backend}', recorded route '${route}'")
endif()
foreach(i RANGE ${last})
  string(JSON ef GET "${jf}" layers ${i} converted_vs_original rel_l2)
  string(JSON er GET "${jr}" layers ${i} converted_vs_original rel_l2)
  string(JSON prot GET "${jc}" layers ${i} protect_bf16)
  if(prot AND NOT ef STREQUAL er)
    message(FATAL_ERROR "layer ${i} is protected but its fp8-route error ${er} differs from the bf16 route's ${ef}")
  elseif(NOT prot AND ef STREQUAL er)
    message(FATAL_ERROR "layer ${i}: the fp8 route's error equals the bf16 route's (${ef}): did it run?")
  endif()
  message(STATUS "layer ${i}: fp4 bf16 route ${ef}, fp8 route ${er}")
endforeach()
expect_refusal("codebook cache has no FP8 route" ${V} ${T1} --kv codebook --calib ${WORK}/calib.h5 --kv4-route fp8)
expect_refusal("--kv4-route fp8 is read with --kv fp4 only" ${V} ${T1} --kv bf16 --kv4-route fp8)
# Refusals.
run(1 ${V} ${T1} --kv fp4)
run(1 ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 40 --decode 2
    --sequences 1 --device cpu --converted ${WORK}/tp1 --kv bf16 --calib ${WORK}/calib.h5)
execute_process(COMMAND ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5
                --prefill 40 --decode 2 --sequences 1 --device cpu --converted ${WORK}/tp8 --kv fp4 --calib ${WORK}/calib.h5
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}${err}" "d_c = 16" pos)
if(NOT rc EQUAL 1 OR pos EQUAL -1)
  message(FATAL_ERROR "tp 8 (d_c / g = 16) with --kv fp4: expected exit 1 naming d_c = 16, got ${rc}:\n${out}${err}")
endif()
# mla-convert --kv fp4 on TPLA ranks (tp 2: the PCA basis, then a Hadamard inside each 64-wide
# slice, folded into the weights): each rank's config.json records the format, the rotation and
# the per-layer c; hf_quant_config.json says MXFP4; verify-decode --kv fp4 passes on it.
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 2 --reparam pca --calib ${WORK}/calib.h5 --kv fp4 -o ${WORK}/tp2fp4 ${M})
file(READ ${WORK}/tp2fp4/rank-01-of-02/config.json rc)
string(JSON fmt GET "${rc}" kv_cache format)
string(JSON kind GET "${rc}" kv_cache rotation kind)
string(JSON bw GET "${rc}" kv_cache rotation block_width)
string(JSON c0 GET "${rc}" kv_cache layers 2 c)
string(JSON bpt GET "${rc}" kv_cache bytes_per_token_per_layer)
file(READ ${WORK}/tp2fp4/rank-01-of-02/hf_quant_config.json hq)
string(JSON algo GET "${hq}" quantization kv_cache_quant_algo)
if(NOT fmt STREQUAL "fp4_e2m1_ue8m0_g32" OR NOT kind STREQUAL "walsh_hadamard_per_slice" OR NOT bw EQUAL 64
   OR NOT bpt EQUAL 98 OR NOT algo STREQUAL "MXFP4" OR c0 LESS_EQUAL 0)
  message(FATAL_ERROR "tp2 fp4 metadata: format ${fmt}, rotation ${kind} width ${bw}, bytes ${bpt}, algo ${algo}, c ${c0}")
endif()
run(0 ${V} --converted ${WORK}/tp2fp4 --kv fp4 --calib ${WORK}/calib.h5 --max-rel-l2 1 --max-cos-diff 1
    --json ${WORK}/tp2-calib.json)
# Without --calib the parameters recorded in the conversion are used: the same cache, the same errors.
run(0 ${V} --converted ${WORK}/tp2fp4 --kv fp4 --max-rel-l2 1 --max-cos-diff 1 --json ${WORK}/tp2-recorded.json)
expect_layers(${WORK}/tp2-recorded.json STREQUAL ${WORK}/tp2-calib.json converted_vs_original rel_l2)
# --devices 2: each rank thread holds its slice in its own FP4 cache (the FP4 twin backend);
# two ranks sum a + b either way, so the ranks equal the sequential decode bit for bit.
run(0 ${V} --converted ${WORK}/tp2fp4 --kv fp4 --max-rel-l2 1 --max-cos-diff 1 --devices 2 --json ${WORK}/tp2-devices.json)
expect_layers(${WORK}/tp2-devices.json STREQUAL ${WORK}/tp2-recorded.json kernel_vs_f64_path rel_l2)
file(READ ${WORK}/tp2-devices.json jd)
foreach(i RANGE ${last})
  string(JSON dmax GET "${jd}" layers ${i} devices_vs_sequential max_abs)
  if(NOT dmax EQUAL 0)
    message(FATAL_ERROR "layer ${i}: fp4 ranks on 2 threads differ from the sequential decode by max_abs ${dmax}")
  endif()
endforeach()
run(1 ${V} --converted ${WORK}/tp2fp4 --kv codebook)
# The fp8 route has no kernel for the tp = 2 slice (d_c / g = 64): refused naming the shape.
expect_refusal("d_c = 64, d_r = 32" ${V} --converted ${WORK}/tp2fp4 --kv fp4 --kv4-route fp8)
run(1 ${TOOLS}/mla-convert/mla-convert -q --tp 2 --kv codebook -o ${WORK}/nocalib ${M})
# A slice no 4-bit layout stores (tp 8: d_c / g = 16) is refused while planning, naming the width.
execute_process(COMMAND ${TOOLS}/mla-convert/mla-convert -q --tp 8 --calib ${WORK}/calib.h5 --kv fp4 -o ${WORK}/tp8fp4 ${M}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}${err}" "d_c = 16" pos)
if(NOT rc EQUAL 1 OR pos EQUAL -1 OR EXISTS ${WORK}/tp8fp4)
  message(FATAL_ERROR "mla-convert --tp 8 --kv fp4: expected exit 1 naming d_c = 16 and no output, got ${rc}:\n${out}${err}")
endif()
