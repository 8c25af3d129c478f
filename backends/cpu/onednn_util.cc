#include "backends/cpu/onednn_util.h"

#include <omp.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "ir/error.h"

namespace kiln::cpu::onednn {

// Leaked, like the engine and the storage pools: operations still running when
// exit() tears down static objects must find it alive.
const dnnl::engine& engine() {
  static const dnnl::engine* const e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
  return *e;
}

namespace {

dnnl::stream& thread_stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

memory::dims row_major_strides(const memory::dims& dims) {
  memory::dims strides(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) strides[i - 1] = strides[i] * std::max<memory::dim>(dims[i], 1);
  return strides;
}

}  // namespace

memory::desc plain_desc(const memory::dims& dims, memory::data_type dt) {
  return memory::desc(dims, dt, row_major_strides(dims));
}

memory::desc channels_last_desc(const memory::dims& dims, memory::data_type dt, size_t innermost) {
  memory::dims strides(dims.size(), 1);
  memory::dim step = std::max<memory::dim>(dims[innermost], 1);
  for (size_t i = dims.size(); i-- > 0;) {
    if (i == innermost) continue;
    strides[i] = step;
    step *= std::max<memory::dim>(dims[i], 1);
  }
  return memory::desc(dims, dt, strides);
}

memory::desc any_desc(const memory::dims& dims, memory::data_type dt) {
  return memory::desc(dims, dt, memory::format_tag::any);
}

memory::data_type data_type(DType t) {
  switch (t) {
    case DType::kFloat32:
      return memory::data_type::f32;
    case DType::kBfloat16:
      return memory::data_type::bf16;
    case DType::kFloat16:
      return memory::data_type::f16;
    default:
      throw InternalError(fmt::format("internal error: no oneDNN data type for {}", t));
  }
}

bool computes_in(DType t) {
  if (t == DType::kFloat32) return true;
  if (t != DType::kBfloat16 && t != DType::kFloat16) return false;
  // Probed once per dtype: a small matrix product and a small convolution
  // are created (not run); oneDNN refuses them where it has no kernel.
  static const auto probe = [](memory::data_type dt) {
    try {
      dnnl::matmul::desc mm(memory::desc({4, 16}, dt, memory::format_tag::ab),
                            memory::desc({16, 16}, dt, memory::format_tag::ab),
                            memory::desc({4, 16}, dt, memory::format_tag::ab));
      dnnl::matmul::primitive_desc mm_pd(mm, engine());
      const memory::dims strides{1, 1}, pad{0, 0};
      dnnl::convolution_forward::desc conv(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                           memory::desc({2, 16, 5, 5}, dt, memory::format_tag::any),
                                           memory::desc({16, 16, 3, 3}, dt, memory::format_tag::any),
                                           memory::desc({2, 16, 3, 3}, dt, memory::format_tag::any), strides, pad,
                                           pad);
      dnnl::convolution_forward::primitive_desc conv_pd(conv, engine());
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  };
  static const bool bf16 = probe(memory::data_type::bf16);
  static const bool f16 = probe(memory::data_type::f16);
  return t == DType::kBfloat16 ? bf16 : f16;
}

memory::dims to_dims(const Shape& s) { return memory::dims(s.begin(), s.end()); }

void append_key(std::string& key, const memory::dims& dims) {
  for (auto d : dims) {
    key += std::to_string(d);
    key += 'x';
  }
  key += '|';
}

dnnl::primitive_attr scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

dnnl::primitive_attr post_ops_attr(bool sum, std::optional<ActType> act) {
  dnnl::primitive_attr attr = scratchpad_attr();
  if (!sum && !act) return attr;
  dnnl::post_ops ops;
  if (sum) ops.append_sum(1.0f);
  if (act) {
    dnnl::algorithm alg = dnnl::algorithm::eltwise_relu;
    switch (*act) {
      case ActType::kRelu:
        break;
      case ActType::kSigmoid:
        alg = dnnl::algorithm::eltwise_logistic;
        break;
      case ActType::kTanh:
        alg = dnnl::algorithm::eltwise_tanh;
        break;
      case ActType::kSoftrelu:
        alg = dnnl::algorithm::eltwise_soft_relu;
        break;
      case ActType::kSoftsign:
        KILN_ASSERT(!"softsign has no oneDNN post-op (inference rejects it)");
    }
    ops.append_eltwise(1.0f, alg, 0.0f, 0.0f);
  }
  attr.set_post_ops(ops);
  return attr;
}

std::string post_ops_key(bool sum, std::optional<ActType> act) {
  std::string key = sum ? "sum|" : "";
  if (act) key += print_attr(*act) + "|";
  return key;
}

namespace detail {
namespace {

struct Cache {
  std::mutex mutex;
  std::unordered_map<std::string, std::shared_ptr<const void>> plans;
};

Cache& cache() {
  static Cache* c = new Cache;  // leaked: plans may be used by threads still running at exit
  return *c;
}

}  // namespace

std::shared_ptr<const void> cache_find(const std::string& key) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  auto it = c.plans.find(key);
  return it == c.plans.end() ? nullptr : it->second;
}

std::shared_ptr<const void> cache_insert(const std::string& key, std::shared_ptr<const void> value) {
  Cache& c = cache();
  std::lock_guard lock(c.mutex);
  return c.plans.emplace(key, std::move(value)).first->second;
}

}  // namespace detail

Conversion::Conversion(const memory::desc& from_desc, const memory::desc& to_desc) : from(from_desc), to(to_desc) {
  if (from != to) reorder.emplace(dnnl::reorder::primitive_desc(engine(), from, engine(), to));
}

Call::Call(const engine::RunContext& run, int64_t work)
    : run_(run), threads_(work < kParallelWork ? 1 : std::max(1, run.num_threads)) {
  omp_set_num_threads(threads_);
}

Call::~Call() {
  storage::Pool& pool = storage::pool(run_.device);
  for (const storage::Block& b : temps_) pool.free(b);
}

memory Call::wrap(const memory::desc& desc, const void* data) const {
  return memory(desc, engine(), const_cast<void*>(data));
}

memory Call::temp(const memory::desc& desc) {
  storage::Block b = storage::pool(run_.device).alloc(desc.get_size());
  temps_.push_back(b);
  return memory(desc, engine(), b.ptr);
}

memory Call::in(const Conversion& c, const void* data) {
  memory user = wrap(c.from, data);
  if (!c.reorder) return user;
  memory converted = temp(c.to);
  c.reorder->execute(thread_stream(), user, converted);
  return converted;
}

memory Call::out(const Conversion& c, void* data) {
  memory user = wrap(c.to, data);
  if (!c.reorder) return user;
  memory produced = temp(c.from);
  pending_.push_back({&*c.reorder, {produced, user}});
  return produced;
}

memory Call::accumulate(const Conversion& c, const Conversion& init_conv, const void* init, void* data) {
  memory user = wrap(c.to, data);
  if (!c.reorder) {
    if (init != data) std::memcpy(data, init, c.to.get_size());
    return user;
  }
  memory produced = in(init_conv, init);
  pending_.push_back({&*c.reorder, {produced, user}});
  return produced;
}

void Call::run(const dnnl::primitive& p, size_t scratchpad, std::unordered_map<int, memory> args) {
  thread_local std::vector<char> scratch;
  if (scratchpad > 0) {
    if (scratch.size() < scratchpad) scratch.resize(scratchpad);
    memory::desc pad_desc({static_cast<memory::dim>(scratchpad)}, memory::data_type::u8, memory::format_tag::a);
    args.emplace(DNNL_ARG_SCRATCHPAD, memory(pad_desc, engine(), scratch.data()));
  }
  p.execute(thread_stream(), args);
}

dnnl::stream& Call::stream() { return thread_stream(); }

void Call::finish() {
  for (auto& [reorder, mems] : pending_) reorder->execute(thread_stream(), mems.first, mems.second);
  pending_.clear();
  thread_stream().wait();
}

}  // namespace kiln::cpu::onednn
