// Bounded busy-waiting, for the few places where a thread's wake-up is on a request's critical path.
//
// Why: a thread that sleeps on a condition variable costs a wake-up when it is needed again (a futex
// call by the waker, an interrupt to a halted CPU, the scheduler's decision), which on a virtual machine
// is tens to a hundred microseconds, more than the work between two hand-offs of a lone request. A
// thread that expects its event within a known short time can instead watch a memory location, and only
// fall back to sleeping when the time is up: the waiter's CPU is busy for at most that long, never while
// the process is idle. Callers bound both the time and the number of threads that spin at once.
#pragma once

#include <chrono>
#include <thread>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace ga {

// One iteration of a busy-wait loop: tells the CPU (and a hypervisor that watches for it) that this is
// a spin, so the sibling hyper-thread gets the core's resources meanwhile.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#else
  std::this_thread::yield();
#endif
}

// Spins until done() is true (returns true) or the deadline passes (returns false). The clock is
// read once every 64 iterations (a clock read is ~20-30 ns, a pause ~40 ns on current x86 parts).
template <typename Done>
bool spin_until(Done&& done, std::chrono::steady_clock::time_point deadline) {
  for (unsigned i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63u) == 0 && std::chrono::steady_clock::now() >= deadline) return done();
    cpu_relax();
  }
}

}  // namespace ga
