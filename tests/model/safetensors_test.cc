// Safetensors reader: valid single and sharded files, and a clear error for every kind of bad input.
#include "pagoda/model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pagoda/core/error.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<StTensor> two_tensors() {
  return {{"a.weight", "F32", {2, 3}, f32_bytes({1, 2, 3, 4, 5, 6})},
          {"b.bias", "BF16", {4}, std::vector<uint8_t>(8, 0x3f)}};
}

// Parses an in-memory image; returns the error message, or "" when it parsed.
std::string parse_error(const std::vector<uint8_t>& img) {
  try {
    parse_safetensors_header(img.data(), img.size(), "test.safetensors");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "";
}

std::vector<uint8_t> with_header(const std::string& header, size_t data_bytes = 32) {
  return st_image(header, std::vector<uint8_t>(data_bytes, 0));
}

TEST(Safetensors, ParsesValidImage) {
  auto img = st_image(two_tensors());
  auto h = parse_safetensors_header(img.data(), img.size(), "x");
  ASSERT_EQ(h.tensors.size(), 2u);
  EXPECT_EQ(h.tensors[0].name, "a.weight");
  EXPECT_EQ(h.tensors[0].dtype, DType::kF32);
  EXPECT_EQ(h.tensors[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(h.tensors[1].dtype, DType::kBF16);
  EXPECT_EQ(h.tensors[1].begin, 24u);
  EXPECT_EQ(h.metadata.at("format"), "pt");
}

TEST(Safetensors, OpensFileAndShardedCheckpoint) {
  auto dir = temp_dir("sharded");
  auto t = two_tensors();
  write_bytes(dir / "model-00001-of-00002.safetensors", st_image({t[0]}));
  write_bytes(dir / "model-00002-of-00002.safetensors", st_image({t[1]}));
  write_text(dir / "model.safetensors.index.json",
             R"({"metadata": {"total_size": 32}, "weight_map": {"a.weight": "model-00001-of-00002.safetensors",
                 "b.bias": "model-00002-of-00002.safetensors"}})");
  auto ck = SafetensorsCheckpoint::open(dir.string());
  auto a = ck->find("a.weight");
  ASSERT_TRUE(a);
  float last;
  std::memcpy(&last, static_cast<const uint8_t*>(a->data()) + 20, 4);  // the data section is not aligned
  EXPECT_EQ(last, 6.0f);
  ASSERT_TRUE(ck->find("b.bias"));
  EXPECT_FALSE(ck->find("c"));
  EXPECT_EQ(ck->tensor_names().size(), 2u);

  auto single = SafetensorsCheckpoint::open((dir / "model-00001-of-00002.safetensors").string());
  EXPECT_TRUE(single->find("a.weight"));
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, ShardIndexErrors) {
  auto dir = temp_dir("badindex");
  write_bytes(dir / "s1.safetensors", st_image({two_tensors()[0]}));
  auto open_err = [&](const std::string& index) -> std::string {
    write_text(dir / "model.safetensors.index.json", index);
    try {
      SafetensorsCheckpoint::open(dir.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(open_err(R"({"weight_map": {"b.bias": "s1.safetensors"}})"),
              AllOf(HasSubstr("'b.bias'"), HasSubstr("s1.safetensors"), HasSubstr("does not contain")));
  EXPECT_THAT(open_err(R"({"weight_map": {"a.weight": "missing.safetensors"}})"),
              AllOf(HasSubstr("missing.safetensors"), HasSubstr("does not exist")));
  EXPECT_THAT(open_err(R"({"weight_map": {"a.weight": "../s1.safetensors"}})"), HasSubstr("not a plain file name"));
  EXPECT_THAT(open_err(R"({"weights": {}})"), HasSubstr("weight_map"));
  EXPECT_THAT(open_err("not json"), HasSubstr("not a JSON object"));
  std::filesystem::remove_all(dir);
  EXPECT_THAT(
      [&] {
        try {
          SafetensorsCheckpoint::open((dir / "nothing").string());
        } catch (const Error& e) {
          return std::string(e.what());
        }
        return std::string();
      }(),
      HasSubstr("does not exist"));
}

TEST(Safetensors, TruncatedFiles) {
  auto img = st_image(two_tensors());
  EXPECT_THAT(parse_error({}), AllOf(HasSubstr("test.safetensors"), HasSubstr("truncated")));
  EXPECT_THAT(parse_error({1, 2, 3}), HasSubstr("truncated"));
  // Cut inside the header.
  EXPECT_THAT(parse_error(std::vector<uint8_t>(img.begin(), img.begin() + 20)), HasSubstr("truncated"));
  // Cut inside the data: the last tensor reaches past the end.
  EXPECT_THAT(parse_error(std::vector<uint8_t>(img.begin(), img.end() - 3)),
              AllOf(HasSubstr("'b.bias'"), HasSubstr("past the end"), HasSubstr("truncated")));
  // On disk, through the mmap path.
  auto dir = temp_dir("trunc");
  write_bytes(dir / "model.safetensors", std::vector<uint8_t>(img.begin(), img.end() - 3));
  try {
    SafetensorsCheckpoint::open(dir.string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr((dir / "model.safetensors").string()), HasSubstr("b.bias")));
  }
  write_bytes(dir / "model.safetensors", {});
  EXPECT_THROW(SafetensorsCheckpoint::open(dir.string()), Error);
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, HeaderLies) {
  auto t = R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}})";
  EXPECT_EQ(parse_error(with_header(t, 16)), "");
  // Offsets past the data.
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [16, 32]}})", 16)),
              AllOf(HasSubstr("'w'"), HasSubstr("past the end")));
  // Size != shape * dtype size.
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 16]}})", 32)),
              AllOf(HasSubstr("'w'"), HasSubstr("16 bytes"), HasSubstr("needs 24")));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "BF16", "shape": [2, 2], "data_offsets": [0, 16]}})", 32)),
              HasSubstr("needs 8"));
  // Overflowing shape.
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [4294967296, 4294967296, 16], "data_offsets": [0, 16]}})")),
              HasSubstr("more than 2^64"));
  // begin > end; negative; not integers.
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})")), HasSubstr("end before"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}})")), HasSubstr("non-negative"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})")), HasSubstr("shape"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]}})")), HasSubstr("shape"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0]}})")), HasSubstr("data_offsets"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [1]}})")), HasSubstr("data_offsets"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"shape": [1], "data_offsets": [0, 4]}})")), HasSubstr("dtype"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "data_offsets": [0, 4]}})")), HasSubstr("shape"));
  EXPECT_THAT(parse_error(with_header(R"({"w": [1, 2]})")), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F32", "shape": [1,1,1,1,1,1,1], "data_offsets": [0, 4]}})")),
              HasSubstr("rank 7"));
  // Overlapping tensors.
  EXPECT_THAT(parse_error(with_header(R"({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                        "y": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})")),
              AllOf(HasSubstr("'x'"), HasSubstr("'y'"), HasSubstr("overlap")));
}

TEST(Safetensors, DtypesAndHeaderSyntax) {
  // Every dtype of the format parses; pagoda maps the ones it has.
  for (const char* dt : {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16", "BF16", "I32", "U32", "F32", "F64", "I64", "U64"}) {
    const std::string h = std::string(R"({"w": {"dtype": ")") + dt + R"(", "shape": [0], "data_offsets": [0, 0]}})";
    EXPECT_EQ(parse_error(with_header(h)), "") << dt;
  }
  EXPECT_THAT(parse_error(with_header(R"({"w": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}})")),
              AllOf(HasSubstr("'w'"), HasSubstr("unknown dtype 'F128'")));
  EXPECT_THAT(parse_error(with_header("{not json")), HasSubstr("not valid JSON"));
  EXPECT_THAT(parse_error(with_header("[1, 2]")), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse_error(with_header("")), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse_error(with_header(R"({"__metadata__": {"a": 1}})")), HasSubstr("__metadata__"));
  EXPECT_THAT(parse_error(with_header(R"({"": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}})")), HasSubstr("empty name"));
  EXPECT_THAT(parse_error(with_header(std::string(100, '[') + std::string(100, ']'))), HasSubstr("not a JSON object"));
  EXPECT_THAT(parse_error(with_header("{\"a\":" + std::string(100, '[') + std::string(100, ']') + "}")), HasSubstr("nests deeper"));
  // A header length far beyond the limit, and one just beyond the file.
  std::vector<uint8_t> huge(16, 0);
  huge[7] = 0x10;
  EXPECT_THAT(parse_error(huge), HasSubstr("limit"));
  std::vector<uint8_t> beyond = {100, 0, 0, 0, 0, 0, 0, 0, '{', '}'};
  EXPECT_THAT(parse_error(beyond), HasSubstr("truncated"));
  // Leading whitespace and trailing padding in the header are accepted (writers pad to 8 bytes).
  EXPECT_EQ(parse_error(with_header("  {}      ")), "");
}

}  // namespace
}  // namespace pagoda::test
