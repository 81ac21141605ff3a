#pragma once
// Internal: SIGINT and SIGTERM ask the loop to stop at the next step boundary (after a final
// checkpoint). A second SIGINT ends the process at once.

namespace wanfw {

class StopSignal {
 public:
  /// Installs the handlers; the previous ones come back on destruction.
  StopSignal();
  ~StopSignal();
  StopSignal(const StopSignal&) = delete;
  StopSignal& operator=(const StopSignal&) = delete;

  /// The signal number received, or 0.
  static int received();
};

}  // namespace wanfw
