// The model zoo: the reference chapter's models and Gluon's resnet18_v1.
//
//   auto net = models::lenet();          // d2l 12.5
//   auto res = models::resnet18(10);     // d2l 12.6: 3x3 stem, no max-pool
//   auto any = models::make("resnet18", 10);
//
// Every model is a HybridSequential of Gluon-style layers, so it prints,
// summarizes, trains and (issue 4) hybridizes like any other block.
#pragma once

#include <string>
#include <vector>

#include "frontend/nn/nn.h"

namespace kiln::models {

// d2l 12.1's MLP: 512 -> 256 -> 128 -> 2 with relu (input size deferred).
nn::HybridSequential mlp_chapter();
// The wider MLP: 512 -> 2048 -> 512 -> 1 with relu.
nn::HybridSequential mlp_wide();
// A Fashion-MNIST MLP: flatten -> 256 relu -> num_classes.
nn::HybridSequential mlp(int num_classes = 10);
// d2l 12.5 LeNet: conv 20 3x3 -> relu -> avg-pool 2 -> conv 50 5x5 -> relu ->
// avg-pool 2 -> dense 128 -> relu -> dense num_classes.
nn::HybridSequential lenet(int num_classes = 10);
// d2l 12.6 ResNet-18: 3x3 stride-1 stem + BatchNorm + relu, no max-pool, four
// stages of two residual blocks (1x1 stride-2 shortcut opening stages 2-4),
// global average pool, dense.
nn::HybridSequential resnet18(int num_classes = 10);
// Gluon model zoo's resnet18_v1: 7x7 stride-2 stem + BatchNorm + relu + 3x3
// stride-2 max-pool, the same four stages, global average pool, flatten, dense.
nn::HybridSequential resnet18_v1(int num_classes = 1000);

// By name: mlp, lenet, resnet18, resnet18_v1, mlp_chapter, mlp_wide.
nn::HybridSequential make(const std::string& name, int num_classes = 10);
std::vector<std::string> names();

}  // namespace kiln::models
