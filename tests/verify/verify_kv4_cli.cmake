# verify-decode --kv fp4 | codebook on the shipped tiny model through the CPU twins: a capture and
# calibration (the fitted c and codebooks), a tp = 1 Hadamard conversion: both formats pass their
# thresholds; calib.h5's protected layers are really BF16 (their errors equal the --kv bf16 run's
# to the last digit) while the others differ; the study options (--fp4-c 0.156, --fp4-rule) run;
# refusals exit 1 with a message: no --calib, --device cuda (no 4-bit GPU backend here), a tp = 8
# slice of d_c / g = 16 (not a 4-bit width).
include(${CMAKE_CURRENT_LIST_DIR}/cli_run.cmake)
set(M ${SRC}/datasets/tiny-v2)
run(0 ${TOOLS}/mla-forward/mla-forward -q capture ${M} --out ${WORK}/cap.h5 --calib ${SRC}/docs/math.md
    --calib-seqs 10 --seq-len 64 --eval ${SRC}/docs/math.md --eval-seqs 2)
run(0 ${TOOLS}/mla-calibrate/mla-calibrate -q --model ${M} --activations ${WORK}/cap.h5 --pair-sequences 2
    --queries 4 --tp 2 -o ${WORK}/calib.h5 --json ${WORK}/calib.json)
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 1 --reparam hadamard --seed 0 -o ${WORK}/tp1 ${M})
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 8 -o ${WORK}/tp8 ${M})
set(V ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 40 --decode 12
      --sequences 2 --device cpu --converted ${WORK}/tp1)
run(0 ${V} --kv bf16 --json ${WORK}/bf16.json)
run(0 ${V} --kv fp4 --calib ${WORK}/calib.h5 --json ${WORK}/fp4.json)
run(0 ${V} --kv codebook --calib ${WORK}/calib.h5)
run(0 ${V} --kv fp4 --calib ${WORK}/calib.h5 --fp4-c 0.156 --no-protect)
run(0 ${V} --kv fp4 --calib ${WORK}/calib.h5 --fp4-rule rceil)
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
# Refusals.
run(1 ${V} --kv fp4)
run(1 ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 40 --decode 2
    --sequences 1 --device cuda --converted ${WORK}/tp1 --kv codebook --calib ${WORK}/calib.h5)
execute_process(COMMAND ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5
                --prefill 40 --decode 2 --sequences 1 --device cpu --converted ${WORK}/tp8 --kv fp4 --calib ${WORK}/calib.h5
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
string(FIND "${out}${err}" "d_c = 16" pos)
if(NOT rc EQUAL 1 OR pos EQUAL -1)
  message(FATAL_ERROR "tp 8 (d_c / g = 16) with --kv fp4: expected exit 1 naming d_c = 16, got ${rc}:\n${out}${err}")
endif()
