// Sharding a batch over devices for data-parallel training (Gluon's
// split_and_load / d2l's split_batch).
//
//   auto xs = split_and_load(X, {Device::cpu(0), Device::cpu(1)});  // 7 rows -> 4 + 3
//   auto [xs, ys] = split_batch(X, y, devices);
//   for (size_t i = 0; i < xs.size(); ++i) losses.push_back(loss(net(xs[i]), ys[i]));
//   trainer.step(X.shape()[0]);   // rescale by the true global count
//
// Shards are contiguous row ranges along axis 0, taken as views (no copy) and
// moved with copy_to, so the copies run on the destination devices' copy
// lanes and overlap compute. A shard already on its device is the view
// itself. Balanced: sizes differ by at most one, larger shards first
// (7 over 3 devices: 3, 2, 2). Any batch size >= 1 works: when there are
// fewer rows than devices, the empty shards are not created, so the result
// has min(rows, devices) entries for devices[0], devices[1], ... in order
// (the Trainer treats parameters of devices that got no shard as stale and
// leaves them out of the gradient sum).
//
// even_split = true asks for equal shards and throws ValueError when the rows
// do not divide (MXNet's behaviour); false (the default) balances as above.
#pragma once

#include <utility>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln {

// Row counts of the shards of `rows` over `num_devices` (no zero entries).
// ValueError for rows < 1, num_devices < 1, or an uneven split with even_split.
std::vector<int64_t> split_sizes(int64_t rows, int num_devices, bool even_split = false);

// The shards of `batch` (ndim >= 1) along axis 0, shard i on devices[i].
std::vector<NDArray> split_and_load(const NDArray& batch, const std::vector<Device>& devices, bool even_split = false);

// split_and_load of features and labels with the same shard sizes
// (ShapeError when their first dims differ).
std::pair<std::vector<NDArray>, std::vector<NDArray>> split_batch(const NDArray& X, const NDArray& y,
                                                                  const std::vector<Device>& devices,
                                                                  bool even_split = false);

}  // namespace kiln
