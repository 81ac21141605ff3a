#include "gif.hpp"

#include <gif_lib.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "wanfw/error.hpp"

namespace wanfw::tb {

namespace {

int append(GifFileType* gif, const GifByteType* bytes, int size) {
  static_cast<std::string*>(gif->UserData)->append(reinterpret_cast<const char*>(bytes), static_cast<std::size_t>(size));
  return size;
}

void check(int status, GifFileType* gif, const char* what) {
  if (status != GIF_OK)
    throw wanfw::Error(fmt::format("tensorboard: encoding a GIF failed at {}: {}", what, GifErrorString(gif->Error)));
}

/// The NETSCAPE2.0 application extension: loop forever.
void put_loop_forever(GifFileType* gif) {
  static const GifByteType kApplication[] = {'N', 'E', 'T', 'S', 'C', 'A', 'P', 'E', '2', '.', '0'};
  static const GifByteType kLoop[] = {1, 0, 0};  // sub-block 1, loop count 0 = forever
  check(EGifPutExtensionLeader(gif, APPLICATION_EXT_FUNC_CODE), gif, "the loop extension");
  check(EGifPutExtensionBlock(gif, sizeof(kApplication), kApplication), gif, "the loop extension");
  check(EGifPutExtensionBlock(gif, sizeof(kLoop), kLoop), gif, "the loop extension");
  check(EGifPutExtensionTrailer(gif), gif, "the loop extension");
}

/// giflib's median cut works on 5 bits a channel and gives each palette entry the low end of its
/// boxes' 8-level steps, 3.5 levels dark on average; each entry becomes the mean of the 8-bit
/// pixels it stands for instead.
void refine_palette(const std::vector<GifByteType>& red, const std::vector<GifByteType>& green,
                    const std::vector<GifByteType>& blue, const std::vector<GifByteType>& indices,
                    std::vector<GifColorType>& colours) {
  std::vector<std::array<std::uint64_t, 4>> sums(colours.size(), {0, 0, 0, 0});
  for (std::size_t i = 0; i < indices.size(); ++i) {
    auto& sum = sums[indices[i]];
    sum[0] += red[i];
    sum[1] += green[i];
    sum[2] += blue[i];
    sum[3] += 1;
  }
  for (std::size_t c = 0; c < colours.size(); ++c) {
    const std::uint64_t n = sums[c][3];
    if (n == 0) continue;
    colours[c].Red = static_cast<GifByteType>((sums[c][0] + n / 2) / n);
    colours[c].Green = static_cast<GifByteType>((sums[c][1] + n / 2) / n);
    colours[c].Blue = static_cast<GifByteType>((sums[c][2] + n / 2) / n);
  }
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    EGifCloseFile(gif, &error);
  }
};

}  // namespace

std::string encode_gif(const std::uint8_t* pixels, int frames, int height, int width, double fps) {
  if (frames < 1 || height < 1 || width < 1 || height > 65535 || width > 65535)
    throw wanfw::Error(fmt::format("tensorboard: a GIF needs 1..65535 pixels a side and a frame, got {} frames of {}x{}",
                                   frames, width, height));
  std::string bytes;
  int error = 0;
  std::unique_ptr<GifFileType, GifCloser> gif(EGifOpen(&bytes, append, &error));
  if (!gif) throw wanfw::Error(fmt::format("tensorboard: opening a GIF encoder failed: {}", GifErrorString(error)));
  EGifSetGifVersion(gif.get(), true);  // GIF89a: delays and the loop extension
  check(EGifPutScreenDesc(gif.get(), width, height, 8, 0, nullptr), gif.get(), "the screen descriptor");
  put_loop_forever(gif.get());

  GraphicsControlBlock control{};
  control.DisposalMode = DISPOSE_DO_NOT;
  control.UserInputFlag = false;
  control.DelayTime = std::max(1, static_cast<int>(std::lround(100.0 / fps)));
  control.TransparentColor = NO_TRANSPARENT_COLOR;
  GifByteType extension[4];
  EGifGCBToExtension(&control, extension);

  const std::size_t area = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  std::vector<GifByteType> red(area), green(area), blue(area), indices(area);
  std::vector<GifColorType> colours(256);
  for (int f = 0; f < frames; ++f) {
    const std::uint8_t* frame = pixels + static_cast<std::size_t>(f) * area * 3;
    for (std::size_t i = 0; i < area; ++i) {
      red[i] = frame[3 * i];
      green[i] = frame[3 * i + 1];
      blue[i] = frame[3 * i + 2];
    }
    int palette = 256;
    std::fill(colours.begin(), colours.end(), GifColorType{0, 0, 0});
    if (GifQuantizeBuffer(static_cast<unsigned>(width), static_cast<unsigned>(height), &palette, red.data(),
                          green.data(), blue.data(), indices.data(), colours.data()) != GIF_OK)
      throw wanfw::Error("tensorboard: quantising a GIF frame to 256 colours failed");
    refine_palette(red, green, blue, indices, colours);
    std::unique_ptr<ColorMapObject, void (*)(ColorMapObject*)> map(GifMakeMapObject(256, colours.data()),
                                                                   GifFreeMapObject);
    if (!map) throw wanfw::Error("tensorboard: out of memory for a GIF palette");
    check(EGifPutExtension(gif.get(), GRAPHICS_EXT_FUNC_CODE, 4, extension), gif.get(), "a frame's delay");
    check(EGifPutImageDesc(gif.get(), 0, 0, width, height, false, map.get()), gif.get(), "a frame's descriptor");
    for (int row = 0; row < height; ++row)
      check(EGifPutLine(gif.get(), indices.data() + static_cast<std::size_t>(row) * width, width), gif.get(),
            "a frame's pixels");
  }
  GifFileType* open = gif.release();
  if (EGifCloseFile(open, &error) != GIF_OK)
    throw wanfw::Error(fmt::format("tensorboard: finishing a GIF failed: {}", GifErrorString(error)));
  return bytes;
}

}  // namespace wanfw::tb
