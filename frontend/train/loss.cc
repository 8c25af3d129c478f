#include "frontend/train/loss.h"

#include "frontend/nd.h"

namespace kiln::loss {
namespace {

// Mean over every axis but the first: one value per sample.
NDArray per_sample_mean(const NDArray& x) {
  if (x.ndim() <= 1) return x;
  return nd::mean(x, {0}, false, /*exclude=*/true);
}

NDArray reshape_like(const NDArray& label, const NDArray& pred) {
  return label.shape() == pred.shape() ? label : label.reshape(pred.shape().to_vector());
}

}  // namespace

NDArray SoftmaxCrossEntropy::operator()(const NDArray& pred, const NDArray& label) const {
  return nd::softmax_cross_entropy(pred, label);
}

NDArray SequenceSoftmaxCrossEntropy::operator()(const NDArray& pred, const NDArray& label) const {
  const Shape& ps = pred.shape();
  Shape want;
  for (int i = 0; i + 1 < ps.ndim(); ++i) want.push_back(ps[i]);
  KILN_CHECK(ps.ndim() >= 2 && label.shape() == want, ShapeError,
             "SequenceSoftmaxCrossEntropy: label {} must be pred {} without its last (class) axis, {}", label.shape(),
             ps, ps.ndim() >= 2 ? fmt::format("{}", want) : std::string("(pred needs at least 2 axes)"));
  const int64_t classes = ps[ps.ndim() - 1], rows = want.size();
  NDArray lab = label.reshape({rows});
  NDArray keep = lab != static_cast<double>(ignore_index);   // 1 where counted, in label's dtype
  NDArray safe = nd::where(keep, lab, nd::zeros_like(lab));  // ignored labels read class 0, then masked out
  NDArray mask = keep.astype(pred.dtype());
  NDArray per = nd::softmax_cross_entropy(nd::reshape(pred, {rows, classes}), safe) * mask;
  return nd::sum(per) / nd::maximum(nd::sum(mask), 1.0);
}

NDArray L2Loss::operator()(const NDArray& pred, const NDArray& label) const {
  NDArray d = pred - reshape_like(label, pred);
  return per_sample_mean(nd::square(d) * (0.5 * weight));
}

NDArray L1Loss::operator()(const NDArray& pred, const NDArray& label) const {
  return per_sample_mean(nd::abs(pred - reshape_like(label, pred)) * weight);
}

NDArray SigmoidBinaryCrossEntropy::operator()(const NDArray& pred, const NDArray& label) const {
  NDArray z = reshape_like(label, pred);
  if (from_sigmoid) {
    constexpr double kEps = 1e-12;
    NDArray l = -(nd::log(pred + kEps) * z + nd::log(1.0 - pred + kEps) * (1.0 - z));
    return per_sample_mean(l);
  }
  // Stable form: max(x, 0) - x * z + log(1 + exp(-|x|)).
  NDArray l = nd::relu(pred) - pred * z + nd::log(nd::exp(-nd::abs(pred)) + 1.0);
  return per_sample_mean(l);
}

}  // namespace kiln::loss
