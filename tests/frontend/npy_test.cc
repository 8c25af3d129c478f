// .npy files: round trips, NumPy's own bytes, and bounds-checked errors.
#include <gtest/gtest.h>

#include "frontend/nd.h"
#include "frontend/npy.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

using test::error_of;

TEST(Npy, RoundTripsEveryShapeAndDtype) {
  for (DType t : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUint8}) {
    for (Shape s : {Shape{}, Shape{5}, Shape{2, 3}, Shape{1, 3, 4, 2}, Shape{0, 3}}) {
      NDArray a = nd::arange(static_cast<double>(s.size())).astype(t).reshape(s.to_vector());
      std::string bytes = npy::serialize(a);
      EXPECT_EQ(bytes.find("\n") % 64, 63u);  // header padded to 64 bytes
      NDArray b = npy::parse(bytes, "rt.npy");
      EXPECT_EQ(b.shape(), s);
      EXPECT_EQ(b.dtype(), t);
      EXPECT_EQ(b.astype(DType::kFloat64).to_vector<double>(), a.astype(DType::kFloat64).to_vector<double>());
    }
  }
}

TEST(Npy, ReadsNumpyBytes) {
  // numpy.save(f, numpy.array([[1.5, -2.0]], dtype='<f4')) (NumPy 1.x header).
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2), }";
  header.append(128 - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + std::string(1, static_cast<char>(header.size())) +
                      std::string(1, '\0') + header;
  float values[] = {1.5f, -2.0f};
  bytes.append(reinterpret_cast<const char*>(values), sizeof values);
  NDArray a = npy::parse(bytes, "numpy.npy");
  EXPECT_EQ(a.shape(), (Shape{1, 2}));
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1.5f, -2.0f}));
}

TEST(Npy, ErrorsNameTheByte) {
  std::string bytes = npy::serialize(nd::ones({4, 4}));
  for (size_t n : {size_t{0}, size_t{5}, size_t{9}, size_t{40}, bytes.size() - 1}) {
    std::string e = error_of<IOError>([&] { npy::parse(std::string_view(bytes).substr(0, n), "cut.npy"); });
    EXPECT_CONTAINS(e, "cut.npy");
    EXPECT_CONTAINS(e, "byte");
  }
  EXPECT_CONTAINS(error_of<IOError>([&] { npy::parse(bytes + "xx", "long.npy"); }), "2 bytes follow");
  // Replaces header text, keeping the header's length (the padding absorbs the difference).
  auto with_header = [&](std::string from, std::string to) {
    std::string b = bytes;
    b.replace(b.find(from), from.size(), to);
    size_t nl = b.find('\n');
    if (to.size() > from.size()) b.erase(nl - (to.size() - from.size()), to.size() - from.size());
    return b;
  };
  EXPECT_CONTAINS(error_of<NotSupported>([&] { npy::parse(with_header("'<f4'", "'>f4'"), "be.npy"); }), "big-endian");
  EXPECT_CONTAINS(error_of<NotSupported>([&] { npy::parse(with_header("False", "True "), "f.npy"); }), "Fortran");
  EXPECT_CONTAINS(error_of<NotSupported>([&] { npy::parse(with_header("'<f4'", "'<c8'"), "c.npy"); }), "'<c8'");
  EXPECT_CONTAINS(error_of<IOError>([&] { npy::parse(with_header("(4, 4)", "(4, 9)"), "s.npy"); }), "truncated");
  EXPECT_CONTAINS(error_of<IOError>([&] { npy::parse(with_header("(4, 4)", "(1 << 62, 4)"), "x.npy"); }), "shape");
  // 2^62 elements: their byte count overflows 64 bits, and it is still "truncated".
  EXPECT_CONTAINS(error_of<IOError>([&] { npy::parse(with_header("(4, 4)", "(1152921504606846976, 4)"), "huge.npy"); }),
                  "truncated");
  // 2^64 elements: more than a shape can hold, refused at the shape.
  EXPECT_CONTAINS(error_of<IOError>([&] { npy::parse(with_header("(4, 4)", "(4611686018427387904, 4)"), "huge.npy"); }),
                  "more than 2^63 - 1 elements");
}

}  // namespace
}  // namespace kiln
