#include "png.hpp"

#include <string_view>

#include <zlib.h>

#include "wanfw/error.hpp"

namespace wanfw::tb {

namespace {
void png_chunk(std::string& out, const char* type, std::string_view data) {
  auto big_endian = [&](std::uint32_t v) {
    const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                           static_cast<char>(v)};
    out.append(bytes, 4);
  };
  big_endian(static_cast<std::uint32_t>(data.size()));
  const std::size_t start = out.size();
  out.append(type, 4);
  out.append(data.data(), data.size());
  big_endian(static_cast<std::uint32_t>(
      ::crc32(0, reinterpret_cast<const Bytef*>(out.data() + start), static_cast<uInt>(out.size() - start))));
}
}  // namespace

std::string encode_png(const std::uint8_t* pixels, int height, int width, int channels) {
  static const int kColourType[] = {0, 0, 4, 2, 6};  // by channel count
  std::string raw;                                   // each row: filter byte 0, then the row
  const std::size_t row = static_cast<std::size_t>(width) * channels;
  for (int y = 0; y < height; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(pixels) + y * row, row);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::string compressed(size, '\0');
  if (compress2(reinterpret_cast<Bytef*>(compressed.data()), &size, reinterpret_cast<const Bytef*>(raw.data()),
                static_cast<uLong>(raw.size()), 6) != Z_OK)
    throw Error("PNG: zlib could not compress the image");
  compressed.resize(size);
  std::string header;
  for (int v : {width, height}) {
    const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                           static_cast<char>(v)};
    header.append(bytes, 4);
  }
  header += static_cast<char>(8);
  header += static_cast<char>(kColourType[channels]);
  header.append(3, '\0');  // deflate, adaptive filtering, no interlace
  std::string png("\x89PNG\r\n\x1a\n", 8);
  png_chunk(png, "IHDR", header);
  png_chunk(png, "IDAT", compressed);
  png_chunk(png, "IEND", "");
  return png;
}

}  // namespace wanfw::tb
