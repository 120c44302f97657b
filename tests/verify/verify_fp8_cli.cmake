# verify-decode --kv on the shipped tiny model: the FP8 cache through the twins passes its
# thresholds (exact tp=1 conversion and a tp=2 Hadamard slice with relaxed conversion bounds),
# and the SnapMLA study configurations order as the paper's: RoPE-unaware per-token (A) has a
# larger error than RoPE-aware per-token in every layer.
include(${CMAKE_CURRENT_LIST_DIR}/cli_run.cmake)
set(M ${SRC}/datasets/tiny-v2)
run(0 ${TOOLS}/mla-forward/mla-forward -q capture ${M} --out ${WORK}/cap.h5 --eval ${SRC}/docs/math.md
    --eval-seqs 2 --seq-len 56)
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 1 -o ${WORK}/tp1 ${M})
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 2 --reparam hadamard --seed 5 --kv-cache fp8 -o ${WORK}/tp2 ${M})
set(V ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 40 --decode 12
      --sequences 2 --device cpu)
run(0 ${V} --converted ${WORK}/tp1 --kv fp8)
run(0 ${V} --converted ${WORK}/tp2 --kv fp8 --max-rel-l2 1 --max-cos-diff 1)
run(0 ${V} --converted ${WORK}/tp1 --kv fp8-A --json ${WORK}/a.json --max-rel-l2 1 --max-cos-diff 1 --kernel-rel-l2 1)
run(0 ${V} --converted ${WORK}/tp1 --kv fp8-rope-aware --json ${WORK}/r.json)
# The study configurations run on the CPU only: a clear error (exit 1) on cuda.
run(1 ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --converted ${WORK}/tp1
    --kv fp8-A --device cuda)
# Every layer: config A's error above RoPE-aware per-token's.
expect_layers(${WORK}/a.json GREATER ${WORK}/r.json converted_vs_original rel_l2)
