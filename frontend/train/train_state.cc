#include "frontend/train/train_state.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <set>

#include <fmt/ranges.h>

namespace kiln::train {

namespace {

// A host array filled now (fresh: no queued work touches it).
NDArray host_i64(const std::vector<int64_t>& values, const Shape& shape) {
  NDArray a = NDArray::empty(shape, {DType::kInt64, Device::cpu(0)});
  if (!values.empty()) std::memcpy(a.data(), values.data(), values.size() * sizeof(int64_t));
  return a;
}

std::string describe(const NDArray& a) {
  return a.is_none() ? std::string("none") : fmt::format("{} {}", a.dtype(), a.shape());
}

// Rows of `cols` int64 values; an empty table is shape [0, cols].
std::vector<int64_t> read_table(const NamedArrays& arrays, std::string_view entry, int64_t cols,
                                std::string_view source) {
  const NDArray& a = read_entry(arrays, entry, source);
  KILN_CHECK(!a.is_none() && a.dtype() == DType::kInt64 && a.ndim() == 2 && a.shape()[1] == cols, IOError,
             "{}: entry '{}': expected int64 [N,{}], found {}", source, entry, cols, describe(a));
  return a.to_vector<int64_t>();
}

Device read_device(int64_t kind, int64_t id, std::string_view source, std::string_view entry) {
  bool ok = (kind == static_cast<int64_t>(DeviceKind::kCPU) || kind == static_cast<int64_t>(DeviceKind::kCUDA)) &&
            id >= 0 && id < kMaxDevicesPerKind;
  KILN_CHECK(ok, IOError, "{}: entry '{}': device kind {} id {} is not a device (kinds 1 cpu, 2 cuda; ids 0 to {})",
             source, entry, kind, id, kMaxDevicesPerKind - 1);
  return Device{static_cast<DeviceKind>(kind), static_cast<int>(id)};
}

bool shapes_fit(const Shape& want, const Shape& have) {  // want may have unknown (0) dims
  if (want.ndim() != have.ndim()) return false;
  for (int i = 0; i < want.ndim(); ++i) {
    if (want[i] != 0 && want[i] != have[i]) return false;
  }
  return true;
}

}  // namespace

NDArray scalar_i64(int64_t v) { return host_i64({v}, Shape{1}); }

NDArray scalar_f64(double v) {
  NDArray a = NDArray::empty(Shape{1}, {DType::kFloat64, Device::cpu(0)});
  std::memcpy(a.data(), &v, sizeof v);
  return a;
}

const NDArray& read_entry(const NamedArrays& arrays, std::string_view entry, std::string_view source) {
  for (const auto& [n, a] : arrays) {
    if (n == entry) return a;
  }
  throw IOError(fmt::format("{}: entry '{}' is missing", source, entry));
}

int64_t read_i64(const NamedArrays& arrays, std::string_view entry, std::string_view source) {
  const NDArray& a = read_entry(arrays, entry, source);
  KILN_CHECK(!a.is_none() && a.dtype() == DType::kInt64 && a.size() == 1, IOError,
             "{}: entry '{}': expected one int64, found {}", source, entry, describe(a));
  return a.item<int64_t>();
}

double read_f64(const NamedArrays& arrays, std::string_view entry, std::string_view source) {
  const NDArray& a = read_entry(arrays, entry, source);
  KILN_CHECK(!a.is_none() && a.dtype() == DType::kFloat64 && a.size() == 1, IOError,
             "{}: entry '{}': expected one float64, found {}", source, entry, describe(a));
  return a.item<double>();
}

Checkpoint capture_training(const nn::ParameterDict& params, const Trainer& trainer, const RunPosition& pos,
                            const data::DataLoader& loader) {
  Checkpoint c;
  NamedArrays p;
  for (const auto& [name, param] : params) {
    KILN_CHECK(param.is_initialized(), ValueError,
               "checkpoint: parameter '{}' is not initialized yet (checkpoint after the first step)", name);
    p.emplace_back(name, param.list_data().front().detach());
  }
  c.add("params", std::move(p));
  c.add("optimizer", trainer.optimizer().state_arrays());
  c.add("trainer", {{"step", scalar_i64(pos.step)}, {"learning_rate", scalar_f64(trainer.learning_rate())}});

  nd::random::GeneratorState g = nd::random::get_state();
  std::vector<int64_t> streams;
  for (const auto& s : g.streams) {
    streams.insert(streams.end(),
                   {static_cast<int64_t>(s.device.kind), s.device.id, std::bit_cast<int64_t>(s.seed), s.offset});
  }
  nd::DropoutState d = nd::dropout_state();
  std::vector<int64_t> drawn;
  for (const auto& [dev, n] : d.drawn) drawn.insert(drawn.end(), {static_cast<int64_t>(dev.kind), dev.id, n});
  c.add("rng", {{"random:seed", scalar_i64(std::bit_cast<int64_t>(g.global_seed))},
                {"random:streams", host_i64(streams, Shape{static_cast<int64_t>(g.streams.size()), 4})},
                {"dropout:seed", scalar_i64(std::bit_cast<int64_t>(d.seed))},
                {"dropout:drawn", host_i64(drawn, Shape{static_cast<int64_t>(d.drawn.size()), 3})}});

  const data::LoaderPosition& l = pos.data;
  c.add("data", {{"epoch", scalar_i64(pos.epoch)},
                 {"shuffle_seed", scalar_i64(std::bit_cast<int64_t>(loader.seed()))},
                 {"batch_size", scalar_i64(loader.batch_size())},
                 {"dataset_size", scalar_i64(loader.dataset().size())},
                 {"pass", scalar_i64(std::bit_cast<int64_t>(l.epoch))},
                 {"batch", scalar_i64(l.batch)},
                 {"carry", host_i64(l.carry, Shape{static_cast<int64_t>(l.carry.size())})}});
  return c;
}

TrainingState decode_training(const Checkpoint& c, std::string_view source, const nn::ParameterDict& params,
                              const Trainer& trainer, const data::DataLoader& loader) {
  std::set<std::string_view> known(std::begin(kTrainingSections), std::end(kTrainingSections));
  for (const CheckpointSection& s : c.sections) {
    KILN_CHECK(!s.required || known.contains(s.name), IOError,
               "{}: section '{}' is required to resume but this Kiln does not know it (written by a newer Kiln?)",
               source, s.name);
  }
  TrainingState st;

  // params: exactly the model's, shapes and dtypes equal.
  std::string src = fmt::format("{}: section 'params'", source);
  const NamedArrays& saved = c.section("params", source);
  std::vector<std::string> problems;
  std::set<std::string_view> seen;
  for (const auto& [n, a] : saved) {
    if (!seen.insert(n).second) problems.push_back(fmt::format("'{}' appears twice", n));
    if (!params.contains(n)) problems.push_back(fmt::format("'{}' is not a parameter of this model", n));
  }
  for (const auto& entry : params) {
    const std::string& name = entry.first;
    const auto& p = entry.second;
    auto it = std::find_if(saved.begin(), saved.end(), [&](const auto& e) { return e.first == name; });
    if (it == saved.end()) {
      problems.push_back(fmt::format("'{}' is missing", name));
    } else if (it->second.is_none() || !shapes_fit(p.shape(), it->second.shape()) || it->second.dtype() != p.dtype()) {
      problems.push_back(
          fmt::format("'{}': expected {} {}, found {}", name, p.dtype(), p.shape(), describe(it->second)));
    } else {
      st.params.emplace_back(name, it->second);
    }
  }
  if (!problems.empty()) {
    if (problems.size() > 8) {
      size_t more = problems.size() - 8;
      problems.resize(8);
      problems.push_back(fmt::format("and {} more", more));
    }
    throw IOError(fmt::format("{}: does not fit this model: {}", src, fmt::join(problems, "; ")));
  }

  // optimizer: checked by loading it into a scratch copy of the same type is
  // not possible (optimizers are not copyable), so check its layout here.
  st.optimizer = c.section("optimizer", source);
  std::string want = "optimizer:" + trainer.optimizer().name();
  KILN_CHECK(!st.optimizer.empty() && st.optimizer[0].first == want, IOError,
             "{}: section 'optimizer': expected the state of '{}', found '{}'", source, trainer.optimizer().name(),
             st.optimizer.empty() ? std::string("nothing") : st.optimizer[0].first);
  for (const auto& [n, a] : st.optimizer) {
    KILN_CHECK(!a.is_none(), IOError, "{}: section 'optimizer': entry '{}' holds no array", source, n);
  }

  src = fmt::format("{}: section 'trainer'", source);
  const NamedArrays& t = c.section("trainer", source);
  st.position.step = read_i64(t, "step", src);
  st.learning_rate = read_f64(t, "learning_rate", src);
  KILN_CHECK(st.position.step >= 0, IOError, "{}: step {} is negative", src, st.position.step);
  KILN_CHECK(std::isfinite(st.learning_rate) && st.learning_rate >= 0, IOError,
             "{}: learning_rate {} is not a finite value >= 0", src, st.learning_rate);
  int64_t num_update = read_i64(st.optimizer, want, fmt::format("{}: section 'optimizer'", source));
  KILN_CHECK(num_update == st.position.step, IOError,
             "{}: the trainer took {} steps but the optimizer counted {} updates", source, st.position.step,
             num_update);

  src = fmt::format("{}: section 'rng'", source);
  const NamedArrays& r = c.section("rng", source);
  st.random.global_seed = std::bit_cast<uint64_t>(read_i64(r, "random:seed", src));
  std::vector<int64_t> rows = read_table(r, "random:streams", 4, src);
  for (size_t i = 0; i < rows.size(); i += 4) {
    KILN_CHECK(rows[i + 3] >= 0, IOError, "{}: entry 'random:streams': row {} has a negative offset {}", src, i / 4,
               rows[i + 3]);
    st.random.streams.push_back(
        {read_device(rows[i], rows[i + 1], src, "random:streams"), std::bit_cast<uint64_t>(rows[i + 2]), rows[i + 3]});
  }
  st.dropout.seed = std::bit_cast<uint64_t>(read_i64(r, "dropout:seed", src));
  rows = read_table(r, "dropout:drawn", 3, src);
  for (size_t i = 0; i < rows.size(); i += 3) {
    KILN_CHECK(rows[i + 2] >= 0, IOError, "{}: entry 'dropout:drawn': row {} has a negative count {}", src, i / 3,
               rows[i + 2]);
    st.dropout.drawn.emplace_back(read_device(rows[i], rows[i + 1], src, "dropout:drawn"), rows[i + 2]);
  }

  src = fmt::format("{}: section 'data'", source);
  const NamedArrays& d = c.section("data", source);
  st.position.epoch = read_i64(d, "epoch", src);
  uint64_t seed = std::bit_cast<uint64_t>(read_i64(d, "shuffle_seed", src));
  KILN_CHECK(seed == loader.seed(), IOError,
             "{}: the data was shuffled with seed {}, this run's loader has seed {} (resume with the same --seed)", src,
             seed, loader.seed());
  int64_t batch_size = read_i64(d, "batch_size", src), dataset_size = read_i64(d, "dataset_size", src);
  KILN_CHECK(batch_size == loader.batch_size() && dataset_size == loader.dataset().size(), IOError,
             "{}: saved for batches of {} from {} samples, this run's loader has batches of {} from {} samples (the "
             "position in the data would mean other samples)",
             src, batch_size, dataset_size, loader.batch_size(), loader.dataset().size());
  st.position.data.epoch = std::bit_cast<uint64_t>(read_i64(d, "pass", src));
  st.position.data.batch = read_i64(d, "batch", src);
  KILN_CHECK(st.position.data.batch >= 0, IOError, "{}: batch {} is negative", src, st.position.data.batch);
  const NDArray& carry = read_entry(d, "carry", src);
  KILN_CHECK(!carry.is_none() && carry.dtype() == DType::kInt64 && carry.ndim() == 1, IOError,
             "{}: entry 'carry': expected int64 [N], found {}", src, describe(carry));
  st.position.data.carry = carry.to_vector<int64_t>();
  for (int64_t i : st.position.data.carry) {
    KILN_CHECK(i >= 0 && i < loader.dataset().size(), IOError,
               "{}: entry 'carry': sample {} is outside the dataset's {} samples", src, i, loader.dataset().size());
  }
  return st;
}

void apply_training(const TrainingState& st, const nn::ParameterDict& params, Trainer& trainer,
                    data::DataLoader& loader) {
  for (const auto& [name, a] : st.params) {
    nn::Parameter p = params.at(name);
    p.set_data(a);  // into every existing copy; completes a deferred initialization
  }
  Device home = params.empty() || !params.begin()->second.is_initialized()
                    ? Device::cpu(0)
                    : params.begin()->second.list_devices().front();
  trainer.optimizer().load_state_arrays(st.optimizer, "checkpoint optimizer state", home);
  if (!trainer.optimizer().has_schedule()) trainer.set_learning_rate(st.learning_rate);
  nd::random::set_state(st.random);
  nd::set_dropout_state(st.dropout);
  loader.seek(st.position.data);
}

}  // namespace kiln::train
