// Named arrays: the values half of Kiln's neutral model form (an ir::Graph
// plus the arrays its params, aux states and constants take, by node name).
// Every model format (frontend/formats/<format>/) reads into and writes from
// these.
//
//   NamedArrays list = mxnet::load_ndarrays("net.params");   // file order, names as stored
//   ArrayMap by_name(list.begin(), list.end());               // lookup by name
#pragma once

#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "frontend/ndarray.h"

namespace kiln {

// Arrays in a file's (or a graph's) order; names may repeat or be empty
// where a format allows it (MXNet's unnamed lists).
using NamedArrays = std::vector<std::pair<std::string, NDArray>>;
// Arrays by unique name.
using ArrayMap = std::map<std::string, NDArray, std::less<>>;

}  // namespace kiln
