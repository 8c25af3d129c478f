// DType, Shape, Device and attribute codecs.
#include <gtest/gtest.h>

#include <cmath>

#include "ir/attrs.h"
#include "ir/device.h"
#include "ir/dtype.h"
#include "ir/shape.h"
#include "runtime/device_backend.h"

namespace kiln {
namespace {

TEST(DType, FlagsMatchMXNet) {
  EXPECT_EQ(static_cast<int>(DType::kFloat32), 0);
  EXPECT_EQ(static_cast<int>(DType::kFloat16), 2);
  EXPECT_EQ(static_cast<int>(DType::kInt64), 6);
  EXPECT_EQ(static_cast<int>(DType::kBool), 7);
  EXPECT_EQ(static_cast<int>(DType::kBfloat16), 12);
  EXPECT_EQ(dtype_size(DType::kFloat64), 8u);
  EXPECT_EQ(dtype_name(DType::kBfloat16), "bfloat16");
  EXPECT_EQ(parse_dtype("int32"), DType::kInt32);
  EXPECT_EQ(parse_dtype("f16"), DType::kFloat16);
  EXPECT_THROW(parse_dtype("complex64"), TypeError);
  EXPECT_THROW(dtype_from_flag(13), TypeError);
  EXPECT_THROW(dtype_from_flag(-1), TypeError);
}

TEST(DType, HalfRoundTrip) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.1f, 1e-3f}) {
    float back = half_to_float(float_to_half(f));
    EXPECT_NEAR(back, f, std::fabs(f) * 1e-3 + 1e-7) << f;
  }
  EXPECT_TRUE(std::isinf(half_to_float(float_to_half(1e6f))));
  EXPECT_TRUE(std::isnan(half_to_float(float_to_half(NAN))));
  EXPECT_EQ(float_to_half(1.0f).bits, 0x3c00);
  // Round to nearest even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f).bits, 0x3c00);
}

TEST(DType, BFloat16RoundTrip) {
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_FLOAT_EQ(bf16_to_float(float_to_bf16(3.140625f)), 3.140625f);
  EXPECT_NEAR(bf16_to_float(float_to_bf16(0.1f)), 0.1f, 1e-3);
}

TEST(Shape, Basics) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.ndim(), 3);
  EXPECT_EQ(s.size(), 24);
  EXPECT_EQ(s.to_string(), "[2,3,4]");
  EXPECT_EQ(s.to_mxnet_string(), "(2, 3, 4)");
  EXPECT_EQ(Shape{}.size(), 1);
  EXPECT_EQ((Shape{5}).to_mxnet_string(), "(5,)");
  auto st = s.strides();
  EXPECT_EQ(st[0], 12);
  EXPECT_EQ(st[2], 1);
  EXPECT_THROW((Shape{2, -1}), ShapeError);
  EXPECT_THROW((Shape{1, 1, 1, 1, 1, 1, 1, 1, 1}), ShapeError);
  EXPECT_EQ(parse_shape("(2, 3)"), (Shape{2, 3}));
  EXPECT_EQ(parse_shape("[4]"), (Shape{4}));
  EXPECT_EQ(parse_shape("()"), Shape{});
  EXPECT_THROW(parse_shape("(2, x)"), ValueError);
}

TEST(Shape, Broadcast) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}, "t"), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 3}, "t"), (Shape{2, 3}));
  try {
    broadcast_shapes({2, 3}, {4}, "broadcast_add");
    FAIL();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("broadcast_add"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[2,3]"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos);
  }
}

TEST(Shape, NormalizeAxis) {
  EXPECT_EQ(normalize_axis(-1, 3, "sum"), 2);
  EXPECT_EQ(normalize_axis(0, 3, "sum"), 0);
  EXPECT_THROW(normalize_axis(3, 3, "sum"), IndexError);
  EXPECT_THROW(normalize_axis(-4, 3, "sum"), IndexError);
}

TEST(Device, ParseAndPrint) {
  EXPECT_EQ(Device::cpu(1).to_string(), "cpu(1)");
  EXPECT_EQ(parse_device("cpu:3"), Device::cpu(3));
  EXPECT_EQ(parse_device("cpu(2)"), Device::cpu(2));
  EXPECT_EQ(parse_device("cpu"), Device::cpu(0));
  EXPECT_THROW(parse_device("tpu:0"), DeviceError);
  EXPECT_THROW(parse_device("cpu:x"), DeviceError);
  EXPECT_THROW(parse_device("cpu:-1"), DeviceError);
  if (device_count(DeviceKind::kCUDA) == 0) {
    try {
      parse_device("cuda:0");
      FAIL();
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("cuda(0)"), std::string::npos);
    }
  }
}

TEST(Attrs, Codecs) {
  EXPECT_TRUE(parse_attr("True", static_cast<bool*>(nullptr)));
  EXPECT_FALSE(parse_attr("false", static_cast<bool*>(nullptr)));
  EXPECT_THROW(parse_attr("yes", static_cast<bool*>(nullptr)), ValueError);
  EXPECT_EQ(parse_attr("42", static_cast<int*>(nullptr)), 42);
  EXPECT_EQ(parse_attr("7L", static_cast<int64_t*>(nullptr)), 7);
  EXPECT_DOUBLE_EQ(parse_attr("0.25", static_cast<double*>(nullptr)), 0.25);
  EXPECT_EQ(print_attr(0.1), "0.1");
  EXPECT_EQ(print_attr(true), "True");
  EXPECT_EQ(parse_attr("(0, -1, 2)", static_cast<IntTuple*>(nullptr)), (IntTuple{0, -1, 2}));
  EXPECT_EQ(print_attr(IntTuple{-1}), "(-1,)");
  EXPECT_EQ(parse_attr("None", static_cast<std::optional<int>*>(nullptr)), std::nullopt);
  EXPECT_EQ(print_attr(std::optional<int>{}), "None");
}

struct TestAttrs {
  int num_hidden = 0;
  bool no_bias = false;
  double eps = 1e-5;
  template <typename V>
  void fields(V& v) {
    v("num_hidden", num_hidden, kRequired);
    v("no_bias", no_bias);
    v("eps", eps);
  }
};

TEST(Attrs, ParsePrintRoundTrip) {
  OpAttrs a = OpAttrs::parse<TestAttrs>("FullyConnected", {{"num_hidden", "10"}, {"no_bias", "True"}});
  EXPECT_EQ(a.as<TestAttrs>().num_hidden, 10);
  EXPECT_TRUE(a.as<TestAttrs>().no_bias);
  AttrMap printed = a.to_strings();
  EXPECT_EQ(printed.size(), 2u);  // eps keeps its default and is not printed
  EXPECT_EQ(printed["num_hidden"], "10");
  OpAttrs b = OpAttrs::parse<TestAttrs>("FullyConnected", printed);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.hash(), b.hash());
  // MXNet bookkeeping keys are ignored.
  EXPECT_NO_THROW(OpAttrs::parse<TestAttrs>("FullyConnected", {{"num_hidden", "1"}, {"__layout__", "NC"}}));
}

TEST(Attrs, ParseErrorsNameOpAndKey) {
  try {
    OpAttrs::parse<TestAttrs>("FullyConnected", {{"no_bias", "True"}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("num_hidden"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("FullyConnected"), std::string::npos);
  }
  try {
    OpAttrs::parse<TestAttrs>("FullyConnected", {{"num_hidden", "1"}, {"flatten", "True"}});
    FAIL();
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("flatten"), std::string::npos);
  }
  EXPECT_THROW(OpAttrs::parse<TestAttrs>("FullyConnected", {{"num_hidden", "ten"}}), ValueError);
}

}  // namespace
}  // namespace kiln
