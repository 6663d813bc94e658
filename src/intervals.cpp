// Unions and overlaps of time intervals (intervals.hpp).
#include "fsdptune/intervals.hpp"

#include <algorithm>
#include <cstddef>

namespace fsdptune {

std::vector<TimeInterval> merge_intervals(std::vector<TimeInterval> intervals) {
  std::sort(intervals.begin(), intervals.end(),
            [](const TimeInterval& a, const TimeInterval& b) { return a.start < b.start; });
  std::vector<TimeInterval> merged;
  for (const TimeInterval& interval : intervals) {
    if (!merged.empty() && interval.start <= merged.back().end) {
      merged.back().end = std::max(merged.back().end, interval.end);
    } else {
      merged.push_back(interval);
    }
  }
  return merged;
}

double total_length(const std::vector<TimeInterval>& merged) {
  double total = 0;
  for (const TimeInterval& interval : merged) total += interval.end - interval.start;
  return total;
}

double overlap_length(const std::vector<TimeInterval>& a, const std::vector<TimeInterval>& b) {
  double total = 0;
  std::size_t i = 0;
  std::size_t j = 0;
  while (i < a.size() && j < b.size()) {
    const double start = std::max(a[i].start, b[j].start);
    const double end = std::min(a[i].end, b[j].end);
    if (end > start) total += end - start;
    // The one that ends first can overlap nothing further on.
    if (a[i].end < b[j].end) {
      ++i;
    } else {
      ++j;
    }
  }
  return total;
}

}  // namespace fsdptune
