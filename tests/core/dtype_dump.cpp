// Prints, one per line: decode tables of every 8-bit / 4-bit code and the encodings of the
// float32 probe values read from stdin (hex bit patterns), for check_dtypes.py.
#include <bit>
#include <cstdint>
#include <cstdio>
#include <iostream>

#include "core/dtype.hpp"

int main() {
  using namespace mla;
  for (int c = 0; c < 256; ++c) std::printf("dec e4m3 %d %a\n", c, (double)e4m3_to_float(static_cast<uint8_t>(c)));
  for (int c = 0; c < 256; ++c) std::printf("dec e5m2 %d %a\n", c, (double)e5m2_to_float(static_cast<uint8_t>(c)));
  for (int c = 0; c < 256; ++c) std::printf("dec e8m0 %d %a\n", c, (double)ue8m0_to_float(static_cast<uint8_t>(c)));
  for (int c = 0; c < 16; ++c) std::printf("dec e2m1 %d %a\n", c, (double)e2m1_to_float(static_cast<uint8_t>(c)));
  for (int c = 0; c < 65536; c += 7) std::printf("dec bf16 %d %a\n", c, (double)bf16_to_float(static_cast<uint16_t>(c)));
  for (int c = 0; c < 65536; c += 7) std::printf("dec f16 %d %a\n", c, (double)f16_to_float(static_cast<uint16_t>(c)));
  uint32_t bits;
  while (std::cin >> std::hex >> bits) {
    const float f = std::bit_cast<float>(bits);
    std::printf("enc %08x %u %u %u %u %u\n", bits, float_to_bf16(f), float_to_f16(f), float_to_e4m3(f),
                float_to_e5m2(f), float_to_e2m1(f));
  }
  return 0;
}
