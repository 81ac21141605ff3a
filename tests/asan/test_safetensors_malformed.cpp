// The safetensors reader on malformed files, built with AddressSanitizer: every case must end
// in a FileError that names the file (and the tensor at fault), never in a crash or a read
// outside the mapping.

#include <ATen/ATen.h>

#include "../unit/temp_dir.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"
// doctest last: c10/util/Logging.h defines a CHECK macro of its own.
#include <doctest/doctest.h>

using namespace wanfw;

namespace {

std::string le64(std::uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

std::string file_of(const std::string& header, std::size_t data_bytes) {
  return le64(header.size()) + header + std::string(data_bytes, '\x01');
}

/// Writes `bytes` to a file and returns the reader's error message ("" if it opened).
std::string open_error(const std::string& bytes) {
  testing::TempDir dir;
  testing::write_text(dir / "bad.safetensors", bytes);
  try {
    const SafetensorsFile file = SafetensorsFile::open(dir / "bad.safetensors");
    for (const auto& record : file.records()) (void)file.tensor(record.name).sum();
  } catch (const FileError& e) {
    const std::string message = e.what();
    CHECK(message.find("bad.safetensors") != std::string::npos);
    return message;
  }
  return "";
}

const std::string kValidHeader = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";

}  // namespace

TEST_CASE("a well-formed file opens (control case)") { CHECK(open_error(file_of(kValidHeader, 16)).empty()); }

TEST_CASE("a file shorter than the length prefix is rejected") {
  CHECK(open_error("\x01\x02\x03").find("fewer than the 8-byte header length") != std::string::npos);
}

TEST_CASE("a header length above 100 MB is rejected before any allocation") {
  CHECK(open_error(le64(200'000'000) + "{}").find("the limit is") != std::string::npos);
}

TEST_CASE("a header length past the end of the file is rejected") {
  CHECK(open_error(le64(4096) + kValidHeader).find("only") != std::string::npos);
}

TEST_CASE("a header length of 2^64-1 does not wrap around") {
  CHECK_FALSE(open_error(le64(~0ULL) + kValidHeader).empty());
}

TEST_CASE("a header that does not start with a brace is rejected") {
  CHECK(open_error(file_of(R"(["w"])", 0)).find("does not start with '{'") != std::string::npos);
}

TEST_CASE("a header that is not valid JSON is rejected") {
  CHECK(open_error(file_of(R"({"w":{"dtype":"F32",)", 0)).find("not valid JSON") != std::string::npos);
}

TEST_CASE("a tensor named twice is rejected, naming it") {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  CHECK(open_error(file_of(header, 8)).find("tensor 'w'") != std::string::npos);
}

TEST_CASE("an unknown dtype is rejected, naming the tensor") {
  const std::string message = open_error(file_of(R"({"w":{"dtype":"F31","shape":[1],"data_offsets":[0,4]}})", 4));
  CHECK(message.find("unknown dtype 'F31'") != std::string::npos);
  CHECK(message.find("tensor 'w'") != std::string::npos);
}

TEST_CASE("a negative dimension is rejected") {
  CHECK(open_error(file_of(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4)).find("shape") !=
        std::string::npos);
}

TEST_CASE("a shape whose element count overflows is rejected") {
  const std::string header =
      R"({"w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,4]}})";
  CHECK(open_error(file_of(header, 4)).find("overflows") != std::string::npos);
}

TEST_CASE("an element count times item size that overflows is rejected") {
  const std::string header = R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})";
  CHECK_FALSE(open_error(file_of(header, 8)).empty());
}

TEST_CASE("offsets past the data area are rejected, naming the tensor") {
  const std::string message = open_error(file_of(kValidHeader, 8));
  CHECK(message.find("outside the 8-byte data area") != std::string::npos);
  CHECK(message.find("tensor 'w'") != std::string::npos);
}

TEST_CASE("offsets that disagree with shape and dtype are rejected") {
  CHECK(open_error(file_of(R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12))
            .find("needs 16") != std::string::npos);
}

TEST_CASE("reversed offsets are rejected") {
  CHECK_FALSE(open_error(file_of(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8)).empty());
}

TEST_CASE("a gap in the data area is rejected") {
  const std::string header = R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})";
  CHECK(open_error(file_of(header, 12)).find("gap") != std::string::npos);
}

TEST_CASE("overlapping tensors are rejected") {
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  CHECK(open_error(file_of(header, 8)).find("overlap") != std::string::npos);
}

TEST_CASE("bytes after the last tensor are rejected") {
  CHECK(open_error(file_of(kValidHeader, 20)).find("cover 16 of the 20") != std::string::npos);
}

TEST_CASE("a truncated file names the tensor whose bytes are missing") {
  testing::TempDir dir;
  write_safetensors(dir / "good.safetensors", {{"first", at::ones({64})}, {"second", at::ones({64})}});
  std::ifstream in(dir / "good.safetensors", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  bytes.resize(bytes.size() - 10);
  CHECK(open_error(bytes).find("tensor 'second'") != std::string::npos);
}

TEST_CASE("a metadata value that is not a string is rejected") {
  CHECK(open_error(file_of(R"({"__metadata__":{"n":1}})", 0)).find("__metadata__") != std::string::npos);
}

TEST_CASE("fields of the wrong JSON type are rejected without a crash") {
  for (const char* header : {R"({"w":[1,2]})", R"({"w":{"dtype":5,"shape":[1],"data_offsets":[0,4]}})",
                             R"({"w":{"dtype":"F32","shape":"1","data_offsets":[0,4]}})",
                             R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})",
                             R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
                             R"({"w":{"dtype":"F32","shape":[1]}})"})
    CHECK_FALSE(open_error(file_of(header, 4)).empty());
}

TEST_CASE("a header that nests lists 100000 deep is refused without recursing") {
  const std::string header = R"({"w":{"dtype":"F32","shape":)" + std::string(100000, '[') + std::string(100000, ']') +
                             R"(,"data_offsets":[0,0]}})";
  CHECK(open_error(file_of(header, 0)).find("nests lists and objects more than 8 levels deep") != std::string::npos);
}

TEST_CASE("an empty tensor whose strides would overflow is refused") {
  // No elements, so the element count fits; LibTorch's strides (4 * 2^62 * 8 bytes) would not.
  const std::string header = R"({"w":{"dtype":"F32","shape":[0,4611686018427387904,8],"data_offsets":[0,0]}})";
  CHECK(open_error(file_of(header, 0)).find("overflows") != std::string::npos);
}
