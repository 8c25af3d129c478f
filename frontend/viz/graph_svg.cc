#include "frontend/viz/graph_svg.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "ir/error.h"

extern char** environ;

namespace kiln::viz {
namespace {

namespace fs = std::filesystem;

std::string read_all(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// Removes the call's files however it ends.
struct TempFiles {
  fs::path in, out, err;
  ~TempFiles() {
    std::error_code ec;
    for (const fs::path& p : {in, out, err}) fs::remove(p, ec);
  }
};

}  // namespace

std::string dot_to_svg(const std::string& dot) {
  static std::atomic<int> counter{0};
  fs::path base = fs::temp_directory_path() / fmt::format("kiln-dot-{}-{}", ::getpid(), counter.fetch_add(1));
  TempFiles files{base.string() + ".dot", base.string() + ".svg", base.string() + ".err"};
  {
    std::ofstream f(files.in, std::ios::binary);
    f << dot;
    KILN_CHECK(f.good(), IOError, "cannot write the graph for Graphviz to '{}'", files.in.string());
  }
  std::string out_arg = "-o" + files.out.string();
  const char* argv[] = {"dot", "-Tsvg", out_arg.c_str(), files.in.c_str(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, files.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  int rc = posix_spawnp(&pid, "dot", &actions, nullptr, const_cast<char* const*>(argv), environ);
  posix_spawn_file_actions_destroy(&actions);
  KILN_CHECK(rc == 0, NotSupported,
             "cannot run Graphviz's `dot` program ({}); install it (Debian package graphviz, "
             "scripts/install-deps.sh) and make sure it is on PATH",
             std::strerror(rc));
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    KILN_CHECK(errno == EINTR, IOError, "waiting for Graphviz's `dot` failed: {}", std::strerror(errno));
  }
  std::string err = read_all(files.err);
  while (!err.empty() && (err.back() == '\n' || err.back() == ' ')) err.pop_back();
  KILN_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, ValueError, "Graphviz could not read the graph: {}",
             err.empty() ? fmt::format("`dot` ended with status {}", status) : err);
  std::string svg = read_all(files.out);
  KILN_CHECK(!svg.empty(), ValueError, "Graphviz wrote no SVG{}", err.empty() ? "" : ": " + err);
  // The DOCTYPE names an external DTD; nothing needs it.
  if (size_t d = svg.find("<!DOCTYPE"); d != std::string::npos) {
    size_t end = svg.find('>', d);
    if (end != std::string::npos) svg.erase(d, end + 1 - d);
  }
  return svg;
}

}  // namespace kiln::viz
