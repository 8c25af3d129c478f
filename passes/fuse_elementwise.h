// fuse-elementwise: groups of elementwise ops of one dtype become one
// _kiln_fused_elemwise node (ir/ops/fused.h) whose kernel runs the group as
// one loop, so the group's intermediate values are never written to memory.
//
//   %a = exp(%x)   %b = _mul_scalar(%a) {scalar="2"}   %c = relu(%b)   return %c
//   -> %c = _kiln_fused_elemwise(%x) {program="in=f;%1=exp(%0);%2=mul(%1,2);%3=relu(%2);out=%3"}
//
// Fusible nodes: float32, float16 or bfloat16 in and out (one dtype), and
// one of elemwise_add/sub/mul/div, the broadcast_* ops, the *_scalar ops,
// exp, log, sqrt, square, tanh, sigmoid, relu, abs, negative, clip, where,
// add_n (two or more inputs), Activation, _backward_Activation (not
// softrelu), and LeakyReLU with act_type leaky. A broadcast_* or where node is
// fusible when one operand has the output's shape and each other operand has
// it too, has one element, or has a single non-1 axis that the output has
// (a bias (1,C,1,1) or (C)).
//
// Groups hold nodes of one output shape, grown in graph order: a node joins
// the group of one of its inputs unless another of its inputs depends on that
// group through a node outside it (that would make a cycle). Groups of one
// node are left alone. Every member value that a node outside the group
// reads, or that is a graph output, stays an output of the fused node; the
// others are dropped (PassStats: `fused` counts the nodes absorbed).
//
// Preserves every output value (the kernels compute what the unfused kernels
// do, up to the rounding of exp/log/tanh/sigmoid: see backends/cpu/fused.h;
// in 16-bit a group rounds once per output, not once per op).
// Nodes outside groups, and their names, are kept. The fused node takes the
// name "fused/<name of its last member>".
#pragma once

#include "ir/device.h"
#include "ir/graph.h"
#include "passes/pass.h"

namespace kiln::passes {

ir::Graph fuse_elementwise(const ir::Graph& g, PassContext& ctx);

// False when the environment sets KILN_FUSE=0: CachedOp and TrainProgram
// then leave fuse-elementwise out of their pipelines (to measure its effect).
bool fuse_elementwise_enabled();
// Whether CachedOp and TrainProgram fuse graphs that run on `device`: on CPUs
// when enabled; on CUDA devices when Kiln was built with NVRTC, whose
// generated kernels then run the groups (backends/cuda/fused_nvrtc.h), unless
// KILN_CUDA_FUSED=interpret selects the interpreter kernel, which is slower
// than the separate vectorized kernels (ResNet-18 training on an H100:
// 3.7 s/epoch fused, 3.1 unfused). KILN_FUSE=1 fuses there in every case.
bool fuse_elementwise_on(Device device);

}  // namespace kiln::passes
