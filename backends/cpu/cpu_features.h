// What this CPU offers for 16-bit floats, and what Kiln does with it.
//
//   const cpu::Features& f = cpu::features();   // read once from /proc/cpuinfo
//   f.model;            // "AMD EPYC 9R14 96-Core Processor"
//   f.has("avx512_bf16");
//   cpu::low_precision_support(DType::kBfloat16);   // "oneDNN bf16 kernels on avx512_bf16 (native)"
#pragma once

#include <string>
#include <vector>

#include "ir/dtype.h"

namespace kiln::cpu {

struct Features {
  std::string model;               // /proc/cpuinfo "model name" ("unknown" when absent)
  std::vector<std::string> flags;  // of the first processor
  bool has(const std::string& flag) const;
};

const Features& features();

// The 16-bit float flags this CPU has, of avx512_bf16, amx_bf16, amx_tile,
// avx512_fp16, amx_fp16, avx512f ("none" if none).
std::string low_precision_flags();

// How Kiln computes convolutions and matrix products in `t` (float16 or
// bfloat16) here, one line: oneDNN kernels native to the CPU, oneDNN's
// emulation on AVX-512, or float32 on widened copies.
std::string low_precision_support(DType t);

// True when `t` runs on instructions made for it (AMX or AVX512-BF16 for
// bfloat16; AVX512-FP16 or AMX-FP16 for float16) rather than emulated or widened.
bool native_low_precision(DType t);

// Whether convolutions with `t` data (float16 or bfloat16) run oneDNN kernels
// made for it here, which take channel-last activations (the channels-last
// pass pays); false where they are emulated or widened to float32, whose
// kernels Kiln runs channel-first (Winograd, blocked layouts).
bool channels_last_pays(DType t);

}  // namespace kiln::cpu
