// Embedding: the op (rows by id, its scatter-add gradient, the id check) and
// the layer (hybridized, exported as MXNet's Embedding and imported again).
// Finite-difference first and second order checks of the op are in
// higher_order_grad_test with every other op.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <vector>

#include "frontend/kiln.h"
#include "tests/test_util.h"

namespace kiln {
namespace {

NDArray ids(std::vector<int32_t> v, Shape s) { return nd::array(v, s); }

NDArray table() {  // row r is (10 r, 10 r + 1, 10 r + 2)
  std::vector<float> v;
  for (int r = 0; r < 5; ++r)
    for (int c = 0; c < 3; ++c) v.push_back(static_cast<float>(10 * r + c));
  return nd::array(v, Shape{5, 3});
}

TEST(Embedding, PicksRowsByIdAndKeepsTheIdsShape) {
  NDArray y = nd::embedding(ids({4, 0, 2, 2}, {2, 2}), table());
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{40, 41, 42, 0, 1, 2, 20, 21, 22, 20, 21, 22}));
}

TEST(Embedding, GradientAddsRowsOfRepeatedIds) {
  NDArray w = table();
  w.attach_grad();
  {
    autograd::Record record;
    NDArray y = nd::embedding(ids({1, 3, 1, 1}, {4}), w);
    autograd::backward({nd::sum(y * nd::array(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, Shape{4, 3}))});
  }
  // Row 1 gets rows 0, 2 and 3 of dy; row 3 gets row 1; the rest nothing.
  EXPECT_EQ(w.grad().to_vector<float>(),
            (std::vector<float>{0, 0, 0, 1 + 7 + 10, 2 + 8 + 11, 3 + 9 + 12, 0, 0, 0, 4, 5, 6, 0, 0, 0}));
}

TEST(Embedding, OutOfRangeIdNamesTheIdAndTheVocabulary) {
  std::string msg = test::error_of<IndexError>([&] { nd::embedding(ids({0, 7}, {2}), table()).wait_to_read(); });
  EXPECT_NE(msg.find("token id 7"), std::string::npos) << msg;
  EXPECT_NE(msg.find("vocabulary of 5"), std::string::npos) << msg;
  msg = test::error_of<IndexError>([&] { nd::embedding(ids({-1}, {1}), table()).wait_to_read(); });
  EXPECT_NE(msg.find("token id -1"), std::string::npos) << msg;
}

TEST(Embedding, WeightOfTheWrongShapeIsAShapeError) {
  EmbeddingAttrs a{.input_dim = 6, .output_dim = 3};
  std::string msg = test::error_of<ShapeError>(
      [&] { invoke1(OpId::kEmbedding, {ids({0}, {1}), table()}, OpAttrs::make(a)); });
  EXPECT_NE(msg.find("[6, 3]"), std::string::npos) << msg;
}

TEST(Embedding, LayerHybridizesExportsAndImports) {
  nn::Embedding emb(50, 8);
  EXPECT_EQ(emb.to_string(), "Embedding(50 -> 8, float32)");
  nd::random::seed(3);
  emb.initialize(init::Normal(1.0));
  NDArray x = ids({3, 49, 0, 3, 7, 12}, {2, 3});
  NDArray want = emb(x);
  emb.hybridize();
  EXPECT_EQ(emb(x).to_vector<float>(), want.to_vector<float>());
  auto dir = std::filesystem::temp_directory_path() / fmt::format("kiln_embedding_{}", ::getpid());
  std::filesystem::create_directories(dir);
  auto [json, params] = emb.export_model((dir / "emb").string());
  auto back = nn::SymbolBlock::imports(json, {"data"}, params);
  EXPECT_EQ(back(x).to_vector<float>(), want.to_vector<float>());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace kiln
