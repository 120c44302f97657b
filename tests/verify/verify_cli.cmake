# verify-decode CLI round trip: capture (mla-forward), convert (tp=1 identity, tp=2 g=2 Hadamard),
# verify: exit 0 for the exact conversion, 2 for latent slicing at default thresholds.
include(${CMAKE_CURRENT_LIST_DIR}/cli_run.cmake)
set(M ${SRC}/datasets/tiny-v2)
# Any English bytes will do as held-out text for the check; docs/math.md ships with the repo.
run(0 ${TOOLS}/mla-forward/mla-forward -q capture ${M} --out ${WORK}/cap.h5 --eval ${SRC}/docs/math.md
    --eval-seqs 2 --seq-len 40)
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 1 -o ${WORK}/tp1 ${M})
run(0 ${TOOLS}/mla-convert/mla-convert -q --tp 2 --reparam hadamard --seed 5 -o ${WORK}/tp2 ${M})
set(V ${TOOLS}/verify-decode/verify-decode -q --original ${M} --activations ${WORK}/cap.h5 --prefill 24 --decode 8
      --sequences 2 --layers 0,5 --device cpu)
run(0 ${V} --converted ${WORK}/tp1 --json ${WORK}/tp1.json)
run(2 ${V} --converted ${WORK}/tp2)
run(0 ${V} --converted ${WORK}/tp2 --max-rel-l2 1 --max-cos-diff 1)
if(NOT EXISTS ${WORK}/tp1.json)
  message(FATAL_ERROR "--json file not written")
endif()
file(READ ${WORK}/tp1.json j)
string(JSON pass GET "${j}" pass)
if(NOT pass)
  message(FATAL_ERROR "tp1.json says pass=${pass}")
endif()
# End to end: the paired interval is written to the JSON, and --max-loss-increase sets the exit
# code (a latent-sliced conversion cannot show an increase of at most 0 bits; 100 bits it can).
run(2 ${V} --converted ${WORK}/tp2 --max-rel-l2 1 --max-cos-diff 1 --perplexity --max-loss-increase 0)
run(0 ${V} --converted ${WORK}/tp2 --max-rel-l2 1 --max-cos-diff 1 --perplexity --max-loss-increase 100
      --json ${WORK}/e2e.json)
file(READ ${WORK}/e2e.json j)
string(JSON lo GET "${j}" perplexity paired interval lo)
string(JSON hi GET "${j}" perplexity paired interval hi)
string(JSON agree GET "${j}" perplexity paired top1_agreement)
if(NOT lo LESS_EQUAL hi OR agree GREATER 1)
  message(FATAL_ERROR "e2e.json: interval [${lo}, ${hi}], top-1 agreement ${agree}")
endif()
run(1 ${V} --converted ${WORK}/tp2 --perplexity --max-loss-increase abc)
# Options that qualify another are refused without it (they would otherwise be ignored).
foreach(opt "--fp4-c;0.2" "--fp4-rule;rceil" "--no-protect" "--comm;threads" "--perplexity-windows;2"
            "--perplexity-path;kernel" "--confidence;0.9" "--threads;2" "--max-loss-increase;0.1")
  run(1 ${V} --converted ${WORK}/tp1 ${opt})
endforeach()
run(1 ${V} --converted ${WORK}/tp1 --kv fp8 --fp4-c 0.2)
