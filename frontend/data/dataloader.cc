#include "frontend/data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include "ir/error.h"

namespace kiln::data {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, LoaderOptions options)
    : dataset_(std::move(dataset)), batch_size_(batch_size), options_(options) {
  KILN_CHECK(batch_size_ >= 1, ValueError, "DataLoader: batch_size must be >= 1, got {}", batch_size_);
  KILN_CHECK(options_.prefetch >= 0, ValueError, "DataLoader: prefetch must be >= 0, got {}", options_.prefetch);
}

LoaderPosition DataLoader::position(int64_t batches_done) const {
  LoaderPosition p = pass_start_;
  p.batch = batches_done;
  return p;
}

void DataLoader::seek(const LoaderPosition& p) {
  KILN_CHECK(p.batch >= 0, ValueError, "DataLoader::seek: batch must be >= 0, got {}", p.batch);
  for (int64_t i : p.carry) {
    KILN_CHECK(i >= 0 && i < dataset_->size(), IndexError,
               "DataLoader::seek: carried sample {} is outside the dataset's {} samples", i, dataset_->size());
  }
  epoch_ = p.epoch;
  carry_ = p.carry;
  skip_ = p.batch;
}

std::vector<std::vector<int64_t>> DataLoader::next_epoch_plan() {
  pass_start_ = {.epoch = epoch_, .carry = carry_, .batch = 0};
  std::vector<int64_t> order(static_cast<size_t>(dataset_->size()));
  std::iota(order.begin(), order.end(), 0);
  if (options_.shuffle) {
    std::mt19937_64 rng(options_.seed * 0x9e3779b97f4a7c15ull + epoch_);
    std::shuffle(order.begin(), order.end(), rng);
  }
  ++epoch_;
  order.insert(order.begin(), carry_.begin(), carry_.end());
  carry_.clear();
  std::vector<std::vector<int64_t>> plan;
  for (size_t b = 0; b < order.size(); b += static_cast<size_t>(batch_size_)) {
    size_t e = std::min(order.size(), b + static_cast<size_t>(batch_size_));
    std::vector<int64_t> batch(order.begin() + static_cast<std::ptrdiff_t>(b),
                               order.begin() + static_cast<std::ptrdiff_t>(e));
    if (static_cast<int64_t>(batch.size()) < batch_size_) {
      if (options_.last_batch == LastBatch::kDiscard) break;
      if (options_.last_batch == LastBatch::kRollover) {
        carry_ = std::move(batch);
        break;
      }
    }
    plan.push_back(std::move(batch));
  }
  return plan;
}

// One pass: a producer thread fills a bounded queue with ready batches.
struct DataLoader::Epoch {
  std::shared_ptr<const Dataset> dataset;
  Device device;
  std::vector<std::vector<int64_t>> plan;
  size_t capacity = 2;

  std::mutex mu;
  std::condition_variable cv;
  std::deque<Batch> ready;
  size_t produced = 0, consumed = 0;
  std::exception_ptr error;
  bool stop = false;
  std::thread producer;

  void produce() {
    for (size_t i = 0; i < plan.size(); ++i) {
      Batch b;
      try {
        b = dataset->batch(plan[i], device);
      } catch (...) {
        std::lock_guard lock(mu);
        error = std::current_exception();
        cv.notify_all();
        return;
      }
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stop || ready.size() < capacity; });
      if (stop) return;
      ready.push_back(std::move(b));
      ++produced;
      cv.notify_all();
    }
  }

  // Returns false at the end of the epoch.
  bool next(Batch& out) {
    if (consumed == plan.size()) return false;
    if (capacity == 0) {  // synchronous
      out = dataset->batch(plan[consumed++], device);
      return true;
    }
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return !ready.empty() || error; });
    if (ready.empty()) std::rethrow_exception(error);
    out = std::move(ready.front());
    ready.pop_front();
    ++consumed;
    cv.notify_all();
    return true;
  }

  ~Epoch() {
    {
      std::lock_guard lock(mu);
      stop = true;
    }
    cv.notify_all();
    if (producer.joinable()) producer.join();
  }
};

DataLoader::Iterator DataLoader::begin() {
  auto epoch = std::make_shared<Epoch>();
  epoch->dataset = dataset_;
  epoch->device = options_.device;
  epoch->plan = next_epoch_plan();
  size_t skip = std::min(epoch->plan.size(), static_cast<size_t>(skip_));
  epoch->plan.erase(epoch->plan.begin(), epoch->plan.begin() + static_cast<std::ptrdiff_t>(skip));
  skip_ = 0;
  epoch->capacity = static_cast<size_t>(options_.prefetch);
  if (epoch->capacity > 0) epoch->producer = std::thread([e = epoch.get()] { e->produce(); });
  return Iterator(std::move(epoch));
}

DataLoader::Iterator::Iterator(std::shared_ptr<Epoch> epoch) : epoch_(std::move(epoch)), done_(false) { ++*this; }

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  if (!epoch_->next(current_)) {
    done_ = true;
    epoch_.reset();  // stops and joins the producer
    current_ = {};
  }
  return *this;
}

}  // namespace kiln::data
