#include "models/zoo.h"

#include "frontend/nd.h"

namespace kiln::models {
namespace {

// A basic residual block (d2l's Residual; Gluon's BasicBlockV1):
// relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).
class Residual : public nn::HybridBlock {
 public:
  Residual(int64_t channels, int64_t strides, bool use_1x1conv)
      : conv1_(channels, 3, strides, 1), conv2_(channels, 3, 1, 1), bn1_(), bn2_() {
    register_child("conv1", conv1_);
    register_child("bn1", bn1_);
    register_child("conv2", conv2_);
    register_child("bn2", bn2_);
    if (use_1x1conv) {
      conv3_ = nn::Conv2D(channels, 1, strides);
      register_child("conv3", *conv3_);
    }
  }

  NDArray forward(const NDArray& x) override {
    NDArray y = nd::relu(bn1_(conv1_(x)));
    y = bn2_(conv2_(y));
    return nd::relu(y + (conv3_ ? (*conv3_)(x) : x));
  }

 private:
  nn::Conv2D conv1_, conv2_;
  nn::BatchNorm bn1_, bn2_;
  std::optional<nn::Conv2D> conv3_;
};

// Gluon model zoo's BasicBlockV1: bias-free 3x3 convolutions, and a
// downsample path of a bias-free 1x1 convolution followed by BatchNorm.
class BasicBlockV1 : public nn::HybridBlock {
 public:
  BasicBlockV1(int64_t channels, int64_t strides, bool downsample) {
    body_.add(nn::Conv2D(channels, 3, strides, 1, 1, 1, "", false), nn::BatchNorm(), nn::Activation("relu"),
              nn::Conv2D(channels, 3, 1, 1, 1, 1, "", false), nn::BatchNorm());
    register_child("body", body_);
    if (downsample) {
      nn::HybridSequential d;
      d.add(nn::Conv2D(channels, 1, strides, 0, 1, 1, "", false), nn::BatchNorm());
      downsample_ = d;
      register_child("downsample", *downsample_);
    }
  }

  NDArray forward(const NDArray& x) override {
    return nd::relu(body_(x) + (downsample_ ? (*downsample_)(x) : x));
  }

 private:
  nn::HybridSequential body_;
  std::optional<nn::HybridSequential> downsample_;
};

// Four stages of two blocks; stages 2-4 open with a stride-2 block.
template <typename BlockT>
void add_resnet18_stages(nn::HybridSequential& net) {
  int64_t channels = 64;
  for (int stage_index = 0; stage_index < 4; ++stage_index, channels *= 2) {
    nn::HybridSequential stage;
    for (int i = 0; i < 2; ++i) {
      bool downsample = i == 0 && stage_index > 0;
      stage.add(BlockT(channels, downsample ? 2 : 1, downsample));
    }
    net.add(stage);
  }
}

}  // namespace

nn::HybridSequential mlp_chapter() {
  nn::HybridSequential net;
  net.add(nn::Dense(256, "relu"), nn::Dense(128, "relu"), nn::Dense(2));
  return net;
}

nn::HybridSequential mlp_wide() {
  nn::HybridSequential net;
  net.add(nn::Dense(2048, "relu"), nn::Dense(512, "relu"), nn::Dense(1));
  return net;
}

nn::HybridSequential mlp(int num_classes) {
  nn::HybridSequential net;
  net.add(nn::Dense(256, "relu"), nn::Dense(num_classes));
  return net;
}

nn::HybridSequential lenet(int num_classes) {
  nn::HybridSequential net;
  net.add(nn::Conv2D(20, 3, 1, 0, 1, 1, "relu"), nn::AvgPool2D(2, 2), nn::Conv2D(50, 5, 1, 0, 1, 1, "relu"),
          nn::AvgPool2D(2, 2), nn::Dense(128, "relu"), nn::Dense(num_classes));
  return net;
}

nn::HybridSequential resnet18(int num_classes) {
  nn::HybridSequential net;
  net.add(nn::Conv2D(64, 3, 1, 1), nn::BatchNorm(), nn::Activation("relu"));
  add_resnet18_stages<Residual>(net);
  net.add(nn::GlobalAvgPool2D(), nn::Dense(num_classes));
  return net;
}

nn::HybridSequential resnet18_v1(int num_classes) {
  nn::HybridSequential net;
  net.add(nn::Conv2D(64, 7, 2, 3, 1, 1, "", false), nn::BatchNorm(), nn::Activation("relu"),
          nn::MaxPool2D(3, 2, 1));
  add_resnet18_stages<BasicBlockV1>(net);
  net.add(nn::GlobalAvgPool2D(), nn::Flatten(), nn::Dense(num_classes));
  return net;
}

std::vector<std::string> names() { return {"mlp", "lenet", "resnet18", "resnet18_v1", "mlp_chapter", "mlp_wide"}; }

nn::HybridSequential make(const std::string& name, int num_classes) {
  if (name == "mlp") return mlp(num_classes);
  if (name == "lenet") return lenet(num_classes);
  if (name == "resnet18") return resnet18(num_classes);
  if (name == "resnet18_v1") return resnet18_v1(num_classes);
  if (name == "mlp_chapter") return mlp_chapter();
  if (name == "mlp_wide") return mlp_wide();
  throw ValueError(fmt::format("unknown model '{}' (known: mlp, lenet, resnet18, resnet18_v1, mlp_chapter, mlp_wide)",
                               name));
}

}  // namespace kiln::models
