// What every SVG test checks, and XPath queries into a parsed picture.
//
//   SvgDoc doc = parse_and_render(svg, "curves");   // fails the test unless it is XML and rsvg-convert renders it
//   EXPECT_EQ(doc.count("//s:path[@class='curve']"), 4);
//   std::vector<std::string> ids = doc.strings("//s:g[@class='node']/@id");
//
// The SVG namespace is bound to the prefix "s". parse_and_render writes the
// picture and its PNG under test_tmp_dir() and checks that
// rsvg-convert (KILN_RSVG_CONVERT, found by CMake) exits 0 and writes a PNG.
#pragma once

#include <gtest/gtest.h>
#include <libxml/parser.h>
#include <libxml/xpath.h>
#include <libxml/xpathInternals.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

namespace kiln::test {

class SvgDoc {
 public:
  SvgDoc() = default;
  explicit SvgDoc(xmlDocPtr doc) : doc_(doc, xmlFreeDoc) {}
  bool ok() const { return doc_ != nullptr; }

  // The string values of the nodes `xpath` selects, in document order.
  std::vector<std::string> strings(const std::string& xpath) const {
    std::vector<std::string> out;
    if (!doc_) return out;
    std::unique_ptr<xmlXPathContext, decltype(&xmlXPathFreeContext)> ctx(xmlXPathNewContext(doc_.get()),
                                                                         xmlXPathFreeContext);
    xmlXPathRegisterNs(ctx.get(), BAD_CAST "s", BAD_CAST "http://www.w3.org/2000/svg");
    std::unique_ptr<xmlXPathObject, decltype(&xmlXPathFreeObject)> r(
        xmlXPathEvalExpression(BAD_CAST xpath.c_str(), ctx.get()), xmlXPathFreeObject);
    if (!r) {
      ADD_FAILURE() << "bad XPath " << xpath;
      return out;
    }
    if (r->nodesetval == nullptr) return out;
    for (int i = 0; i < r->nodesetval->nodeNr; ++i) {
      xmlChar* s = xmlNodeGetContent(r->nodesetval->nodeTab[i]);
      out.emplace_back(s ? reinterpret_cast<const char*>(s) : "");
      xmlFree(s);
    }
    return out;
  }
  int count(const std::string& xpath) const { return static_cast<int>(strings(xpath).size()); }
  double number(const std::string& xpath) const {
    auto v = strings(xpath);
    if (v.size() != 1) {
      ADD_FAILURE() << xpath << " selects " << v.size() << " nodes, expected 1";
      return 0;
    }
    return std::stod(v[0]);
  }

 private:
  std::shared_ptr<xmlDoc> doc_;
};

// A directory of this test process's own (TEST_TMPDIR or /tmp, then
// "kiln-viz-<pid>"), removed at exit when every test passed, kept otherwise
// so that the pictures of a failure can be looked at.
inline std::filesystem::path test_tmp_dir() {
  struct Dir {
    std::filesystem::path path;
    Dir() {
      const char* t = std::getenv("TEST_TMPDIR");
      path = std::filesystem::path(t && *t ? t : "/tmp") / ("kiln-viz-" + std::to_string(::getpid()));
      std::filesystem::create_directories(path);
    }
    ~Dir() {
      std::error_code ec;
      if (::testing::UnitTest::GetInstance()->Passed()) std::filesystem::remove_all(path, ec);
    }
  };
  static Dir dir;
  return dir.path;
}

// Parses `svg` as XML (a test failure naming libxml2's message otherwise),
// checks that it refers to nothing outside itself, and renders it to PNG.
inline SvgDoc parse_and_render(const std::string& svg, const std::string& name) {
  xmlDocPtr doc =
      xmlReadMemory(svg.data(), static_cast<int>(svg.size()), (name + ".svg").c_str(), nullptr, XML_PARSE_NONET);
  if (doc == nullptr) {
    const xmlError* e = xmlGetLastError();
    ADD_FAILURE() << name << ".svg is not XML: " << (e && e->message ? e->message : "?") << " (line "
                  << (e ? e->line : 0) << ")";
    return {};
  }
  SvgDoc out(doc);
  EXPECT_EQ(out.count("/s:svg"), 1) << name << ": the root is not an <svg> element in the SVG namespace";
  // Self-contained: no scripts, no external references, no web fonts.
  EXPECT_EQ(out.count("//s:script | //s:image | //s:use | //s:style[contains(., '@import') or contains(., 'url(')]"), 0)
      << name;
  for (const std::string& href : out.strings("//@*[local-name()='href']"))
    EXPECT_EQ(href.rfind('#', 0), 0u) << name << ": external reference " << href;

  std::filesystem::path dir = test_tmp_dir();
  std::filesystem::path svg_path = dir / (name + ".svg"), png_path = dir / (name + ".png"),
                        log_path = dir / (name + ".rsvg.log");
  {
    std::ofstream f(svg_path, std::ios::binary);
    f << svg;
  }
  std::filesystem::remove(png_path);
  std::string cmd = std::string(KILN_RSVG_CONVERT) + " -o '" + png_path.string() + "' '" + svg_path.string() + "' > '" +
                    log_path.string() + "' 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream log(log_path);
  std::string log_text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  EXPECT_EQ(rc, 0) << "rsvg-convert failed on " << svg_path << ": " << log_text;
  // Any message about the picture is a failure; fontconfig's notes about the
  // machine's font setup are not about the picture.
  std::string complaints;
  for (size_t start = 0; start < log_text.size();) {
    size_t end = log_text.find('\n', start);
    std::string line = log_text.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!line.empty() && line.rfind("Fontconfig", 0) != 0) complaints += line + "\n";
    start = end == std::string::npos ? log_text.size() : end + 1;
  }
  EXPECT_EQ(complaints, "") << "rsvg-convert complained about " << svg_path;
  std::ifstream png(png_path, std::ios::binary);
  char magic[8] = {};
  png.read(magic, 8);
  EXPECT_EQ(std::string(magic + 1, 3), "PNG") << "rsvg-convert wrote no PNG for " << svg_path;
  return out;
}

}  // namespace kiln::test
