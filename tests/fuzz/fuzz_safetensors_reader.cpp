// Fuzz target: a safetensors file as wanfw opens it (predict --inputs, checkpoints, weights).
// The input is the whole file. Opening either succeeds, and then every tensor can be read, or
// fails with wanfw's FileError; anything else (a crash, a sanitizer report, another exception)
// is a finding.
#include <cstdint>
#include <cstdlib>
#include <string>

#include <ATen/ATen.h>

#include "fuzz_memory_file.hpp"
#include "fuzz_target.hpp"
#include "wanfw/error.hpp"
#include "wanfw/io/safetensors.hpp"

WANFW_FUZZ_TARGET(safetensors_reader) {
  static MemoryFile file("fuzz.safetensors");
  file.write(data, size);
  try {
    const wanfw::SafetensorsFile opened = wanfw::SafetensorsFile::open(file.path);
    for (const wanfw::TensorRecord& record : opened.records()) {
      const at::Tensor view = opened.tensor(record.name);
      if (static_cast<std::uint64_t>(view.nbytes()) != record.end - record.begin) std::abort();
      if (view.numel() > 0 && view.numel() <= 4096) (void)view.clone();  // touches every byte it claims
    }
  } catch (const wanfw::FileError&) {
  }
  return 0;
}
