#pragma once
// Errors of the toolchain. Every message names what was bad (file, tensor, field) and the
// bad value, so a user can act on it without reading code.
#include <stdexcept>
#include <string>

namespace mla {

// Base of every error the library throws on bad input or failed I/O. Tools map it to exit 1.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value or shape in user input (a checkpoint, a capture, a config, an option) is invalid.
class InputError : public Error {
 public:
  using Error::Error;
};

// A numerical verification ran and failed (tools map it to exit 2).
class VerificationError : public Error {
 public:
  using Error::Error;
};

}  // namespace mla
