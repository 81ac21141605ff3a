#include "process_group/rank_heartbeat.hpp"

#include <chrono>

#include <fmt/format.h>

namespace wanfw {

Heartbeat::Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank) : store_(std::move(store)), rank_(rank) {
  beat();
  thread_ = std::thread([this] {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!cv_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
      lock.unlock();
      try {
        beat();
      } catch (const std::exception&) {
        // The store's host is gone; the diagnosis says so.
      }
      lock.lock();
    }
  });
}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string Heartbeat::key(int rank) { return fmt::format("wanfw/heartbeat/{}", rank); }

void Heartbeat::beat() { store_->add(key(rank_), 1); }

}  // namespace wanfw
