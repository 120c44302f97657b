#pragma once
// What the C entry points (decode_capi.cpp, fp8_capi.cpp, kv4_capi.cpp) share: the error text
// handed back through (err, err_len), and the decode and append parameter blocks built from the C
// arguments (quant::Bf16DecodeParams and quant::Fp8DecodeParams name their shape, paging and
// split fields alike, as Fp8AppendParams and Kv4AppendParams do theirs). mla-bench's --kv mode
// (kv_bench.cu) builds its blocks with the same helpers. Internal linkage: each shared library compiles this once and exports only its
// extern "C" names.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "kernels/fp8_decode.hpp"
#include "quant/decode_twin_bf16.hpp"

namespace mla::capi {
namespace {

void set_error(char* err, size_t err_len, const char* what) {
  if (err != nullptr && err_len > 0) std::snprintf(err, err_len, "%s", what);
}

// Runs f: 0 on success, else 1 with the exception's message in err.
template <typename F>
int report_errors(char* err, size_t err_len, F&& f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    set_error(err, err_len, e.what());
    return 1;
  }
}

// A timeline reader's answer in a build without the events.
inline int timeline_missing(char* err, size_t err_len) {
  set_error(err, err_len, "this library was built without MLA_TIMELINE (cmake -DMLA_TIMELINE=ON)");
  return 1;
}

// The shape, the page table, lengths, outputs, paging and scale of one decode call; the query and
// cache pointers (their types differ by format) are the caller's.
template <typename Params>
Params decode_params(const int32_t* page_table, const int32_t* seqlens, void* out, float* lse, int batch, int s_q,
                     int heads, int d_c, int d_r, int num_pages, int page_size, int max_pages, float scale) {
  Params p;
  p.page_table = page_table;
  p.seqlens = seqlens;
  p.out = static_cast<uint16_t*>(out);
  p.lse = lse;
  quant::set_decode_shape(p, batch, s_q, heads, d_c, d_r, num_pages, page_size, max_pages, scale);
  return p;
}

// An append of n_new BF16 rows per request at their positions (kernels::Fp8AppendParams and
// Kv4AppendParams name these fields alike); the format's own fields are the caller's.
template <typename Params>
Params append_params(const void* kv_new, const int32_t* positions, const int32_t* page_table, void* cache, int batch,
                     int n_new, int d_c, int d_r, int max_pages, int num_pages, int page_size) {
  Params p;
  p.kv_new = static_cast<const uint16_t*>(kv_new);
  p.positions = positions;
  p.page_table = page_table;
  p.cache = static_cast<uint8_t*>(cache);
  p.batch = batch;
  p.n_new = n_new;
  p.d_c = d_c;
  p.d_r = d_r;
  p.max_pages = max_pages;
  p.num_pages = num_pages;
  p.page_size = page_size;
  return p;
}

// The shape alone (the parts and workspace queries): every other field as Params defaults it.
template <typename Params>
Params decode_shape(int batch, int s_q, int heads, int d_c, int d_r) {
  return decode_params<Params>(nullptr, nullptr, nullptr, nullptr, batch, s_q, heads, d_c, d_r, 0, 0, 0, 0.f);
}

// The split-KV parts and the workspace sized for them (the *_parts entry points).
template <typename Params>
void set_split(Params& p, int num_parts, void* workspace, size_t workspace_bytes) {
  p.num_parts = num_parts;
  p.workspace = workspace;
  p.workspace_bytes = workspace_bytes;
}

// The FP8 entry points' `mode`: 0 a decode that schedules itself; 1 kernels::fp8_decode_plan only
// (once per step, untimed, as FlashMLA's metadata); 2 a planned decode (p.planned). Returns true
// when the call is done (the plan); throws mla::InputError on another mode. A template so that
// only the libraries calling it need the FP8 kernels.
template <typename Params>
bool plan_or_mark(Params& p, int mode, cudaStream_t stream) {
  if (mode < 0 || mode > 2) throw InputError("capi: mode = " + std::to_string(mode) + " (0, 1 or 2)");
  if (mode == 1) {
    kernels::fp8_decode_plan(p, stream);
    return true;
  }
  p.planned = mode == 2;
  return false;
}

}  // namespace
}  // namespace mla::capi

// The body of a kernel's timeline reader (kernels/timeline.cuh), an extern "C" entry point with
// (host, stream, err, err_len) in scope: host == nullptr clears the events, else copies the
// timeline::kWarps x timeline::kEvents words out. READ is the kernel file's reader
// (kernels/decode_launch.hpp), declared only in -DMLA_TIMELINE=ON builds; without it, an error.
#ifdef MLA_TIMELINE
#define MLA_CAPI_READ_TIMELINE(READ) \
  ::mla::capi::report_errors(err, err_len, [&] { READ(static_cast<uint64_t*>(host), static_cast<cudaStream_t>(stream)); })
#else
#define MLA_CAPI_READ_TIMELINE(READ) ((void)host, (void)stream, ::mla::capi::timeline_missing(err, err_len))
#endif
