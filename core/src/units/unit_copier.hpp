#pragma once
// How block swap moves a unit's bytes from host memory into a device slot: behind one interface,
// so the CPU runs the schedule CUDA runs. The CUDA copier issues each copy on a copy stream, gated
// by an event the compute stream recorded when it last read the slot, and the compute stream waits
// on the copy's event (no device-wide synchronisation); the thread copier does the same with a
// worker thread and futures, with optional delays that a test randomises.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

namespace wanfw {

class UnitCopier {
 public:
  virtual ~UnitCopier() = default;
  /// Copies `source` (host bytes) into `target` (slot `slot`'s bytes on the device) once the compute
  /// that last read the slot (release) is done; returns at once.
  virtual void copy(std::size_t slot, const at::Tensor& source, const at::Tensor& target) = 0;
  /// The compute waits for the last copy into `slot`.
  virtual void wait(std::size_t slot) = 0;
  /// The compute queued so far is the last to read `slot` before the next copy into it.
  virtual void release(std::size_t slot) = 0;
  /// The host waits until every copy issued so far is over (before it writes their sources).
  virtual void finish() = 0;
  /// Seconds the compute waited for copies since the last call (the copy stall).
  virtual double take_stall_seconds() = 0;
  /// How copies reach the device, where it is worth saying (pageable host memory's staging).
  virtual std::string describe() const { return {}; }
};

/// A worker thread copies; `delay`, when given, runs before each copy (tests: random sleeps).
std::unique_ptr<UnitCopier> make_thread_copier(std::size_t slots, std::function<void()> delay = {});

/// Copies on a copy stream of `device` with CUDA events. `pinned_source`: the host bytes are pinned,
/// so a copy is asynchronous. Otherwise a worker thread copies each unit's pageable bytes into its
/// slot's pinned staging buffer (`slot_bytes` each, allocated here) and issues the asynchronous copy
/// from there; where even those cannot be pinned, the driver stages each copy on the worker thread.
std::unique_ptr<UnitCopier> make_cuda_copier(std::size_t slots, c10::Device device, bool pinned_source,
                                             std::int64_t slot_bytes);

}  // namespace wanfw
