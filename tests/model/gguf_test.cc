// The GGUF reader: one test per validation rule (each corrupts one field of a valid image and checks the
// message names the file and the field), the metadata types and typed accessors, and memory-mapped files.
#include "pagoda/model/gguf.h"

#include <cmath>
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf_writer.h"
#include "pagoda/core/error.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// A valid image: a few metadata entries of different types and three tensors (F32, F16, Q8_0).
GgufWriter base_writer(uint32_t version = 3) {
  GgufWriter w(version);
  w.kv("general.architecture", gv::str("llama"));
  w.kv("general.name", gv::str("tiny"));
  w.kv("llama.block_count", gv::u32(1));
  w.kv("tokenizer.ggml.tokens", gv::strings({"a", "b", "c"}));
  w.tensor("a.weight", {8}, kGgmlF32, f32_le({1, 2, 3, 4, 5, 6, 7, 8}));
  w.tensor("b.weight", {4, 2}, kGgmlF16, std::vector<uint8_t>(16, 0x3c));
  w.tensor("c.weight", {32, 2}, kGgmlQ8_0, std::vector<uint8_t>(68, 1));
  return w;
}

GgufHeader parse(const std::vector<uint8_t>& img) { return parse_gguf_header(img.data(), img.size(), "t.gguf"); }

// Parsing must fail with a config error naming the file and containing every part of `what`.
template <typename... Parts>
void expect_invalid(const std::vector<uint8_t>& img, const Parts&... what) {
  try {
    parse(img);
    ADD_FAILURE() << "accepted an invalid image; expected an error containing: " << (std::string(what) + ...);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_THAT(e.what(), HasSubstr("'t.gguf'"));
    for (const std::string& w : {std::string(what)...}) EXPECT_THAT(e.what(), HasSubstr(w));
  }
}

TEST(Gguf, ParsesVersions2And3) {
  for (uint32_t version : {2u, 3u}) {
    GgufLayout l;
    const auto img = base_writer(version).image(&l);
    const GgufHeader h = parse(img);
    EXPECT_EQ(h.version, version);
    EXPECT_EQ(h.alignment, 32u);
    ASSERT_EQ(h.metadata.size(), 4u);
    EXPECT_EQ(h.metadata[0].key, "general.architecture");
    EXPECT_EQ(h.get_string("general.architecture"), "llama");
    ASSERT_EQ(h.tensors.size(), 3u);
    EXPECT_EQ(h.data_offset, l.data);
    EXPECT_EQ(h.data_offset % 32, 0u);
    const GgufTensorInfo* c = h.find_tensor("c.weight");
    ASSERT_NE(c, nullptr);
    EXPECT_EQ(c->dims, (std::vector<int64_t>{32, 2}));
    EXPECT_EQ(c->quant, QuantType::kQ8_0);
    EXPECT_FALSE(c->dtype);
    EXPECT_EQ(c->nbytes, 68u);
    EXPECT_EQ(c->numel, 64);
    EXPECT_EQ(c->type_name(), "Q8_0");
    EXPECT_EQ(h.data_offset + c->offset, l.t_data[2]);
    EXPECT_EQ(h.find_tensor("b.weight")->dtype, DType::kF16);
    EXPECT_EQ(h.find_tensor("a.weight")->nbytes, 32u);
    EXPECT_EQ(h.find_tensor("missing"), nullptr);
  }
}

TEST(Gguf, RefusesAWrongMagic) {
  auto img = base_writer().image();
  img[3] = 'X';
  expect_invalid(img, "magic");
  expect_invalid(std::vector<uint8_t>{'G', 'G'}, "truncated");
}

TEST(Gguf, RefusesVersion1) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint32_t>(img, l.version, 1);
  expect_invalid(img, "version 1 is not supported");
}

TEST(Gguf, RefusesBigEndianFiles) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint32_t>(img, l.version, 0x03000000u);  // version 3 written big-endian
  expect_invalid(img, "big-endian");
}

TEST(Gguf, RefusesUnknownVersions) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  for (uint32_t v : {0u, 4u, 77u}) {
    patch<uint32_t>(img, l.version, v);
    expect_invalid(img, "GGUF version " + std::to_string(v) + " is not supported");
  }
}

TEST(Gguf, BoundsTheTensorCountByTheFileSize) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint64_t>(img, l.tensor_count, uint64_t(1) << 40);
  expect_invalid(img, "claims 1099511627776 tensors");
}

TEST(Gguf, BoundsTheMetadataCountByTheFileSize) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint64_t>(img, l.kv_count, UINT64_MAX);
  expect_invalid(img, "metadata entries");
}

TEST(Gguf, BoundsStringLengthsByTheFileSize) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint64_t>(img, l.kv_key[1], uint64_t(1) << 62);
  expect_invalid(img, "truncated", "key of metadata entry #1");
}

TEST(Gguf, BoundsArrayCountsByTheFileSize) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  // tokenizer.ggml.tokens: type (4 bytes), element type (4), count (8).
  patch<uint64_t>(img, l.kv_type[3] + 8, uint64_t(1) << 61);
  expect_invalid(img, "truncated", "tokenizer.ggml.tokens", "2305843009213693952 string elements");
}

TEST(Gguf, RefusesUnknownValueTypes) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint32_t>(img, l.kv_type[1], 13);
  expect_invalid(img, "key 'general.name'", "value type 13 is not a GGUF type");
  img = base_writer().image(&l);
  patch<uint32_t>(img, l.kv_type[3] + 4, 99);  // the array's element type
  expect_invalid(img, "key 'tokenizer.ggml.tokens'", "array element type 99");
}

TEST(Gguf, ReadsEveryValueType) {
  GgufWriter w;
  w.kv("u8", gv::u8(200)).kv("i8", gv::i8(-100)).kv("u16", gv::u16(60000)).kv("i16", gv::i16(-30000));
  w.kv("u32", gv::u32(4000000000u)).kv("i32", gv::i32(-2000000000)).kv("u64", gv::u64(UINT64_MAX));
  w.kv("i64", gv::i64(INT64_MIN)).kv("f32", gv::f32(0.25f)).kv("f64", gv::f64(1e300)).kv("b", gv::boolean(true));
  w.kv("s", gv::str("h\xc3\xa9llo")).kv("fa", gv::f32s({1.5f, -2.f})).kv("ia", gv::i32s({7, -8, 9}));
  w.kv("ua", gv::array(kGgufU64, {gv::u64(1), gv::u64(UINT64_MAX)}));
  w.kv("ba", gv::array(kGgufBool, {gv::boolean(false), gv::boolean(true)}));
  w.kv("nested", gv::array(kGgufArray, {gv::f32s({1, 2}), gv::strings({"x"}), gv::array(kGgufU8, {})}));
  const auto img = w.image();
  const GgufHeader h = parse(img);
  EXPECT_EQ(h.get_int("u8"), 200);
  EXPECT_EQ(h.get_int("i8"), -100);
  EXPECT_EQ(h.get_int("u16"), 60000);
  EXPECT_EQ(h.get_int("i16"), -30000);
  EXPECT_EQ(h.get_int("u32"), 4000000000LL);
  EXPECT_EQ(h.get_int("i32"), -2000000000);
  EXPECT_EQ(h.find("u64")->u, UINT64_MAX);
  EXPECT_EQ(h.get_int("i64"), INT64_MIN);
  EXPECT_EQ(h.get_number("f32"), 0.25);
  EXPECT_EQ(h.get_number("f64"), 1e300);
  EXPECT_EQ(h.get_number("i32"), -2e9);  // integers read as numbers
  EXPECT_EQ(h.get_bool("b"), true);
  EXPECT_EQ(h.get_string("s"), "h\xc3\xa9llo");
  EXPECT_EQ(h.get_float_array("fa"), (std::vector<float>{1.5f, -2.f}));
  EXPECT_EQ(h.get_int_array("ia"), (std::vector<int64_t>{7, -8, 9}));
  EXPECT_EQ(h.get_float_array("ia"), (std::vector<float>{7, -8, 9}));
  EXPECT_EQ(h.get_array_length("ia"), 3u);
  EXPECT_EQ(h.find("ba")->count, 2u);
  const GgufValue* n = h.find("nested");
  ASSERT_NE(n, nullptr);
  ASSERT_EQ(n->items.size(), 3u);
  EXPECT_EQ(n->items[0].elem_type, GgufType::kF32);
  EXPECT_EQ(n->items[0].number_at(1), 2.0);
  EXPECT_EQ(n->items[1].strings.at(0), "x");
  EXPECT_EQ(n->items[2].count, 0u);
  EXPECT_FALSE(h.get_int("absent"));
  EXPECT_FALSE(h.get_string_array("absent"));
}

TEST(Gguf, TypedAccessorsNameTheKeyOnAMismatch) {
  GgufWriter w;
  w.kv("n", gv::u64(UINT64_MAX)).kv("s", gv::str("x")).kv("f", gv::f32(NAN)).kv("a", gv::i32s({1, 300}));
  w.kv("big", gv::array(kGgufU64, {gv::u64(UINT64_MAX)}));
  const auto img = w.image();
  const GgufHeader h = parse(img);
  auto fails = [](auto&& f, const std::string& what) {
    try {
      f();
      ADD_FAILURE() << "no error; expected " << what;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kConfig);
      EXPECT_THAT(e.what(), AllOf(HasSubstr("'t.gguf'"), HasSubstr(what)));
    }
  };
  fails([&] { h.get_int("s"); }, "key 's' must be an integer, not a string");
  fails([&] { h.get_int("n"); }, "key 'n' is above 2^63 - 1");
  fails([&] { h.get_int("a"); }, "key 'a' must be an integer, not an array of int32");
  fails([&] { h.get_int_array("a", 0, 255); }, "key 'a'[1] is 300, outside [0, 255]");
  fails([&] { h.get_int_array("big"); }, "key 'big'[0] is above 2^63 - 1");
  fails([&] { h.get_number("f"); }, "key 'f' is nan, not a finite number");
  fails([&] { h.get_number("s"); }, "key 's' must be a number");
  fails([&] { h.get_bool("s"); }, "key 's' must be a bool, not a string");
  fails([&] { h.get_string("n"); }, "key 'n' must be a string, not a uint64");
  fails([&] { h.get_string_array("a"); }, "key 'a' must be an array of string, not an array of int32");
  fails([&] { h.get_float_array("s"); }, "must be an array of numbers");
  fails([&] { h.get_array_length("s"); }, "must be an array");
}

TEST(Gguf, RefusesArraysNestedDeeperThanOneLevel) {
  GgufWriter w;
  w.kv("deep", gv::array(kGgufArray, {gv::array(kGgufArray, {gv::f32s({1})})}));
  expect_invalid(w.image(), "key 'deep'", "nest deeper than one level");
}

TEST(Gguf, RefusesBoolsOtherThan0And1) {
  GgufWriter w;
  w.kv("b", gv::u8(2));
  GgufLayout l;
  auto img = w.image(&l);
  patch<uint32_t>(img, l.kv_type[0], kGgufBool);
  expect_invalid(img, "key 'b'", "bool value 2");
  GgufWriter a;
  a.kv("ba", gv::array(kGgufBool, {gv::u8(1), gv::u8(7)}));
  expect_invalid(a.image(), "key 'ba'", "element 1 is the bool value 7");
}

TEST(Gguf, RefusesDuplicateKeys) {
  GgufWriter w = base_writer();
  w.kv("general.name", gv::str("again"));
  expect_invalid(w.image(), "key 'general.name' appears twice");
}

TEST(Gguf, RefusesEmptyKeys) {
  GgufWriter w;
  w.kv("", gv::u8(1));
  expect_invalid(w.image(), "metadata entry #0 has an empty key");
}

TEST(Gguf, AlignmentMustBeAUint32PowerOfTwo) {
  GgufWriter w = base_writer();
  w.kv("general.alignment", gv::u64(64));
  expect_invalid(w.image(), "'general.alignment' must be a uint32, not a uint64");
  GgufWriter z = base_writer();
  z.kv("general.alignment", gv::u32(48));
  expect_invalid(z.image(), "'general.alignment' is 48, not a power of two");
  GgufWriter zero = base_writer();
  zero.kv("general.alignment", gv::u32(0));
  expect_invalid(zero.image(), "'general.alignment' is 0, not a power of two");
}

TEST(Gguf, HonoursTheAlignment) {
  for (uint32_t a : {1u, 8u, 256u}) {
    GgufWriter w = base_writer();
    w.kv("general.alignment", gv::u32(a));
    GgufLayout l;
    const auto img = w.image(&l);
    const GgufHeader h = parse(img);
    EXPECT_EQ(h.alignment, a);
    EXPECT_EQ(h.data_offset, l.data);
    EXPECT_EQ(h.data_offset % a, 0u);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(h.data_offset + h.tensors[i].offset, l.t_data[i]);
  }
}

TEST(Gguf, RefusesEmptyTensorNames) {
  GgufWriter w;
  w.tensor("", {4}, kGgmlF32, f32_le({1, 2, 3, 4}));
  expect_invalid(w.image(), "tensor #0 has an empty name");
}

TEST(Gguf, RefusesTensorNamesLongerThan64Bytes) {
  GgufWriter w;
  w.tensor(std::string(65, 'x'), {4}, kGgmlF32, f32_le({1, 2, 3, 4}));
  expect_invalid(w.image(), "tensor #0 has a name of 65 bytes");
  GgufWriter ok;
  ok.tensor(std::string(64, 'x'), {4}, kGgmlF32, f32_le({1, 2, 3, 4}));
  EXPECT_NO_THROW(parse(ok.image()));
}

TEST(Gguf, RefusesDuplicateTensorNames) {
  GgufWriter w = base_writer();
  w.tensor("a.weight", {4}, kGgmlF32, f32_le({1, 2, 3, 4}));
  expect_invalid(w.image(), "tensor 'a.weight' appears twice");
}

TEST(Gguf, NDimsMustBe1To4) {
  for (uint32_t n : {0u, 5u}) {
    GgufLayout l;
    auto img = base_writer().image(&l);
    patch<uint32_t>(img, l.t_ndims[0], n);
    expect_invalid(img, "tensor 'a.weight'", "n_dims is " + std::to_string(n) + ", not 1 to 4");
  }
  GgufWriter four;
  four.tensor("t", {2, 1, 1, 2}, kGgmlF32, f32_le({1, 2, 3, 4}));
  EXPECT_EQ(parse(four.image()).tensors[0].numel, 4);
}

TEST(Gguf, RefusesDimsAbove2To63) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint64_t>(img, l.t_dims[0], uint64_t(1) << 63);
  expect_invalid(img, "tensor 'a.weight'", "dimension 0 is 9223372036854775808");
}

TEST(Gguf, RefusesElementCountsThatOverflow) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  // b.weight {4, 2} -> {2^32, 2^32}: 2^64 elements.
  patch<uint64_t>(img, l.t_dims[1], uint64_t(1) << 32);
  patch<uint64_t>(img, l.t_dims[1] + 8, uint64_t(1) << 32);
  expect_invalid(img, "tensor 'b.weight'", "more than 2^63 elements");
}

TEST(Gguf, RefusesByteSizesThatOverflow) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  // b.weight as F32 of 2^31 x 2^31 = 2^62 elements: 2^64 bytes.
  patch<uint64_t>(img, l.t_dims[1], uint64_t(1) << 31);
  patch<uint64_t>(img, l.t_dims[1] + 8, uint64_t(1) << 31);
  patch<uint32_t>(img, l.t_type[1], kGgmlF32);
  expect_invalid(img, "tensor 'b.weight'", "more than 2^64 bytes");
}

TEST(Gguf, NamesUnsupportedTensorTypes) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint32_t>(img, l.t_type[0], 16);
  expect_invalid(img, "tensor 'a.weight'", "IQ2_XXS (type 16) is not supported", "Q4_K");
  patch<uint32_t>(img, l.t_type[0], 31);  // removed from the format
  expect_invalid(img, "type 31 is not a GGML tensor type");
  patch<uint32_t>(img, l.t_type[0], 1000);
  expect_invalid(img, "type 1000 is not a GGML tensor type");
}

TEST(Gguf, ReadsEveryQuantType) {
  for (QuantType q : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1, QuantType::kQ8_0,
                      QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K}) {
    const QuantTraits t = quant_traits(q);
    GgufWriter w;
    w.tensor("q", {uint64_t(2 * t.block_elems), 3}, t.ggml_type, std::vector<uint8_t>(size_t(6 * t.block_bytes), 0));
    const auto img = w.image();
    const GgufHeader h = parse(img);
    EXPECT_EQ(h.tensors[0].quant, q) << t.name;
    EXPECT_EQ(h.tensors[0].nbytes, uint64_t(6 * t.block_bytes)) << t.name;
  }
  GgufWriter bf;
  bf.tensor("b", {3}, kGgmlBF16, std::vector<uint8_t>(6, 0));
  EXPECT_EQ(parse(bf.image()).tensors[0].dtype, DType::kBF16);
}

TEST(Gguf, RowLengthMustBeAWholeNumberOfBlocks) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint64_t>(img, l.t_dims[2], 48);  // c.weight: Q8_0 rows of 48
  expect_invalid(img, "tensor 'c.weight'", "row length (ne[0]) 48 is not a multiple of the Q8_0 block size 32");
}

TEST(Gguf, TensorOffsetsMustBeAligned) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint64_t>(img, l.t_offset[2], 100);
  expect_invalid(img, "tensor 'c.weight'", "data offset 100 is not a multiple of the alignment 32");
}

TEST(Gguf, TensorDataMustLieInsideTheFile) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  img.resize(img.size() - 1);
  expect_invalid(img, "tensor 'c.weight'", "reaches past the end of the data section");
  img = base_writer().image(&l);
  patch<uint64_t>(img, l.t_offset[0], uint64_t(1) << 63);
  expect_invalid(img, "tensor 'a.weight'", "reaches past the end");
  // The data section itself starts past the end of a file cut inside the padding.
  GgufWriter wide = base_writer();
  wide.kv("general.alignment", gv::u32(4096));
  img = wide.image(&l);
  const size_t infos_end = l.t_offset.back() + 8;
  ASSERT_GT(l.data, infos_end + 1);
  img.resize(infos_end + 1);
  expect_invalid(img, "data section would start at byte 4096");
}

TEST(Gguf, TensorsMustNotOverlap) {
  GgufLayout l;
  auto img = base_writer().image(&l);
  patch<uint64_t>(img, l.t_offset[1], 0);  // b.weight onto a.weight
  expect_invalid(img, "tensors 'a.weight' and 'b.weight' overlap");
  // Two empty tensors at one offset do not overlap.
  GgufWriter w;
  w.tensor("e1", {0}, kGgmlF32, {}).tensor("e2", {0, 3}, kGgmlF32, {});
  EXPECT_EQ(parse(w.image()).tensors.size(), 2u);
}

TEST(Gguf, EveryTruncationIsRefusedCleanly) {
  const auto full = base_writer().image();
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> img(full.begin(), full.begin() + long(n));
    EXPECT_THROW(parse(img), Error) << n;
  }
  EXPECT_NO_THROW(parse(full));
}

TEST(GgufFile, MapsAFileAndFindsTensorData) {
  const auto dir = temp_dir("gguf_map");
  const auto img = base_writer().image();
  write_bytes(dir / "m.gguf", img);
  auto f = GgufFile::open((dir / "m.gguf").string());
  EXPECT_EQ(f->path(), (dir / "m.gguf").string());
  const GgufTensorInfo* a = f->find("a.weight");
  ASSERT_NE(a, nullptr);
  float x[8];
  std::memcpy(x, f->tensor_data(*a), sizeof(x));
  EXPECT_EQ(x[7], 8.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f->tensor_data(*a)) % 32, 0u);
  write_bytes(dir / "bad.gguf", std::vector<uint8_t>(img.begin(), img.begin() + 30));
  try {
    GgufFile::open((dir / "bad.gguf").string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    EXPECT_THAT(e.what(), HasSubstr("bad.gguf"));
  }
  try {
    GgufFile::open((dir / "none.gguf").string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_THAT(e.what(), HasSubstr("none.gguf"));
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::test
