#include <gtest/gtest.h>

namespace kiln {
namespace {
TEST(OnnxImport, Placeholder) {}
}  // namespace
}  // namespace kiln
