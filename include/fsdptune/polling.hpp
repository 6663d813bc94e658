// How the cpu executor and the cpu profiler wait for a nonblocking MPI operation: by
// testing it between sleeps, so that both time a collective the same way (the profile's
// costs are what the replay is compared with). A blocking MPI call would spin on its core,
// and with several ranks per machine that spinning would steal the cycles of the compute
// threads whose overlap with communication is being measured. The sleeps double from
// kFirstPollSleepUs up to kMaxPollSleepUs: a short wait ends within about its own length,
// a long one (a pipeline stage waiting for its neighbour's activation for tens of ms)
// tests a thousand times a second rather than 50,000. With a fixed 20 us sleep, tiny's
// pp 2 replays on 2 cores ran 35-50% longer, their compute slowed by the polling threads
// (docs/validation.md "Pipelines on the CPU loop"). Open MPI progresses a nonblocking
// collective only inside such tests, so a collective of several rounds or fragments lasts
// at least as many of these sleeps.
#pragma once

#include <algorithm>
#include <chrono>
#include <thread>

namespace fsdptune {

inline constexpr long kFirstPollSleepUs = 10;
inline constexpr long kMaxPollSleepUs = 1000;

// Calls `done()` until it returns true, sleeping between calls as above.
template <typename Done>
void poll_until(Done&& done) {
  long sleep_us = kFirstPollSleepUs;
  while (!done()) {
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(2 * sleep_us, kMaxPollSleepUs);
  }
}

}  // namespace fsdptune
