// The NDArray operator surface (namespace kiln::nd and arithmetic operators).
// One header per op family; each function is a thin call to `invoke`.
#pragma once

#include "frontend/nd_attention.h"
#include "frontend/nd_conv.h"
#include "frontend/nd_elemwise.h"
#include "frontend/nd_init.h"
#include "frontend/nd_layer_norm.h"
#include "frontend/nd_linalg.h"
#include "frontend/nd_mask.h"
#include "frontend/nd_matrix.h"
#include "frontend/nd_nn.h"
#include "frontend/nd_optimizer.h"
#include "frontend/nd_reduce.h"
