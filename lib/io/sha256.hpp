#pragma once
// Incremental SHA-256 (OpenSSL EVP; SHA-NI where the CPU has it), hex digest.
#include <openssl/evp.h>

#include <memory>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace mla::io {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) throw Error("OpenSSL: SHA-256 init failed");
  }
  void update(const void* data, size_t n) {
    if (n && EVP_DigestUpdate(ctx_.get(), data, n) != 1) throw Error("OpenSSL: SHA-256 update failed");
  }
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Finalises; call once.
  std::string hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    if (EVP_DigestFinal_ex(ctx_.get(), md, &len) != 1) throw Error("OpenSSL: SHA-256 final failed");
    static const char* digits = "0123456789abcdef";
    std::string out;
    for (unsigned int i = 0; i < len; ++i) {
      out.push_back(digits[md[i] >> 4]);
      out.push_back(digits[md[i] & 0xF]);
    }
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

inline std::string sha256_hex(std::string_view s) {
  Sha256 h;
  h.update(s);
  return h.hex();
}

}  // namespace mla::io
