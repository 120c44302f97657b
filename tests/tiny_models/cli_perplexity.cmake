# mla-forward perplexity on the tiny-v3 model. Held-out corpus bytes are not shipped (the
# corpus is rebuilt, not committed), so it reads English docs text that is shipped:
# datasets/README.md (markdown, unlike the training rst, hence ~3.4 bits/byte); a trained model
# must land well below 8 bits per byte (3.40 measured); a bad path must exit 1 with the path in the message.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
execute_process(COMMAND ${TOOL} perplexity ${SRC}/datasets/tiny-v3 --text ${SRC}/datasets/README.md
                        --seq-len 128 --max-windows 4 --threads 2 --json ${WORK}/ppl.json -q
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "perplexity failed (${rc}): ${out} ${err}")
endif()
file(READ ${WORK}/ppl.json j)
string(JSON bpb GET "${j}" bits_per_byte)
string(JSON windows GET "${j}" windows)
if(NOT windows EQUAL 4)
  message(FATAL_ERROR "expected 4 windows, got ${windows}")
endif()
if(bpb GREATER_EQUAL 5.0 OR bpb LESS_EQUAL 0.05)
  message(FATAL_ERROR "bits per byte ${bpb} outside (0.05, 5) for a trained byte model")
endif()
execute_process(COMMAND ${TOOL} perplexity ${SRC}/datasets/tiny-v3 --text ${WORK}/missing.bin
                RESULT_VARIABLE rc2 OUTPUT_VARIABLE out2 ERROR_VARIABLE err2)
if(NOT rc2 EQUAL 1)
  message(FATAL_ERROR "missing text file: expected exit 1, got ${rc2}")
endif()
string(FIND "${out2}${err2}" "missing.bin" pos)
if(pos EQUAL -1)
  message(FATAL_ERROR "error message does not name the file: ${out2}${err2}")
endif()
message(STATUS "mla-forward perplexity: ${bpb} bits/byte")
