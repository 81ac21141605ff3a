#pragma once
// Internal: each rank of a multi-process job bumps its counter in the rendezvous store every
// second, so that after a failed collective the survivors can tell which ranks have stopped.

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace wanfw {

class Heartbeat {
 public:
  Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  /// The store key of `rank`'s counter.
  static std::string key(int rank);

 private:
  void beat();

  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace wanfw
