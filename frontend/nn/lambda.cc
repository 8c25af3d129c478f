#include "frontend/nn/lambda.h"

namespace kiln::nn {
namespace {

std::shared_ptr<const LambdaFunction> checked(LambdaFunction fn, std::string_view block) {
  KILN_CHECK(fn != nullptr, ValueError, "{}: the function is empty", block);
  return std::make_shared<const LambdaFunction>(std::move(fn));
}

}  // namespace

Lambda::Lambda(LambdaFunction fn, std::string description)
    : fn_(checked(std::move(fn), "Lambda")), description_(std::move(description)) {}
NDArray Lambda::forward(const NDArray& x) { return (*fn_)(x); }
std::string Lambda::to_string() const { return fmt::format("{}({})", type_name(), description_); }

HybridLambda::HybridLambda(LambdaFunction fn, std::string description)
    : fn_(checked(std::move(fn), "HybridLambda")), description_(std::move(description)) {}
NDArray HybridLambda::forward(const NDArray& x) { return (*fn_)(x); }
std::string HybridLambda::to_string() const { return fmt::format("{}({})", type_name(), description_); }

}  // namespace kiln::nn
