// What the attention tests compare: the output of an attention call and the
// gradients of sum(out * w) with respect to q, k and v, on the CPU.
//
//   AttentionGrads r = attention_grads([](auto& q, auto& k, auto& v) { return attend(q, k, v); },
//                                      q, k, v, [](const Shape& s) { return weights(s); });
//   expect_same(r, reference, 1e-6, "causal");
#pragma once

#include <string>

#include "frontend/autograd.h"
#include "frontend/nd.h"
#include "tests/test_util.h"

namespace kiln::test {

struct AttentionGrads {
  NDArray out, dq, dk, dv;
};

// Attaches gradients to q, k and v, records `call(q, k, v)` and the backward
// of sum(out * weights(out.shape())), and copies the four arrays to cpu(0).
template <typename Call, typename Weights>
AttentionGrads attention_grads(Call&& call, NDArray q, NDArray k, NDArray v, Weights&& weights) {
  for (NDArray* x : {&q, &k, &v}) x->attach_grad();
  AttentionGrads r;
  {
    autograd::Record record;
    r.out = call(q, k, v);
    autograd::backward({nd::sum(r.out * weights(r.out.shape()))});
  }
  const Device cpu = Device::cpu(0);
  r.out = r.out.copy_to(cpu);
  r.dq = q.grad().copy_to(cpu);
  r.dk = k.grad().copy_to(cpu);
  r.dv = v.grad().copy_to(cpu);
  return r;
}

inline void expect_same(const AttentionGrads& got, const AttentionGrads& want, double tol, const std::string& what) {
  expect_close(got.out, want.out, tol, what + ": out");
  expect_close(got.dq, want.dq, tol, what + ": dq");
  expect_close(got.dk, want.dk, tol, what + ": dk");
  expect_close(got.dv, want.dv, tol, what + ": dv");
}

}  // namespace kiln::test
