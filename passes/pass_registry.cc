// The pass registry and the pipeline runner (passes/pass.h).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "passes/amp_cast.h"
#include "passes/channels_last.h"
#include "passes/decompose.h"
#include "passes/dot.h"
#include "passes/eliminate_common_expr.h"
#include "passes/eliminate_dead_code.h"
#include "passes/fold_batch_norm.h"
#include "passes/fold_constants.h"
#include "passes/fuse_conv_activation.h"
#include "passes/fuse_elementwise.h"
#include "passes/gradient.h"
#include "passes/infer_shape.h"
#include "passes/memory_plan.h"
#include "passes/pass.h"
#include "passes/simplify_algebra.h"

namespace kiln::passes {
namespace {

constexpr PassInfo kPasses[] = {
#define KILN_PASS(fn, name) {name, &fn},
#include "passes/pass_list.def"
#undef KILN_PASS
};

std::string known_passes() {
  std::string out;
  for (const PassInfo& p : kPasses) out += (out.empty() ? "" : ", ") + std::string(p.name);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Writes `text` to `path` through a temporary file in the same directory and
// a rename, so readers see the old file or the whole new one.
void write_atomically(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::path tmp = path;
  tmp += fmt::format(".tmp.{}", ::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    KILN_CHECK(f.good(), IOError, "KILN_DUMP_GRAPHS: cannot write '{}'", tmp.string());
    f << text;
    f.close();
    KILN_CHECK(!f.fail(), IOError, "KILN_DUMP_GRAPHS: writing '{}' failed", tmp.string());
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  KILN_CHECK(!ec, IOError, "KILN_DUMP_GRAPHS: cannot rename '{}' to '{}': {}", tmp.string(), path.string(),
             ec.message());
}

void dump(PassContext& ctx, int index, std::string_view name, const ir::Graph& g) {
  std::filesystem::path dir(ctx.options.dump_dir);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  KILN_CHECK(!ec, IOError, "KILN_DUMP_GRAPHS: cannot create directory '{}': {}", dir.string(), ec.message());
  std::string base = fmt::format("{:02}-{}", index, name);
  write_atomically(dir / (base + ".txt"), g.to_text());
  write_atomically(dir / (base + ".dot"), to_dot(g));
}

std::string bytes_text(int64_t b) {
  if (b < 0) return "-";
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1 << 20));
  if (b >= (int64_t{1} << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1 << 10));
  return fmt::format("{} B", b);
}

}  // namespace

std::string PassStats::to_string() const {
  std::string out = fmt::format("{:<24} {:>5} -> {:<5} nodes ({} -> {} ops){}", pass, nodes_before, nodes_after,
                                ops_before, ops_after, changed ? "" : ", unchanged");
  if (removed) out += fmt::format(", {} removed", removed);
  if (merged) out += fmt::format(", {} merged", merged);
  if (fused) out += fmt::format(", {} fused", fused);
  if (rewritten) out += fmt::format(", {} rewritten", rewritten);
  if (added) out += fmt::format(", {} added", added);
  if (arena_bytes >= 0) out += fmt::format(", arena {} vs naive {}", bytes_text(arena_bytes), bytes_text(naive_bytes));
  if (inplace_reuses > 0) out += fmt::format(", {} in-place", inplace_reuses);
  return out + fmt::format(", {:.2f} ms", seconds * 1e3);
}

PassContext::PassContext() {
  if (const char* dir = std::getenv("KILN_DUMP_GRAPHS"); dir && *dir) options.dump_dir = dir;
}

PassContext::PassContext(PassOptions opts) : options(std::move(opts)) {}

PassStats& PassContext::current() {
  if (open_ >= 0) return stats[static_cast<size_t>(open_)];
  if (stats.empty() || stats.back().pass != "?") stats.push_back(PassStats{.pass = "?"});
  return stats.back();
}

std::string PassContext::report() const {
  std::string out;
  for (size_t i = 0; i < stats.size(); ++i) out += fmt::format("{:2}. {}\n", i + 1, stats[i].to_string());
  return out;
}

std::span<const PassInfo> all_passes() { return kPasses; }

const PassInfo* find_pass(std::string_view name) {
  for (const PassInfo& p : kPasses)
    if (p.name == name) return &p;
  return nullptr;
}

std::vector<const PassInfo*> parse_pipeline(std::string_view pipeline) {
  std::vector<const PassInfo*> out;
  if (trim(pipeline).empty()) return out;
  size_t position = 0;
  for (;;) {
    size_t comma = pipeline.find(',');
    std::string_view name = trim(pipeline.substr(0, comma));
    ++position;
    KILN_CHECK(!name.empty(), ValueError, "pass pipeline: pass {} has an empty name (known passes: {})", position,
               known_passes());
    const PassInfo* p = find_pass(name);
    KILN_CHECK(p != nullptr, ValueError, "pass pipeline: unknown pass '{}' at position {} (known passes: {})", name,
               position, known_passes());
    out.push_back(p);
    if (comma == std::string_view::npos) break;
    pipeline.remove_prefix(comma + 1);
  }
  return out;
}

ir::Graph run_pass(std::string_view name, const ir::Graph& g, PassContext& ctx) {
  const PassInfo* p = find_pass(name);
  KILN_CHECK(p != nullptr, ValueError, "run_pass: unknown pass '{}' (known passes: {})", name, known_passes());
  return run_pass(*p, g, ctx);
}

ir::Graph run_pass(const PassInfo& pass, const ir::Graph& g, PassContext& ctx) {
  const PassInfo* p = &pass;
  if (!ctx.options.dump_dir.empty() && ctx.dumps_ == 0) dump(ctx, ctx.dumps_++, "input", g);
  ctx.stats.push_back(PassStats{.pass = std::string(p->name)});
  const size_t index = ctx.stats.size() - 1;
  struct Open {  // a pass may run passes itself: restore the outer one
    PassContext& ctx;
    int outer;
    ~Open() { ctx.open_ = outer; }
  } open{ctx, ctx.open_};
  ctx.open_ = static_cast<int>(index);
  auto start = std::chrono::steady_clock::now();
  ir::Graph out;
  try {
    out = p->fn(g, ctx);
  } catch (Error& e) {
    e.add_context(fmt::format("pass {}", p->name));
    throw;
  }
  ctx.open_ = open.outer;
  PassStats& s = ctx.stats[index];
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  s.nodes_before = static_cast<int64_t>(g.size());
  s.nodes_after = static_cast<int64_t>(out.size());
  s.ops_before = g.num_ops();
  s.ops_after = out.num_ops();
  if (s.changed && ctx.options.verify) {
    try {
      ir::verify(out);
    } catch (Error& e) {
      e.add_context(fmt::format("after pass {}", p->name));
      throw;
    }
  }
  if (!ctx.options.dump_dir.empty()) dump(ctx, ctx.dumps_++, p->name, out);
  return out;
}

ir::Graph run_pipeline(const ir::Graph& g, std::string_view pipeline, PassContext& ctx) {
  std::vector<const PassInfo*> passes = parse_pipeline(pipeline);  // all names checked before anything runs
  ir::Graph out = g;
  for (const PassInfo* p : passes) out = run_pass(*p, out, ctx);
  return out;
}

}  // namespace kiln::passes
