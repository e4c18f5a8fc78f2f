// The library's own worker threads for parallel loops (see parallel_for in common.h).
//
// A loop's caller takes indices from a shared counter like every worker, and then waits only for
// the indices already taken: a worker that the OS has not scheduled yet (another process holds
// its core) costs the loop nothing, it later finds no work. A team that ends in a barrier (an
// OpenMP parallel region) instead waits for every member to arrive, so one member held off its
// core stalls all of them and a busy machine costs the training twice what it takes.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <pthread.h>
#include <system_error>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SPLAT_CPU_RELAX() _mm_pause()
#else
#define SPLAT_CPU_RELAX() std::this_thread::yield()
#endif

namespace splat {

// One parallel loop: indices [0, n), handed out by `next`; `done` counts finished ones.
struct LoopJob {
    std::atomic<int64_t> next{0}, done{0};
    int64_t n = 0;
    int helpers = 0;  // workers that may join (the caller is the other thread)
    std::function<void(int64_t)> task;

    // Runs indices until none are left; a worker arriving after the loop ended runs nothing.
    void work() {
        for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
            task(i);
            done.fetch_add(1, std::memory_order_release);
        }
    }
};

class WorkerPool {
  public:
    // How long an idle worker polls for the next loop before it sleeps: loops of a training step
    // follow each other within tens of microseconds, and waking a sleeping thread takes as long.
    static constexpr std::chrono::microseconds kSpin{50};

    // Runs body(i) for i in [0, n) on the caller and up to threads - 1 workers. Returns false
    // (running nothing) when the pool is running another loop (a nested or concurrent call).
    template <typename F>
    bool run(int64_t n, int threads, F&& body) {
        if (busy_.exchange(true, std::memory_order_acquire)) return false;
        auto job = std::make_shared<LoopJob>();
        job->n = n;
        job->task = std::ref(body);
        job->helpers = start_workers(threads - 1);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_ = job;
            generation_.fetch_add(1, std::memory_order_release);
            if (sleepers_ > 0) wake_.notify_all();
        }
        job->work();
        for (int spins = 0; job->done.load(std::memory_order_acquire) < n; ++spins) {
            if (spins < 4096) {
                SPLAT_CPU_RELAX();
            } else {
                std::this_thread::yield();
            }
        }
        {
            std::lock_guard<std::mutex> lock(mutex_);
            job_.reset();
        }
        busy_.store(false, std::memory_order_release);
        return true;
    }

  private:
    // Starts workers up to `wanted` (fewer if the system has no more threads); returns how many run.
    int start_workers(int wanted) {
        while (workers_ < wanted) {
            try {
                std::thread([this, index = workers_] { serve(index); }).detach();
            } catch (const std::system_error&) {
                break;
            }
            ++workers_;
        }
        return std::min(workers_, wanted);
    }

    void serve(int index) {
        uint64_t seen = generation_.load(std::memory_order_acquire);
        for (;;) {
            const auto until = std::chrono::steady_clock::now() + kSpin;
            while (generation_.load(std::memory_order_acquire) == seen &&
                   std::chrono::steady_clock::now() < until) {
                for (int i = 0; i < 16; ++i) SPLAT_CPU_RELAX();
            }
            std::shared_ptr<LoopJob> job;
            {
                std::unique_lock<std::mutex> lock(mutex_);
                if (generation_.load(std::memory_order_acquire) == seen) {
                    ++sleepers_;
                    wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
                    --sleepers_;
                }
                seen = generation_.load(std::memory_order_acquire);
                job = job_;
            }
            if (job && index < job->helpers) job->work();
        }
    }

    std::atomic<bool> busy_{false};
    std::atomic<uint64_t> generation_{0};
    std::mutex mutex_;
    std::condition_variable wake_;
    std::shared_ptr<LoopJob> job_;  // guarded by mutex_
    int sleepers_ = 0;              // guarded by mutex_
    int workers_ = 0;               // touched only by the pool's holder (busy_)
};

// The process's pool; never destroyed, so workers outlive static destructors at exit. A forked
// child (which has none of the workers, and may have inherited a held lock) gets a fresh one.
inline WorkerPool*& worker_pool_slot() {
    static WorkerPool* pool = [] {
        pthread_atfork(nullptr, nullptr, [] { worker_pool_slot() = new WorkerPool(); });
        return new WorkerPool();
    }();
    return pool;
}

inline WorkerPool& worker_pool() { return *worker_pool_slot(); }

}  // namespace splat
