#include "models/train_task.h"

#include <algorithm>

#include "frontend/data/byte_text.h"
#include "frontend/data/fashion_mnist.h"
#include "frontend/nd.h"
#include "frontend/train/loss.h"
#include "models/gpt.h"
#include "models/zoo.h"

namespace kiln::models {
namespace {

// The first `limit` rows of any dataset (train_limit / test_limit).
class FirstRows final : public data::Dataset {
 public:
  FirstRows(std::shared_ptr<const data::Dataset> all, int64_t n) : all_(std::move(all)), n_(n) {}
  int64_t size() const override { return n_; }
  data::Batch batch(std::span<const int64_t> indices, Device device) const override {
    for (int64_t i : indices) KILN_CHECK(i >= 0 && i < n_, IndexError, "sample {} out of range 0..{}", i, n_ - 1);
    return all_->batch(indices, device);
  }

 private:
  std::shared_ptr<const data::Dataset> all_;
  int64_t n_;
};

std::shared_ptr<const data::Dataset> first_rows(std::shared_ptr<const data::Dataset> all, int64_t limit) {
  if (limit <= 0 || limit >= all->size()) return all;
  return std::make_shared<const FirstRows>(std::move(all), limit);
}

}  // namespace

NDArray TrainTask::loss(const NDArray& out, const NDArray& label) const {
  loss::SoftmaxCrossEntropy ce;
  if (!text) return ce(out, label);
  // [N, T, V] logits, [N, T] labels: the mean over each row's positions.
  const Shape& s = out.shape();
  const int64_t n = s[0], t = s[1], v = s[2];
  NDArray per_byte = ce(nd::reshape(out, {n * t, v}), nd::reshape(label, {n * t}));
  return nd::mean(nd::reshape(per_byte, {n, t}), {1});
}

NDArray TrainTask::correct(const NDArray& out, const NDArray& label) const {
  NDArray guess = nd::argmax(out, out.ndim() - 1);
  return nd::sum(guess == (label.dtype() == guess.dtype() ? label : label.astype(guess.dtype())));
}

namespace {

// ValueError naming `model` unless it is one of the zoo's image models.
void require_image_model(const std::string& model) {
  std::vector<std::string> known = names();
  KILN_CHECK(std::find(known.begin(), known.end(), model) != known.end(), ValueError,
             "--model {}: unknown; expected one of {}, gpt", model, fmt::join(known, ", "));
}

}  // namespace

TrainConfig recipe_for(const std::string& model) {
  TrainConfig c;
  c.model = model;
  if (model == "gpt") {
    c.batch_size = 32;
    c.optimizer = "adamw";
    c.lr = 1e-3;
    c.wd = 0.1;
    c.warmup_steps = 100;
    c.lr_schedule = "cosine";
    c.clip_grad_norm = 1;
    return c;
  }
  require_image_model(model);
  return c;
}

TrainTask make_task(const TrainConfig& cfg) {
  TrainTask t;
  if (cfg.model == "gpt") {
    t.data_name = "fortunes";
    t.item = "tokens";
    t.text = true;
    t.default_init = "normal:0.02";
    data::ByteCorpus corpus =
        data::ByteCorpus::fortunes(cfg.data_dir.empty() ? data::ByteCorpus::fortunes_dir() : cfg.data_dir);
    auto [train, held] = corpus.split(0.1);
    t.train = first_rows(std::make_shared<const data::ByteWindows>(train, cfg.gpt.context,
                                                                   data::WindowOptions{.seed = cfg.seed}),
                         cfg.train_limit);
    t.test = first_rows(
        std::make_shared<const data::ByteWindows>(held, cfg.gpt.context, data::WindowOptions{.jitter = false}),
        cfg.test_limit);
    GptConfig g = cfg.gpt;
    g.vocab = data::ByteCorpus::kVocab;
    t.net = std::make_shared<Gpt>(g);
    return t;
  }
  require_image_model(cfg.model);
  t.data_name = "Fashion-MNIST";
  t.item = "images";
  t.default_init = "xavier";
  const std::string dir = cfg.data_dir.empty() ? data::FashionMNIST::default_dir() : cfg.data_dir;
  t.train = first_rows(std::make_shared<const data::FashionMNIST>(data::FashionMNIST::train(dir)), cfg.train_limit);
  t.test = first_rows(std::make_shared<const data::FashionMNIST>(data::FashionMNIST::test(dir)), cfg.test_limit);
  t.net = std::make_shared<nn::HybridSequential>(make(cfg.model, data::FashionMNIST::kClasses));
  return t;
}

}  // namespace kiln::models
