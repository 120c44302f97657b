// The decode twins' split walk and merge (see the header).
#include "quant/decode_split_walk.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "quant/decode_twin_bf16.hpp"

namespace mla::quant {

void run_decode_twin_walk(const TwinWalk& w, const std::function<TwinSplit(int, int, int)>& run_split) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  const long long capacity = static_cast<long long>(w.max_pages) * w.page_size;
  for (int b = 0; b < w.batch; ++b)
    if (w.seqlens[b] < 0 || static_cast<long long>(w.seqlens[b]) > capacity)
      throw InputError(std::string(w.what) + ": seqlens[" + std::to_string(b) + "] = " + std::to_string(w.seqlens[b]) +
                       " is outside [0, max_pages * page_size = " + std::to_string(capacity) + "]");
  std::vector<int32_t> info(static_cast<size_t>(w.parts) * kPartInfoInts), offsets(w.batch + 1);
  compute_decode_schedule(w.seqlens, w.batch, w.tile_tokens, w.parts, info.data(), offsets.data());

  // Partials of requests with several splits, in split order (what the GPU workspace holds).
  std::vector<TwinSplit> partials(offsets[w.batch]);
  auto write_final = [&](int b, int row, const float* o, float lse) {
    uint16_t* dst = w.out + (static_cast<size_t>(b) * w.rows + row) * w.d_c;
    for (int c = 0; c < w.d_c; ++c) dst[c] = float_to_bf16(o[c]);
    w.lse[static_cast<size_t>(b) * w.rows + row] = lse;
  };
  for (int part = 0; part < w.parts; ++part) {
    const int32_t* in = info.data() + part * kPartInfoInts;
    int b = in[0], t = in[1], split = in[4];
    while (b < in[2] || (b == in[2] && t < in[3])) {
      const int stop = (b == in[2]) ? in[3] : decode_tiles(w.seqlens[b], w.tile_tokens);
      TwinSplit r = run_split(b, t, stop);
      if (offsets[b + 1] - offsets[b] == 1) {
        for (int row = 0; row < w.rows; ++row)
          write_final(b, row, r.o.data() + static_cast<size_t>(row) * w.d_c, r.lse[row]);
      } else {
        partials[split] = std::move(r);
      }
      ++split;
      ++b;
      t = 0;
    }
  }
  // Combine: merge the splits of each request by their natural-log LSE, in fp32.
  std::vector<float> o(w.d_c);
  for (int b = 0; b < w.batch; ++b) {
    const int s0 = offsets[b], s1 = offsets[b + 1];
    if (s1 - s0 <= 1) continue;
    for (int row = 0; row < w.rows; ++row) {
      float m = kNegInf;
      for (int s = s0; s < s1; ++s) m = std::max(m, partials[s].lse[row]);
      std::fill(o.begin(), o.end(), 0.f);
      if (m == kNegInf) {
        write_final(b, row, o.data(), kNegInf);
        continue;
      }
      float sum = 0.f;
      for (int s = s0; s < s1; ++s) sum += expf(partials[s].lse[row] - m);
      const float lse = m + logf(sum);
      for (int s = s0; s < s1; ++s) {
        const float wgt = expf(partials[s].lse[row] - lse);
        const float* src = partials[s].o.data() + static_cast<size_t>(row) * w.d_c;
        for (int c = 0; c < w.d_c; ++c) o[c] += wgt * src[c];
      }
      write_final(b, row, o.data(), lse);
    }
  }
}

}  // namespace mla::quant
