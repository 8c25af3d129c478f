// Text helpers shared by Kiln's SVG writers (svg_plot, svg_timeline).
//
//   out += fmt::format("<text x=\"{}\">{}</text>", svg_number(x), xml_escape(label));
//
// xml_escape makes any string safe inside XML character data and inside
// double-quoted attribute values (bytes that are not UTF-8, and control
// characters XML forbids, become '?'). svg_number writes a coordinate with at most
// two decimals and no trailing zeros ("12", "3.5"), so files stay small and
// byte-identical for identical input. kSvgFont is the font list every
// picture uses: generic families only, so an SVG never refers to a font file.
#pragma once

#include <string>
#include <string_view>

namespace kiln::viz {

inline constexpr std::string_view kSvgFont = "DejaVu Sans, Helvetica, Arial, sans-serif";

std::string xml_escape(std::string_view s);
std::string svg_number(double v);

// The opening <svg> element (with the XML declaration and the SVG namespace)
// of a picture `width` x `height` pixels on a white background.
std::string svg_open(double width, double height);

}  // namespace kiln::viz
