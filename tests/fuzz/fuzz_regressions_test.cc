// Replays every committed fuzz input through its target (fuzz_target.h):
//   regressions/<target>/*  inputs that once crashed or broke a sanitizer;
//                           each must now be rejected with a clean kiln::Error
//                           (not InternalError) that says where (a byte offset,
//                           or a line and column);
//   corpus/<target>/*       the seeds; each must parse or be rejected cleanly.
// Runs in every build, so a parser fix is kept even where nothing fuzzes.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ir/error.h"
#include "tests/fuzz/fuzz_target.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> files;
  if (fs::is_directory(dir))
    for (const auto& e : fs::directory_iterator(dir))
      if (e.is_regular_file() && e.path().filename() != "README.md") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

enum class Outcome { kParsed, kError, kInternalError };

Outcome replay(const fuzz::Target& t, const fs::path& file, std::string* message) {
  std::vector<uint8_t> bytes = read_bytes(file);
  try {
    t.fn(bytes);
    return Outcome::kParsed;
  } catch (const InternalError& e) {
    *message = e.what();
    return Outcome::kInternalError;
  } catch (const Error& e) {
    *message = e.what();
    return Outcome::kError;
  }
}

class FuzzInputs : public testing::TestWithParam<fuzz::Target> {};

TEST_P(FuzzInputs, RegressionsAreRejectedCleanly) {
  const fuzz::Target& t = GetParam();
  for (const fs::path& file : files_in(fs::path(KILN_FUZZ_DIR) / "regressions" / t.name)) {
    std::string message;
    Outcome o = replay(t, file, &message);
    EXPECT_EQ(o, Outcome::kError) << t.name << " on " << file.filename().string() << ": "
                                  << (o == Outcome::kParsed ? "parsed, expected a kiln::Error" : message);
    if (o == Outcome::kError)
      EXPECT_TRUE(message.find("byte") != std::string::npos || message.find("line") != std::string::npos ||
                  message.find("node") != std::string::npos)
          << t.name << " on " << file.filename().string() << ": the error does not say where: " << message;
  }
}

TEST_P(FuzzInputs, SeedsParseOrAreRejectedCleanly) {
  const fuzz::Target& t = GetParam();
  const std::vector<fs::path> seeds = files_in(fs::path(KILN_FUZZ_DIR) / "corpus" / t.name);
  EXPECT_FALSE(seeds.empty()) << "no seeds in corpus/" << t.name;
  for (const fs::path& file : seeds) {
    std::string message;
    EXPECT_NE(replay(t, file, &message), Outcome::kInternalError) << t.name << " on " << file.filename().string()
                                                                  << ": " << message;
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzInputs, testing::ValuesIn(fuzz::targets()),
                         [](const testing::TestParamInfo<fuzz::Target>& info) { return info.param.name; });

}  // namespace
}  // namespace kiln
