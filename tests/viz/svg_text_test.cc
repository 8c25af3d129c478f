#include "frontend/viz/svg_text.h"

#include <gtest/gtest.h>

namespace kiln::viz {
namespace {

TEST(SvgText, EscapesMarkupAndReplacesWhatXmlCannotHold) {
  EXPECT_EQ(xml_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;");
  EXPECT_EQ(xml_escape("épocas µs"), "épocas µs");  // UTF-8 stays
  EXPECT_EQ(xml_escape("run\xff\x01.jsonl"), "run??.jsonl");
  EXPECT_EQ(xml_escape("\xe2\x82"), "??");  // a truncated sequence
}

TEST(SvgText, NumbersAreShort) {
  EXPECT_EQ(svg_number(12), "12");
  EXPECT_EQ(svg_number(3.5), "3.5");
  EXPECT_EQ(svg_number(1.0 / 3), "0.33");
  EXPECT_EQ(svg_number(-0.001), "0");
}

}  // namespace
}  // namespace kiln::viz
