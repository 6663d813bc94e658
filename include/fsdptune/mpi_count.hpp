// The counts of the cpu executor's and the cpu profiler's MPI calls. MPI's C calls take an
// int count and Open MPI 4 (Debian's) has none of MPI 4's large-count `_c` calls, so a
// message of more than INT_MAX elements (2 GiB of bytes, 8 GiB of fp32) would be passed
// wrapped (a negative or short count: an MPI error at best, a short transfer at worst).
// Both refuse such a message before they allocate for it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>

#include "fsdptune/error.hpp"

namespace fsdptune {

inline constexpr std::int64_t kMaxMpiCount = std::numeric_limits<int>::max();

// `count` elements of `element_bytes` each as an MPI call's int count; Error(kRuntime) at
// `where` when it does not fit, with `hint`.
inline int mpi_count(std::int64_t count, std::int64_t element_bytes, const std::string& where,
                     const std::string& hint) {
  if (count >= 0 && count <= kMaxMpiCount) return static_cast<int>(count);
  throw_runtime(where,
                fmt::format("a message of {} elements of {} bytes is more than an MPI call's int "
                            "count takes ({})",
                            count, element_bytes, kMaxMpiCount),
                hint);
}

}  // namespace fsdptune
