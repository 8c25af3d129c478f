#include "backends/cpu/cpu_features.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "backends/cpu/onednn_util.h"
#include "ir/amp.h"

namespace kiln::cpu {

bool Features::has(const std::string& flag) const { return std::find(flags.begin(), flags.end(), flag) != flags.end(); }

const Features& features() {
  static const Features f = [] {
    Features r;
    r.model = "unknown";
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    bool have_flags = false, have_model = false;
    while (std::getline(in, line) && !(have_flags && have_model)) {
      const size_t colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string key = line.substr(0, colon);
      key.erase(key.find_last_not_of(" \t") + 1);
      const std::string value = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
      if (key == "model name" && !have_model) {
        r.model = value;
        have_model = true;
      } else if (key == "flags" && !have_flags) {
        std::istringstream words(value);
        for (std::string w; words >> w;) r.flags.push_back(w);
        have_flags = true;
      }
    }
    return r;
  }();
  return f;
}

std::string low_precision_flags() {
  std::string out;
  for (const char* flag : {"avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16", "amx_fp16"}) {
    if (!features().has(flag)) continue;
    if (!out.empty()) out += ' ';
    out += flag;
  }
  return out.empty() ? "none" : out;
}

bool native_low_precision(DType t) {
  const Features& f = features();
  if (t == DType::kBfloat16) return f.has("amx_bf16") || f.has("avx512_bf16");
  if (t == DType::kFloat16) return f.has("avx512_fp16") || f.has("amx_fp16");
  return t == DType::kFloat32;
}

bool channels_last_pays(DType t) {
  return is_16bit_float(t) && native_low_precision(t) && onednn::computes_in(t);
}

std::string low_precision_support(DType t) {
  const std::string name(dtype_short_name(t));
  if (!onednn::computes_in(t)) return fmt::format("float32 on widened copies (this oneDNN has no {} kernels here)", name);
  if (native_low_precision(t)) {
    const Features& f = features();
    const char* unit = t == DType::kBfloat16 ? (f.has("amx_bf16") ? "amx_bf16" : "avx512_bf16")
                                             : (f.has("amx_fp16") ? "amx_fp16" : "avx512_fp16");
    return fmt::format("oneDNN {} kernels on {} (native)", name, unit);
  }
  return fmt::format("oneDNN {} kernels, emulated on AVX-512 (no {} instructions: correct, slower)", name, name);
}

}  // namespace kiln::cpu
