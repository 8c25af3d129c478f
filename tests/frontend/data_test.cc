// Fashion-MNIST IDX reading and validation; DataLoader batching and shuffling.
#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "frontend/data/dataloader.h"
#include "frontend/data/fashion_mnist.h"

namespace kiln::data {
namespace {

namespace fs = std::filesystem;

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// Writes a small IDX pair: n images whose pixels are i, and labels i % 10.
struct IdxFiles {
  fs::path dir;
  std::string images, labels;
  explicit IdxFiles(const std::string& name, uint32_t n, bool gzip = true) {
    dir = fs::temp_directory_path() / ("kiln_idx_" + name);
    fs::create_directories(dir);
    std::vector<uint8_t> img, lab;
    put_be32(img, 2051);
    put_be32(img, n);
    put_be32(img, 28);
    put_be32(img, 28);
    for (uint32_t i = 0; i < n; ++i) img.insert(img.end(), 784, static_cast<uint8_t>(i));
    put_be32(lab, 2049);
    put_be32(lab, n);
    for (uint32_t i = 0; i < n; ++i) lab.push_back(static_cast<uint8_t>(i % 10));
    images = write(gzip ? "img.gz" : "img", img, gzip);
    labels = write(gzip ? "lab.gz" : "lab", lab, gzip);
  }
  std::string write(const std::string& name, const std::vector<uint8_t>& bytes, bool gzip) const {
    std::string path = (dir / name).string();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                  static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }
  ~IdxFiles() { fs::remove_all(dir); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const IOError& e) {
    return e.what();
  }
  return "no IOError";
}

TEST(FashionMNIST, ReadsGzipAndPlainIdx) {
  for (bool gz : {true, false}) {
    IdxFiles files(gz ? "gz" : "plain", 12, gz);
    FashionMNIST ds(files.images, files.labels);
    ASSERT_EQ(ds.size(), 12);
    Batch b = ds.batch(std::vector<int64_t>{3, 11});
    EXPECT_EQ(b.data.shape(), (Shape{2, 1, 28, 28}));
    EXPECT_FLOAT_EQ(b.data.to_vector<float>()[0], 3.0f / 255.0f);
    EXPECT_EQ(b.label.to_vector<float>(), (std::vector<float>{3, 1}));
    FashionMNIST sub = ds.subset(10, 12);
    EXPECT_EQ(sub.size(), 2);
    EXPECT_EQ(sub.batch(std::vector<int64_t>{0}).label.item(), 0.0f);  // sample 10
  }
}

TEST(FashionMNIST, CorruptFilesGiveClearErrors) {
  IdxFiles files("corrupt", 5, false);
  EXPECT_NE(error_of([&] { FashionMNIST(files.dir.string() + "/missing", files.labels); }).find("cannot open"),
            std::string::npos);
  // Wrong magic: an images file where the labels belong.
  std::string msg = error_of([&] { FashionMNIST(files.images, files.images); });
  EXPECT_NE(msg.find("magic"), std::string::npos) << msg;
  EXPECT_NE(msg.find(files.images), std::string::npos) << msg;
  // Truncated images.
  fs::resize_file(files.images, 16 + 784 * 3);
  msg = error_of([&] { FashionMNIST(files.images, files.labels); });
  EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  // Count mismatch between images and labels.
  IdxFiles other("other", 4, false);
  msg = error_of([&] { FashionMNIST(other.images, files.labels); });
  EXPECT_NE(msg.find("4 images"), std::string::npos) << msg;
  // A label outside 0..9.
  std::vector<uint8_t> lab;
  put_be32(lab, 2049);
  put_be32(lab, 4);
  lab.insert(lab.end(), {1, 2, 42, 3});
  std::string bad = other.write("bad_labels", lab, false);
  msg = error_of([&] { FashionMNIST(other.images, bad); });
  EXPECT_NE(msg.find("label 42"), std::string::npos) << msg;
}

TEST(FashionMNIST, RealFilesWhenInstalled) {
  if (!fs::exists(FashionMNIST::default_dir() + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)";
  auto test = FashionMNIST::test();
  EXPECT_EQ(test.size(), 10000);
  std::vector<int> counts(10);
  for (int64_t i = 0; i < test.size(); ++i) ++counts[test.labels()[i]];
  for (int c : counts) EXPECT_EQ(c, 1000);  // balanced classes
}

ArrayDataset counting_dataset(int n) {
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) x[static_cast<size_t>(i)] = y[static_cast<size_t>(i)] = static_cast<float>(i);
  return ArrayDataset(x, Shape{1}, y);
}

std::vector<float> labels_of_epoch(DataLoader& loader, std::vector<int64_t>* sizes = nullptr) {
  std::vector<float> out;
  for (const Batch& b : loader) {
    auto v = b.label.to_vector<float>();
    if (sizes) sizes->push_back(b.label.size());
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

TEST(DataLoader, ShuffleCoversEverySampleOnceAndIsReproducible) {
  DataLoader a(counting_dataset(103), 10, {.shuffle = true, .seed = 5});
  DataLoader b(counting_dataset(103), 10, {.shuffle = true, .seed = 5});
  DataLoader c(counting_dataset(103), 10, {.shuffle = true, .seed = 6});
  auto ea = labels_of_epoch(a), eb = labels_of_epoch(b), ec = labels_of_epoch(c);
  EXPECT_EQ(ea, eb);
  EXPECT_NE(ea, ec);
  std::set<float> seen(ea.begin(), ea.end());
  EXPECT_EQ(seen.size(), 103u);
  EXPECT_EQ(ea.size(), 103u);
  EXPECT_NE(labels_of_epoch(a), ea);  // the next epoch is shuffled differently
}

TEST(DataLoader, LastBatchModes) {
  std::vector<int64_t> sizes;
  DataLoader keep(counting_dataset(25), 10, {.last_batch = LastBatch::kKeep});
  labels_of_epoch(keep, &sizes);
  EXPECT_EQ(sizes, (std::vector<int64_t>{10, 10, 5}));
  sizes.clear();
  DataLoader discard(counting_dataset(25), 10, {.last_batch = LastBatch::kDiscard});
  labels_of_epoch(discard, &sizes);
  EXPECT_EQ(sizes, (std::vector<int64_t>{10, 10}));
  sizes.clear();
  DataLoader roll(counting_dataset(25), 10, {.last_batch = LastBatch::kRollover});
  auto first = labels_of_epoch(roll, &sizes);
  EXPECT_EQ(sizes, (std::vector<int64_t>{10, 10}));
  sizes.clear();
  auto second = labels_of_epoch(roll, &sizes);
  EXPECT_EQ(sizes, (std::vector<int64_t>{10, 10, 10}));  // 5 carried + 25 new = 30
  EXPECT_EQ(second[0], 20.0f);                            // starts with the carried samples
}

TEST(DataLoader, PrefetchMatchesSynchronousAndStopsEarly) {
  DataLoader sync(counting_dataset(50), 7, {.shuffle = true, .seed = 1, .prefetch = 0});
  DataLoader pre(counting_dataset(50), 7, {.shuffle = true, .seed = 1, .prefetch = 3});
  EXPECT_EQ(labels_of_epoch(sync), labels_of_epoch(pre));
  int n = 0;
  for (const Batch& b : pre) {  // leaving early must not hang or leak the thread
    (void)b;
    if (++n == 2) break;
  }
  EXPECT_EQ(n, 2);
  EXPECT_THROW(DataLoader(counting_dataset(5), 0), ValueError);
}

}  // namespace
}  // namespace kiln::data
