# mla-calibrate CLI round trip on the shipped tiny models: captures of a shipped text
# (docs/math.md as bytes) by `mla-forward capture`, calibration of tiny-v2 (exit 0, calib.h5 +
# JSON + report written), two captures merged, a tiny-v3 capture rejected (exit 1, message names
# the fingerprint), and `mla-convert --reparam pca --calib` accepting the calib for tiny-v2 and
# rejecting it for tiny-v3 (fingerprint mismatch).
# Inputs: -DFORWARD= -DCALIBRATE= -DCONVERT= -DSRC= -DWORK=
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})

function(run_expect rc_want)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL ${rc_want})
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "expected exit ${rc_want}, got ${rc}: ${cmd}\n${out}\n${err}")
  endif()
  set(LAST_OUTPUT "${out}${err}" PARENT_SCOPE)
endfunction()

function(expect_in text what)
  string(FIND "${text}" "${what}" pos)
  if(pos EQUAL -1)
    message(FATAL_ERROR "expected '${what}' in:\n${text}")
  endif()
endfunction()

set(TEXT ${SRC}/docs/math.md)
# 10 sequences x 64 tokens: 9 fitting sequences = 576 tokens >= 4 x d_c (d_c = 128).
foreach(m v2 v3)
  run_expect(0 ${FORWARD} capture ${SRC}/datasets/tiny-${m} --out ${WORK}/${m}.h5 --calib ${TEXT}
             --calib-seqs 10 --seq-len 64 -q)
endforeach()
run_expect(0 ${FORWARD} capture ${SRC}/datasets/tiny-v2 --out ${WORK}/v2b.h5 --calib ${SRC}/datasets/README.md
           --calib-seqs 10 --seq-len 64 -q)

# Calibrate tiny-v2 from its capture (all layers: mla-convert needs every one; fewer
# pass-2 sequences and queries keep the test fast).
run_expect(0 ${CALIBRATE} --model ${SRC}/datasets/tiny-v2 --activations ${WORK}/v2.h5
           --pair-sequences 2 --queries 4 --tp 2,4 -o ${WORK}/calib.h5 --report ${WORK}/report.md --json ${WORK}/summary.json -q)
foreach(f calib.h5 report.md summary.json)
  if(NOT EXISTS ${WORK}/${f})
    message(FATAL_ERROR "mla-calibrate exited 0 but did not write ${f}")
  endif()
endforeach()
file(READ ${WORK}/summary.json j)
string(JSON nl LENGTH "${j}" layers)
if(NOT nl EQUAL 6)
  message(FATAL_ERROR "summary.json: expected 6 layers, got ${nl}")
endif()
file(READ ${WORK}/report.md rep)
expect_in("${rep}" "layer")

# Two captures of the same model merge into one calibration.
run_expect(0 ${CALIBRATE} --model ${SRC}/datasets/tiny-v2 --activations ${WORK}/v2.h5 ${WORK}/v2b.h5
           --layers 0 --tp 2 --pair-sequences 2 --queries 4 -o ${WORK}/merged.h5 --json ${WORK}/merged.json -q)
file(READ ${WORK}/merged.json mj)
string(JSON ns LENGTH "${mj}" capture_sources)
if(NOT ns EQUAL 2)
  message(FATAL_ERROR "merged.json: expected 2 capture_sources, got ${ns}")
endif()

# A capture of the other model: exit 1, the message says what does not match.
run_expect(1 ${CALIBRATE} --model ${SRC}/datasets/tiny-v2 --activations ${WORK}/v3.h5 --layers 0
           -o ${WORK}/wrong.h5)
expect_in("${LAST_OUTPUT}" "checkpoint_fingerprint")
expect_in("${LAST_OUTPUT}" "v3.h5")
if(EXISTS ${WORK}/wrong.h5)
  message(FATAL_ERROR "a failed calibration left ${WORK}/wrong.h5 behind")
endif()

# mla-convert reads the output: accepted for tiny-v2, refused for tiny-v3.
run_expect(0 ${CONVERT} ${SRC}/datasets/tiny-v2 -o ${WORK}/conv-v2 --tp 2 --reparam pca
           --calib ${WORK}/calib.h5 -q)
if(NOT EXISTS ${WORK}/conv-v2)
  message(FATAL_ERROR "mla-convert exited 0 but wrote no ${WORK}/conv-v2")
endif()
run_expect(1 ${CONVERT} ${SRC}/datasets/tiny-v3 -o ${WORK}/conv-v3 --tp 2 --reparam pca
           --calib ${WORK}/calib.h5)
expect_in("${LAST_OUTPUT}" "fingerprint")
message(STATUS "mla-calibrate CLI round trip ok")
