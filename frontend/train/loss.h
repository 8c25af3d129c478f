// Loss functions (Gluon's gluon.loss): each returns one value per sample, a
// [N] array, so the caller decides how to reduce (backward of a non-scalar
// head uses ones as head gradient, which sums, as in Gluon).
//
//   loss::SoftmaxCrossEntropy ce;
//   NDArray l = ce(net(X), y);        // [N]; y holds class ids 0..C-1
//   autograd::backward({l});
#pragma once

#include <cstdint>

#include "frontend/ndarray.h"

namespace kiln::loss {

// -log softmax(pred)[label], from logits, sparse labels. A label outside
// 0..C-1 fails at the next read with an error naming the label and C.
struct SoftmaxCrossEntropy {
  NDArray operator()(const NDArray& pred, const NDArray& label) const;
};

// Cross-entropy over sequences with an ignored label (PyTorch's
// CrossEntropyLoss(ignore_index) with reduction "mean"): pred holds logits
// [..., V] (e.g. [N, T, V]), label the class ids [...] (e.g. [N, T], any
// numeric dtype). Returns a scalar: the mean of -log softmax(pred)[label]
// over the positions whose label is not ignore_index (0 when every label is
// ignored). Ignored positions get no gradient. A label outside 0..V-1 other
// than ignore_index fails at the next read with an error naming it and V.
// ShapeError naming both shapes when label's shape is not pred's without its
// last axis.
struct SequenceSoftmaxCrossEntropy {
  int64_t ignore_index = -100;
  NDArray operator()(const NDArray& pred, const NDArray& label) const;
};

// 0.5 * (pred - label)^2, averaged over all but the batch axis.
struct L2Loss {
  double weight = 1.0;
  NDArray operator()(const NDArray& pred, const NDArray& label) const;
};

// |pred - label|, averaged over all but the batch axis.
struct L1Loss {
  double weight = 1.0;
  NDArray operator()(const NDArray& pred, const NDArray& label) const;
};

// Binary cross-entropy; from logits unless from_sigmoid (then pred is a
// probability). Averaged over all but the batch axis.
struct SigmoidBinaryCrossEntropy {
  bool from_sigmoid = false;
  NDArray operator()(const NDArray& pred, const NDArray& label) const;
};

}  // namespace kiln::loss
