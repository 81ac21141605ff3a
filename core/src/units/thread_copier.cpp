// The CPU's copier: copies on a worker thread, in the order they were asked for, each after the
// slot's last reader released it; the compute waits on the copy's future.

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include <ATen/ATen.h>

#include "units/unit_copier.hpp"

namespace wanfw {

namespace {

class ThreadCopier final : public UnitCopier {
 public:
  ThreadCopier(std::size_t slots, std::function<void()> delay)
      : delay_(std::move(delay)), ready_(slots), free_(slots), worker_([this] { work(); }) {
    for (std::size_t s = 0; s < slots; ++s) {
      ready_[s] = ready_now();
      free_[s] = ready_now();
    }
  }
  ~ThreadCopier() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }

  void copy(std::size_t slot, const at::Tensor& source, const at::Tensor& target) override {
    auto done = std::make_shared<std::promise<void>>();
    ready_.at(slot) = done->get_future().share();
    std::shared_future<void> free = free_[slot];
    {
      std::lock_guard<std::mutex> lock(mutex_);
      jobs_.push_back([this, done, free, source, target] {
        free.wait();  // the slot's last reader is done
        if (delay_) delay_();
        try {
          // One thread's memcpy: a parallel copy_ here would contend with the compute's threads.
          if (target.device().is_cpu() && target.is_contiguous() && source.is_contiguous() &&
              target.nbytes() == source.nbytes())
            std::memcpy(target.data_ptr(), source.data_ptr(), source.nbytes());
          else
            target.copy_(source);
          done->set_value();
        } catch (...) {
          done->set_exception(std::current_exception());
        }
      });
    }
    wake_.notify_one();
  }

  void wait(std::size_t slot) override {
    const auto start = std::chrono::steady_clock::now();
    ready_.at(slot).get();  // rethrows a failed copy
    stall_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  void finish() override {
    for (const auto& ready : ready_) ready.get();  // rethrows a failed copy
  }

  // The CPU computes on the calling thread: what it queued is done when it releases.
  void release(std::size_t slot) override { free_.at(slot) = ready_now(); }

  double take_stall_seconds() override { return std::exchange(stall_, 0.0); }

 private:
  static std::shared_future<void> ready_now() {
    std::promise<void> done;
    done.set_value();
    return done.get_future().share();
  }

  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::function<void()> delay_;
  std::vector<std::shared_future<void>> ready_, free_;
  double stall_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace

std::unique_ptr<UnitCopier> make_thread_copier(std::size_t slots, std::function<void()> delay) {
  return std::make_unique<ThreadCopier>(slots, std::move(delay));
}

}  // namespace wanfw
