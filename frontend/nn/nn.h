// Kiln's model-definition API (namespace kiln::nn, initializers in kiln::init):
// Gluon-style blocks, parameters and layers.
//
//   auto net = nn::HybridSequential();
//   net.add(nn::Dense(256, "relu"), nn::Dense(128, "relu"), nn::Dense(2));
//   net.initialize(init::Xavier());
//   NDArray y = net(nd::random::normal({1, 512}));
//   std::cout << net << "\n" << net.summary(nd::random::normal({1, 512}));
//   net.save_parameters("net.params");
#pragma once

#include "frontend/nn/activation.h"
#include "frontend/nn/batch_norm.h"
#include "frontend/nn/block.h"
#include "frontend/nn/concurrent.h"
#include "frontend/nn/conv2d.h"
#include "frontend/nn/dense.h"
#include "frontend/nn/dropout.h"
#include "frontend/nn/embedding.h"
#include "frontend/nn/flatten.h"
#include "frontend/nn/gelu.h"
#include "frontend/nn/initializer.h"
#include "frontend/nn/lambda.h"
#include "frontend/nn/multi_head_attention.h"
#include "frontend/nn/layer_norm.h"
#include "frontend/nn/parameter.h"
#include "frontend/nn/pooling.h"
#include "frontend/nn/sequential.h"
#include "frontend/nn/symbol_block.h"
#include "frontend/nn/sync_batch_norm.h"
#include "frontend/nn/transformer_block.h"
