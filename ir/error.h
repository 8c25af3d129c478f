// Kiln's exception hierarchy.
//
//   KILN_CHECK(a.ndim() == 2, ShapeError, "dot: expected a matrix, got {}", a.shape());
//
// User errors derive from kiln::Error and say what was expected, what was
// found, and where. Internal invariants use KILN_ASSERT, which throws
// InternalError ("internal error: ...") and is never caused by user input.
// Errors raised inside engine operations travel with the variables the
// operation was writing; `add_context` prefixes where it happened (the op
// name) without changing the exception's type.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace kiln {

class Error : public std::exception {
 public:
  explicit Error(std::string message) : message_(std::move(message)) {}
  const char* what() const noexcept override { return message_.c_str(); }
  const std::string& message() const { return message_; }
  // Prefixes `context` ("add (cpu(0))") to the message: "add (cpu(0)): ...".
  void add_context(const std::string& context) { message_ = context + ": " + message_; }

 private:
  std::string message_;
};

#define KILN_DEFINE_ERROR(Name)                  \
  class Name : public Error {                    \
   public:                                       \
    using Error::Error;                          \
  }

KILN_DEFINE_ERROR(ShapeError);     // shapes that do not fit an op
KILN_DEFINE_ERROR(TypeError);      // dtypes that do not fit an op
KILN_DEFINE_ERROR(ValueError);     // bad attribute or argument values
KILN_DEFINE_ERROR(IndexError);     // axis or index out of range
KILN_DEFINE_ERROR(DeviceError);    // unknown device, or arrays on different devices
KILN_DEFINE_ERROR(IOError);        // files: missing, truncated, corrupt
KILN_DEFINE_ERROR(OutOfMemory);    // allocation failed after flushing caches
KILN_DEFINE_ERROR(InternalError);  // a broken invariant: a bug in Kiln
KILN_DEFINE_ERROR(NotSupported);   // valid request this build cannot serve

#undef KILN_DEFINE_ERROR

// Throws `ErrorType` with a fmt-formatted message when `cond` is false.
#define KILN_CHECK(cond, ErrorType, ...)                       \
  do {                                                         \
    if (!(cond)) [[unlikely]]                                  \
      throw ::kiln::ErrorType(::fmt::format(__VA_ARGS__));     \
  } while (0)

#define KILN_ASSERT(cond)                                                             \
  do {                                                                                \
    if (!(cond)) [[unlikely]]                                                         \
      throw ::kiln::InternalError(::fmt::format("internal error: {} failed at {}:{}", \
                                                #cond, __FILE__, __LINE__));          \
  } while (0)

}  // namespace kiln
