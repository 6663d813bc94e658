// poll_until: how the cpu executor and the cpu profiler both wait for MPI (the profile's
// collective times are compared with the replay's, so they must wait alike).
#include <catch2/catch.hpp>

#include "fsdptune/polling.hpp"

using namespace fsdptune;

TEST_CASE("poll_until tests until done, sleeping between tests, and not after the last",
          "[polling]") {
  int tests = 0;
  poll_until([&] { return ++tests == 5; });
  CHECK(tests == 5);
  // Done at once: one test, no sleep.
  tests = 0;
  poll_until([&] { return ++tests >= 1; });
  CHECK(tests == 1);
  // Pinned: docs/profiling.md and docs/validation.md state these sleeps.
  static_assert(kFirstPollSleepUs == 10 && kMaxPollSleepUs == 1000);
}
