// The mixed-precision policy of every op (OpDef::amp, OpDef::amp_float32_inputs),
// in one list so that it reads as a policy: which ops run in 16-bit floats,
// which stay float32, which promote. Ops not named follow their inputs.
//
// Like MXNet's AMP lists and PyTorch's autocast lists: the matrix products
// gain from tile units and tensor cores; softmax, losses, norms, exp, log,
// sinh, cosh, powers and LayerNorm lose range or accuracy in 16 bits and run
// in float32; binary ops, concatenation and PReLU (data with its slope
// parameter) meet in the widest dtype among their inputs.
#include "ir/op.h"

namespace kiln {

void register_amp_policies(OpRegistry& r) {
  for (OpId id : {OpId::kConvolution, OpId::kFullyConnected, OpId::kDot, OpId::kBatchDot, OpId::kConvAct,
                  OpId::kFcAct})
    r.defined(id).amp = AmpPolicy::kLow;
  for (OpId id : {OpId::kSoftmax, OpId::kLogSoftmax, OpId::kSoftmaxCrossEntropy, OpId::kNorm, OpId::kExp, OpId::kLog,
                  OpId::kSinh, OpId::kCosh, OpId::kBroadcastPower, OpId::kPowerScalar, OpId::kRPowerScalar,
                  OpId::kLayerNorm})
    r.defined(id).amp = AmpPolicy::kFloat32;
  for (OpId id : {OpId::kElemwiseAdd, OpId::kElemwiseSub, OpId::kElemwiseMul, OpId::kElemwiseDiv, OpId::kBroadcastAdd,
                  OpId::kBroadcastSub, OpId::kBroadcastMul, OpId::kBroadcastDiv, OpId::kBroadcastMaximum,
                  OpId::kBroadcastMinimum, OpId::kBroadcastMod, OpId::kBroadcastFmod, OpId::kBroadcastEqual,
                  OpId::kBroadcastNotEqual, OpId::kBroadcastGreater, OpId::kBroadcastGreaterEqual,
                  OpId::kBroadcastLesser, OpId::kBroadcastLesserEqual, OpId::kWhere, OpId::kConcat, OpId::kStack,
                  OpId::kAddN, OpId::kLeakyReLU})
    r.defined(id).amp = AmpPolicy::kPromote;
  // BatchNorm: data in any float dtype; gamma, beta, moving_mean, moving_var float32.
  r.defined(OpId::kBatchNorm).amp_float32_inputs = 0b11110;
  // _backward_BatchNorm(out_grad, data, gamma, mean, var).
  r.defined(OpId::kBatchNormBackward).amp_float32_inputs = 0b11100;
}

}  // namespace kiln
