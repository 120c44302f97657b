# Options that only matter with another option or in another mode are refused (exit 1, one line
# naming the option and what it needs) by mla-convert, mla-inspect, mla-forward capture and
# mla-calibrate, instead of being silently ignored; the valid combinations next to them still run.
# Inputs: -DCONVERT= -DINSPECT= -DFORWARD= -DCALIBRATE= -DSRC= -DWORK=
include(${CMAKE_CURRENT_LIST_DIR}/../verify/cli_run.cmake)  # a fresh ${WORK}, run(), expect_refusal()

set(M ${SRC}/datasets/tiny-v3)
set(TEXT ${SRC}/docs/math.md)

# mla-convert: --kv-rotation needs a 4-bit --kv; --seed a Hadamard rotation; --list-tensors a printed plan.
set(C ${CONVERT} --tp 2 -o ${WORK}/conv ${M})
expect_refusal("--kv-rotation is read with --kv fp4 or codebook only" ${C} --kv-rotation none)
expect_refusal("--kv-rotation is read with --kv fp4 or codebook only" ${C} --kv fp8 --kv-rotation hadamard)
expect_refusal("--seed is read with --reparam hadamard" ${C} --seed 3)
expect_refusal("--seed is read with --reparam hadamard" ${C} --seed 3 --reparam pca --calib ${WORK}/calib.h5)
expect_refusal("--seed is read with --reparam hadamard" ${C} --seed 3 --kv fp4 --kv-rotation none --calib ${WORK}/calib.h5)
expect_refusal("--list-tensors is read with --dry-run" ${C} --list-tensors -q)
run(0 ${C} --dry-run -q --list-tensors --reparam hadamard --seed 3)
run(0 ${C} --dry-run -q --reparam hadamard-block --seed 3)
if(EXISTS ${WORK}/conv)
  message(FATAL_ERROR "a refused or dry-run conversion wrote ${WORK}/conv")
endif()

# mla-inspect: the cost model's options need --prefix; --scan/--fingerprint/--threads a checkpoint report.
foreach(opt "--batch;4" "--own;8" "--sq;2" "--shape;deepseek-v3" "--gemm-tflops;500" "--bandwidth-gbs;3000")
  list(GET opt 0 name)
  expect_refusal("${name} is read with --prefix only" ${INSPECT} ${M} ${opt})
endforeach()
expect_refusal("--threads is read with --scan only" ${INSPECT} ${M} --threads 2)
foreach(opt "--scan" "--fingerprint" "--threads;2")
  list(GET opt 0 name)
  expect_refusal("${name} is read without --prefix only" ${INSPECT} --prefix 1024 ${opt})
endforeach()
expect_refusal("--shape is read with --prefix without a checkpoint only" ${INSPECT} ${M} --prefix 1024 --shape deepseek-v3)
run(0 ${INSPECT} ${M} --scan --threads 2 -q)
run(0 ${INSPECT} --prefix 1024 --shape deepseek-v3 --batch 8 --own 16 --sq 2 --gemm-tflops 500 -q)
run(0 ${INSPECT} ${M} --prefix 1024 --batch 8 -q)

# mla-forward capture: each file and length needs the sequence count that reads it.
set(F ${FORWARD} capture ${M} --out ${WORK}/cap.h5)
expect_refusal("--calib is read with --calib-seqs N only" ${F} --calib ${TEXT} --eval ${TEXT} --eval-seqs 1)
expect_refusal("--eval is read with --eval-seqs N or --ref-seqs N only" ${F} --eval ${TEXT} --calib ${TEXT} --calib-seqs 1)
expect_refusal("--seq-len is read with --calib-seqs N or --eval-seqs N only" ${F} --eval ${TEXT} --ref-seqs 1 --seq-len 40)
expect_refusal("--ref-len is read with --ref-seqs N only" ${F} --eval ${TEXT} --eval-seqs 1 --ref-len 16)
expect_refusal("--calib-seqs must be >= 0" ${F} --eval ${TEXT} --eval-seqs 1 --calib ${TEXT} --calib-seqs -2)
run(0 ${F} --eval ${TEXT} --eval-seqs 1 --seq-len 24 --ref-seqs 1 --ref-len 8 -q)

# mla-calibrate: calibration options are not read with --make-synthetic-capture, and the
# synthetic-capture options are read with it only; --exact-moment is --moment f64.
set(S ${CALIBRATE} --config ${M}/config.json --make-synthetic-capture ${WORK}/synth.h5)
foreach(opt "--tp;2" "-o;${WORK}/c.h5" "--activations;${WORK}/cap.h5" "--moment;f32" "--mu-per-head" "--json;${WORK}/s.json")
  expect_refusal("is read when calibrating only, not with --make-synthetic-capture" ${S} ${opt})
endforeach()
set(K ${CALIBRATE} --config ${M}/config.json --activations ${WORK}/cap.h5 -o ${WORK}/calib.h5)
foreach(opt "--synthetic-sequences;2" "--synthetic-seq-len;8" "--synthetic-layers;2" "--synthetic-hidden"
            "--capture-dtype;bf16" "--synthetic-channel-decay;0.9")
  list(GET opt 0 name)
  expect_refusal("${name} is read with --make-synthetic-capture only" ${K} ${opt})
endforeach()
expect_refusal("--exact-moment is --moment f64" ${K} --moment f32 --exact-moment)
run(0 ${S} --synthetic-sequences 2 --synthetic-seq-len 8 --synthetic-layers 1 --capture-dtype bf16
         --synthetic-channel-decay 0.9 -q)
if(EXISTS ${WORK}/calib.h5 OR EXISTS ${WORK}/c.h5)
  message(FATAL_ERROR "a refused calibration wrote a calib.h5")
endif()
message(STATUS "refused options ok")
